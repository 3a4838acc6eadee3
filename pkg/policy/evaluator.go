package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// EvaluatorConfig configures an Evaluator.
type EvaluatorConfig struct {
	// Source is the policy ConfigMap; nil: the empty policy (no windows, no blockers).
	Source *Source
	// Client lists the pods on a node for the policy's pod selector. Required.
	Client kubernetes.Interface
	// Preflight says what a prediction that something would block does; Predict makes it
	// (pkg/preflight); nil Predict: nothing is predicted.
	Preflight coordinator.Preflight
	Predict   func(ctx context.Context, node string, req nodedrain.NodeDrainRequest) ([]nodedrain.Blocker, error)
	// Every is how often the blockers of waiting drains are checked again (default 5 s); a
	// drain is admitted on a check at most 3 × Every old.
	Every  time.Duration
	Logger logrus.FieldLogger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Evaluator is the maintenance policy as the coordinator asks it (coordinator.Maintenance):
// windows from the policy, blockers and the pre-flight prediction checked in the background
// for each waiting drain (Run), order and failure domains from the policy, and the blockers
// again before COMPLETE.
type Evaluator struct {
	cfg     EvaluatorConfig
	log     logrus.FieldLogger
	kick    chan struct{}
	changed chan struct{}

	mu       sync.Mutex
	waiting  map[string]coordinator.Waiting
	verdicts map[string]coordinator.Verdict
	prom     *PromChecker
	promCfg  *Prometheus // what prom was built from
}

var _ coordinator.Maintenance = (*Evaluator)(nil)

// NewEvaluator returns an Evaluator; Run does its background checks.
func NewEvaluator(cfg EvaluatorConfig) (*Evaluator, error) {
	if cfg.Client == nil {
		return nil, errors.New("policy evaluator: a Kubernetes client is required")
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	return &Evaluator{cfg: cfg, log: log, kick: make(chan struct{}, 1), changed: make(chan struct{}, 1),
		waiting: map[string]coordinator.Waiting{}, verdicts: map[string]coordinator.Verdict{}}, nil
}

// config is the policy in force (nil: none usable) and why not.
func (e *Evaluator) config() (*Config, error) {
	c, _, err := e.state()
	return c, err
}

// state is the policy in force, its generation, and why it cannot be used.
func (e *Evaluator) state() (*Config, uint64, error) {
	if e.cfg.Source == nil {
		return &Config{}, 0, nil
	}
	st := e.cfg.Source.State()
	switch {
	case st.Config != nil:
		return st.Config, st.Generation, nil
	case st.Err != nil:
		return nil, st.Generation, st.Err
	}
	return nil, st.Generation, errors.New("the policy ConfigMap has not been read yet")
}

// needsCheck reports whether admission waits for a background check.
func (e *Evaluator) needsCheck(c *Config) bool {
	return c.Blockers.PodSelector != nil || c.Blockers.Prometheus != nil ||
		(e.cfg.Preflight != coordinator.PreflightOff && e.cfg.Predict != nil)
}

// Admission implements coordinator.Maintenance: it records the waiting drains for the
// background checks, asks for one at once for a drain without a fresh verdict, and decides
// with coordinator.DecideHolds.
func (e *Evaluator) Admission(waiting []coordinator.Waiting, now time.Time) coordinator.AdmissionVerdict {
	c, gen, err := e.state()
	maxAge := 3 * e.cfg.Every
	e.mu.Lock()
	e.waiting = make(map[string]coordinator.Waiting, len(waiting))
	stale := false
	for _, w := range waiting {
		e.waiting[w.Node] = w
		v, ok := e.verdicts[w.Node]
		stale = stale || !ok || v.RequestID != w.Request.RequestID || v.Generation != gen || now.Sub(v.At) > maxAge
	}
	verdicts := maps.Clone(e.verdicts)
	e.mu.Unlock()
	in := coordinator.HoldInput{Waiting: waiting, Now: now, Verdicts: verdicts, MaxAge: maxAge, Preflight: e.cfg.Preflight,
		Invalid: err, Generation: gen}
	if c != nil {
		in.Window = func(r nodedrain.Requester) coordinator.Window { return c.WindowFor(r) }
		in.NeedsCheck = e.needsCheck(c)
		if stale && in.NeedsCheck {
			e.signal(e.kick)
		}
	}
	return coordinator.DecideHolds(in)
}

// Order implements coordinator.Maintenance from the policy's order section.
func (e *Evaluator) Order(nodeLabels map[string]string, r nodedrain.Requester) (int, string) {
	c, _ := e.config()
	if c == nil {
		return 0, ""
	}
	return c.Order.Priority(nodeLabels, r), c.Order.Domain(nodeLabels)
}

// Blockers implements coordinator.Maintenance: the pods on node matching the policy's selector
// and the Prometheus blockers, now. A policy that cannot be used is an error (fail closed).
func (e *Evaluator) Blockers(ctx context.Context, node string) ([]nodedrain.Blocker, error) {
	c, err := e.config()
	if err != nil {
		return nil, fmt.Errorf("maintenance policy: %w", err)
	}
	prom, err := e.promFor(c)
	if err != nil {
		return nil, err
	}
	return NodeBlockers(ctx, e.cfg.Client, c, prom, node, false)
}

// Changed implements coordinator.Maintenance: a background check finished.
func (e *Evaluator) Changed() <-chan struct{} { return e.changed }

// Run checks the waiting drains every Every, and at once when Admission asks, until ctx ends.
// It also rechecks when the policy changes.
func (e *Evaluator) Run(ctx context.Context) error {
	tick := time.NewTicker(e.cfg.Every)
	defer tick.Stop()
	var policyChanged <-chan struct{}
	if e.cfg.Source != nil {
		policyChanged = e.cfg.Source.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.kick:
		case <-tick.C:
		case <-policyChanged:
		}
		e.checkAll(ctx)
		e.signal(e.changed)
	}
}

// checkAll checks every waiting drain: the policy's blockers (Prometheus once for all) and the
// pre-flight prediction.
func (e *Evaluator) checkAll(ctx context.Context) {
	e.mu.Lock()
	waiting := maps.Clone(e.waiting)
	e.mu.Unlock()
	c, gen, cerr := e.state()
	if len(waiting) == 0 || c == nil || cerr != nil || !e.needsCheck(c) {
		return
	}
	started := e.cfg.Now() // the verdicts are as old as the data they were made from
	cctx, cancel := context.WithTimeout(ctx, 3*e.cfg.Every+DefaultPrometheusTimeout)
	defer cancel()
	var cluster []nodedrain.Blocker
	prom, err := e.promFor(c)
	if err == nil && prom != nil {
		cluster, err = prom.Check(cctx)
	}
	for node, w := range waiting {
		v := coordinator.Verdict{RequestID: w.Request.RequestID, Err: err, Generation: gen}
		if err == nil {
			var pods []nodedrain.Blocker
			pods, v.Err = NodeBlockers(cctx, e.cfg.Client, c, nil, node, true)
			v.Blockers = append(pods, cluster...)
		}
		if e.cfg.Preflight != coordinator.PreflightOff && e.cfg.Predict != nil && v.Err == nil {
			predicted, perr := e.cfg.Predict(cctx, node, w.Request)
			switch {
			case perr != nil && e.cfg.Preflight == coordinator.PreflightHold:
				v.Err = fmt.Errorf("pre-flight: %w", perr)
			case perr != nil: // warn: said, not held
				predicted = []nodedrain.Blocker{{Kind: "Preflight", Name: node, Reason: "the pre-flight prediction failed: " + perr.Error()}}
			}
			v.Predicted = predicted
		}
		if v.Err != nil {
			e.log.WithField("node", node).WithError(v.Err).Warn("maintenance policy check failed: the drain waits (fail closed)")
		}
		v.At = started
		e.mu.Lock()
		e.verdicts[node] = v
		e.mu.Unlock()
	}
	e.mu.Lock()
	for node := range e.verdicts {
		if _, ok := e.waiting[node]; !ok {
			delete(e.verdicts, node)
		}
	}
	e.mu.Unlock()
}

// promFor returns the Prometheus checker of c's policy, built again when the policy changed.
func (e *Evaluator) promFor(c *Config) (*PromChecker, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.Blockers.Prometheus == nil {
		return nil, nil
	}
	if e.prom != nil && e.promCfg == c.Blockers.Prometheus {
		return e.prom, nil
	}
	p, err := NewPromChecker(*c.Blockers.Prometheus)
	if err != nil {
		return nil, err
	}
	e.prom, e.promCfg = p, c.Blockers.Prometheus
	return p, nil
}

func (e *Evaluator) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
