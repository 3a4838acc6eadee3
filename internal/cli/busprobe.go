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
// once (not each failed check), and is a readiness check (Ready).
type BusProbe struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	buckets []string
	gauge   prometheus.Gauge
	log     logrus.FieldLogger

	mu      sync.Mutex
	err     error // the last check's; nil: answered
	checked bool
}

// NewBusProbe returns a probe of the drain buckets over nc and js, registering gauge name (help
// says what it is for) with reg.
func NewBusProbe(nc *nats.Conn, js jetstream.JetStream, reg prometheus.Registerer, name string, log logrus.FieldLogger) *BusProbe {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name,
		Help: "1 when the bus's buckets answered at the last check; 0 when they do not (e.g. a NATS cluster without a quorum of its servers: writes are refused)"})
	reg.MustRegister(g)
	return &BusProbe{nc: nc, js: js, buckets: []string{nodedrain.RequestsBucket, nodedrain.StatusBucket}, gauge: g, log: log}
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
	was, first := p.err, !p.checked
	p.mu.Unlock()
	// The log line first, then the gauge and the state readiness answers from: whoever sees
	// either change finds the line written. (One loop calls Check.)
	switch {
	case err != nil:
		if first || was == nil {
			p.log.WithError(err).Error("the bus does not answer: its buckets refuse writes until it does (a NATS cluster without a quorum of its servers?); statuses and requests wait, and no drain starts or ends")
		} else {
			p.log.WithError(err).Debug("the bus still does not answer")
		}
		p.gauge.Set(0)
	default:
		if was != nil {
			p.log.Info("the bus answers again: its buckets take writes")
		}
		p.gauge.Set(1)
	}
	p.mu.Lock()
	p.err, p.checked = err, true
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
