package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Defaults of SourceConfig.
const (
	// DefaultNamespace is the namespace of the policy ConfigMap.
	DefaultNamespace = "edgedrain-system"
	// DefaultName is the name of the policy ConfigMap.
	DefaultName = "edgedrain-policy"
	// DefaultKey is the key of the policy in the ConfigMap's data.
	DefaultKey = "policy.yaml"
)

// Reload results, the values of the result label of edgedrain_policy_config_reloads_total.
const (
	// ReloadOK counts changes that left a valid policy in force (also the ConfigMap's absence).
	ReloadOK = "ok"
	// ReloadInvalid counts changes to a policy that did not parse; the last valid one stays.
	ReloadInvalid = "invalid"
)

// eventReasonInvalid is the reason of the Warning Event on a ConfigMap whose policy is invalid.
const eventReasonInvalid = "InvalidPolicy"

// maxEventMessage bounds the Event message (the API keeps messages short).
const maxEventMessage = 1000

// SourceConfig configures a Source.
type SourceConfig struct {
	// Client reads the ConfigMap. Required.
	Client kubernetes.Interface
	// Namespace and Name locate the ConfigMap (both required; DefaultNamespace and
	// DefaultName in the deployment).
	Namespace, Name string
	// Key is the data key holding the policy; empty: DefaultKey.
	Key string
	// Registerer receives the metrics edgedrain_policy_config_valid and
	// edgedrain_policy_config_reloads_total; nil: not registered.
	Registerer prometheus.Registerer
	// Recorder records a Warning Event on the ConfigMap when its policy is invalid; nil: none.
	Recorder record.EventRecorder
	// Logger receives a line per change (fields configmap, generation); nil: discarded.
	Logger logrus.FieldLogger
}

// State is what a Source knows of the policy.
type State struct {
	// Config is the policy in force: the last valid one; the empty Config (no restrictions)
	// while the ConfigMap is absent; nil when the ConfigMap exists but never held a valid
	// policy, and before the first list (Generation 0). A caller should hold drains back while
	// it is nil. Do not modify it.
	Config *Config
	// Err is the problem with the ConfigMap's current content (invalid policy, missing key,
	// data in binaryData), nil when Config is its content. It matches ErrInvalid or
	// ErrMissingKey.
	Err error
	// Generation counts the changes of the ConfigMap's policy content (including appearing
	// and disappearing), starting at 1 once the first list is done.
	Generation uint64
}

// Source watches one ConfigMap and keeps the last valid policy from it. Create it with
// NewSource, start it with Run, and read it with State; Changed signals each change.
type Source struct {
	cfg     SourceConfig
	log     logrus.FieldLogger
	valid   prometheus.Gauge
	reloads *prometheus.CounterVec
	changed chan struct{}
	synced  chan struct{}
	running atomic.Bool

	mu    sync.Mutex
	state State
	seen  content // what state was computed from (Run's goroutine only)
}

// content is what a Source derives its state from: whether the ConfigMap exists and what it
// holds under the key.
type content struct {
	exists   bool
	inData   bool
	value    string
	inBinary bool
}

// NewSource checks cfg and returns a Source that has not started; its metrics are
// registered now.
func NewSource(cfg SourceConfig) (*Source, error) {
	if cfg.Key == "" {
		cfg.Key = DefaultKey
	}
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	for what, v := range map[string]string{"namespace": cfg.Namespace, "name": cfg.Name} {
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("ConfigMap %s %q: %v", what, v, msgs))
		}
	}
	if msgs := validation.IsConfigMapKey(cfg.Key); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("ConfigMap key %q: %v", cfg.Key, msgs))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSourceConfig, errors.Join(errs...))
	}
	s := &Source{
		cfg: cfg,
		log: cfg.Logger,
		valid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgedrain_policy_config_valid",
			Help: "1 when the maintenance policy ConfigMap holds a valid policy (or is absent), 0 when its content is invalid and the last valid policy stays in force (0 before the first list).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_policy_config_reloads_total",
			Help: "Changes of the maintenance policy ConfigMap, by result (ok: in force; invalid: refused, the last valid policy stays).",
		}, []string{"result"}),
		changed: make(chan struct{}, 1),
		synced:  make(chan struct{}),
	}
	if s.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		s.log = l
	}
	s.log = s.log.WithField("configmap", cfg.Namespace+"/"+cfg.Name)
	s.reloads.WithLabelValues(ReloadOK)
	s.reloads.WithLabelValues(ReloadInvalid)
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.valid, s.reloads} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register policy metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run watches the ConfigMap (an informer restricted to its name) until ctx ends, then
// returns nil. It fails only when called twice.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0,
		informers.WithNamespace(s.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.cfg.Name).String()
		}))
	inf := factory.Core().V1().ConfigMaps()
	wake := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	reg, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { poke(obj) },
		DeleteFunc: poke,
	})
	if err != nil {
		return fmt.Errorf("watch policy ConfigMap: %w", err)
	}
	lister := inf.Lister().ConfigMaps(s.cfg.Namespace)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return nil
	}
	// The handlers read nothing: each wake-up reads the cache, which is at least as new as
	// the event, so a burst of events ends in one look at the latest object.
	s.reconcile(lister.Get(s.cfg.Name))
	close(s.synced)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			s.reconcile(lister.Get(s.cfg.Name))
		}
	}
}

