package cli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// DefaultBusCheckInterval is how often the bus buckets are asked whether they answer.
const DefaultBusCheckInterval = 10 * time.Second

// The probe's gauge in each program.
const (
	CoordinatorBusMetric = "edgedrain_coordinator_bus_available"
	AgentBusMetric       = "edgedrain_agent_bus_available"
)

// BusProbe asks the bus's buckets every interval whether they answer. Being connected to a
// NATS server is not enough: on a NATS cluster that lost a quorum of its servers, the server a
// client is connected to still answers, but the buckets (JetStream streams replicated on the
// servers) have no leader and refuse every write. The probe asks for each bucket's stream
// info, which says whether a server leads the stream (or gets no answer), and writes nothing.
//
// The probe keeps a gauge (1: every bucket answered at the last check), logs each change
// once (not each failed check), and is a readiness check (Ready). A bucket whose stream is
// electing a new leader (its leader's server went away; the others keep the quorum) does not
// answer for a few seconds: the first failure is a warning that says so, and only a bus still
// silent after BusSilentFor is an error that names the lost quorum.
type BusProbe struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	buckets []string
	gauge   prometheus.Gauge
	log     logrus.FieldLogger

	mu      sync.Mutex
	err     error // the last check's; nil: answered
	checked bool
	// silentSince is when the checks began to fail (zero: the last one answered); escalated
	// says the error after BusSilentFor was logged.
	silentSince time.Time
	escalated   bool
	// silentFor is BusSilentFor, and now the clock (both set otherwise in tests).
	silentFor time.Duration
	now       func() time.Time
}

// BusSilentFor is how long the bus may not answer before the probe logs it as an error: longer
// than a stream's leader election after one server of a cluster went away.
const BusSilentFor = 30 * time.Second

// NewBusProbe returns a probe of the drain buckets over nc and js, registering gauge name (help
// says what it is for) with reg.
func NewBusProbe(nc *nats.Conn, js jetstream.JetStream, reg prometheus.Registerer, name string, log logrus.FieldLogger) *BusProbe {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name,
		Help: "1 when the bus's buckets answered at the last check; 0 when they do not (e.g. a NATS cluster without a quorum of its servers: writes are refused)"})
	reg.MustRegister(g)
	return &BusProbe{nc: nc, js: js, buckets: []string{nodedrain.RequestsBucket, nodedrain.StatusBucket}, gauge: g, log: log,
		silentFor: BusSilentFor, now: time.Now}
}

// Run checks every interval, less a random tenth (a fleet of agents started together does not
// ask at once), until ctx ends.
func (p *BusProbe) Run(ctx context.Context, interval time.Duration) {
	for {
		p.Check(ctx, min(interval, 5*time.Second))
		t := time.NewTimer(interval - rand.N(interval/10+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Check asks every bucket once, each within timeout, and records the result.
func (p *BusProbe) Check(ctx context.Context, timeout time.Duration) error {
	err := p.ask(ctx, timeout)
	if ctx.Err() != nil {
		return err
	}
	p.mu.Lock()
	was, first, since, escalated := p.err, !p.checked, p.silentSince, p.escalated
	p.mu.Unlock()
	now := p.now()
	// The log line first, then the gauge and the state readiness answers from: whoever sees
	// either change finds the line written. (One loop calls Check.)
	switch {
	case err != nil && (first || was == nil):
		since, escalated = now, false
		p.log.WithError(err).Warn("the bus does not answer: its buckets refuse writes until it does (for a few seconds while a " +
			"bucket elects a new leader after a NATS server went away; until its quorum is back on a cluster that lost it); " +
			"statuses and requests wait, and no drain starts or ends meanwhile")
	case err != nil && !escalated && now.Sub(since) >= p.silentFor:
		escalated = true
		p.log.WithError(err).WithField("since", since.UTC().Format(time.RFC3339)).Errorf("the bus has not answered for %s: "+
			"a NATS cluster without a quorum of its servers? Statuses and requests wait, and no drain starts or ends", now.Sub(since).Round(time.Second))
	case err != nil:
		p.log.WithError(err).Debug("the bus still does not answer")
	case was != nil:
		p.log.WithField("silentFor", now.Sub(since).Round(time.Second).String()).Info("the bus answers again: its buckets take writes")
	}
	if err != nil {
		p.gauge.Set(0)
	} else {
		p.gauge.Set(1)
		since = time.Time{}
	}
	p.mu.Lock()
	p.err, p.checked, p.silentSince, p.escalated = err, true, since, escalated
	p.mu.Unlock()
	return err
}

func (p *BusProbe) ask(ctx context.Context, timeout time.Duration) error {
	if !pubsub.Connected(p.nc) {
		return errors.New("not connected to NATS")
	}
	for _, b := range p.buckets {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		s, err := p.js.Stream(cctx, "KV_"+b)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			// The bus answered; the coordinator creates its buckets when it starts leading.
		case err != nil:
			return fmt.Errorf("bucket %s: %w", b, err)
		case s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == "":
			// Answered from the cluster's records, but no server leads the stream: a write
			// gets no answer.
			return fmt.Errorf("bucket %s: no server leads its stream (a quorum of its servers is unreachable)", b)
		}
	}
	return nil
}

// Ready is a readiness check: connected to NATS, and the buckets answered at the first check
// and the last one. (A coordinator serving the embedded bus must not use it: its readiness
// decides whether the bus's Service sends agents to it.)
func (p *BusProbe) Ready() error {
	if !pubsub.Connected(p.nc) {
		return errors.New("not connected to NATS")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.checked:
		return errors.New("the bus has not been checked yet")
	case p.err != nil:
		return fmt.Errorf("the bus does not answer: %w", p.err)
	}
	return nil
}