// WaitSynced returns nil once Run has read the ConfigMap (or found it absent) for the first
// time, or ctx's error.
func (s *Source) WaitSynced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// State returns the current state.
func (s *Source) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Changed returns a channel that receives a value after each change of State (several
// changes between two receives leave one value).
func (s *Source) Changed() <-chan struct{} { return s.changed }

// reconcile derives the state from the ConfigMap (err from the cache: absent) when what it
// holds under the key changed.
func (s *Source) reconcile(cm *corev1.ConfigMap, err error) {
	var c content
	switch {
	case apierrors.IsNotFound(err):
	case err != nil: // a lister returns nothing else; treat it as absent, but say so
		s.log.WithError(err).Warn("reading the maintenance policy ConfigMap from the cache failed; treating it as absent")
	default:
		c.exists = true
		c.value, c.inData = cm.Data[s.cfg.Key]
		_, c.inBinary = cm.BinaryData[s.cfg.Key]
	}
	s.mu.Lock()
	if s.state.Generation > 0 && c == s.seen {
		s.mu.Unlock()
		return
	}
	first := s.state.Generation == 0
	s.seen = c
	next := State{Config: s.state.Config, Generation: s.state.Generation + 1}
	if !c.exists {
		next.Config = &Config{}
	} else if cfg, perr := s.parse(cm, c); perr != nil {
		next.Err = perr
	} else {
		next.Config = cfg
	}
	s.state = next
	s.mu.Unlock()

	log := s.log.WithField("generation", next.Generation)
	switch {
	case !c.exists && first:
		log.Info("no maintenance policy ConfigMap: no windows, blockers or order")
	case !c.exists:
		log.Info("maintenance policy ConfigMap deleted: back to no windows, blockers or order")
	case next.Err != nil && next.Config == nil:
		log.WithError(next.Err).Warn("maintenance policy is invalid and there is no valid one to keep: drains wait until it is fixed")
	case next.Err != nil:
		log.WithError(next.Err).Warn("maintenance policy is invalid: keeping the last valid one")
	default:
		log.WithField("windows", describeWindows(next.Config)).Info("maintenance policy loaded")
	}
	if next.Err != nil {
		s.valid.Set(0)
		s.reloads.WithLabelValues(ReloadInvalid).Inc()
		if s.cfg.Recorder != nil {
			kept := "keeping the last valid policy"
			if next.Config == nil {
				kept = "no valid policy yet: drains wait"
			}
			s.cfg.Recorder.Event(cm, corev1.EventTypeWarning, eventReasonInvalid, abbreviate(next.Err.Error()+"; "+kept, maxEventMessage))
		}
	} else {
		s.valid.Set(1)
		s.reloads.WithLabelValues(ReloadOK).Inc()
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// parse returns the policy under the key, or why there is none.
func (s *Source) parse(cm *corev1.ConfigMap, c content) (*Config, error) {
	if !c.inData {
		if c.inBinary {
			return nil, fmt.Errorf("%w: key %q is in binaryData; put the policy in data as text", ErrMissingKey, s.cfg.Key)
		}
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("%w: no key %q in data (keys: %s)", ErrMissingKey, s.cfg.Key, abbreviate(fmt.Sprint(keys), 200))
	}
	cfg, err := Parse([]byte(c.value))
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", s.cfg.Key, err)
	}
	return cfg, nil
}

// describeWindows summarises a policy's windows for the log: "default=Mon-Fri 22:00-04:00 UTC".
func describeWindows(c *Config) string {
	keys := make([]string, 0, len(c.Windows))
	for k := range c.Windows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := ""
	for _, k := range keys {
		if out != "" {
			out += ", "
		}
		out += k + "=" + c.Windows[k].String()
	}
	if out == "" {
		return "always"
	}
	return out
}
