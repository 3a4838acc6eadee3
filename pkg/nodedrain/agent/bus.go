package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Bus timings.
const (
	busOpTimeout   = 5 * time.Second
	openBackoffMin = 500 * time.Millisecond
	openBackoffMax = 30 * time.Second
	busQueueSize   = 32
)

// errBusQueueFull is the result of a bus action queued while too many wait.
var errBusQueueFull = errors.New("too many bus operations waiting")

// busOp is one publish or withdrawal of the node's request, or a read of its status.
type busOp struct {
	publish bool
	read    bool
	req     nodedrain.NodeDrainRequest
	id      string
	own     []string  // withdraw only a request with one of these IDs
	before  time.Time // also withdraw any request made before this time (zero: none)
}

// bus does the agent's NATS work in the background: it opens both buckets (retrying until the
// bus answers), watches the node's status and performs publishes and withdrawals in order.
// Everything it learns goes to out as machine events.
type bus struct {
	js      jetstream.JetStream
	node    string
	log     logrus.FieldLogger
	metrics *Metrics
	ops     chan busOp
	out     chan<- Event

	// warnings samples the warnings about single status payloads; metrics count them all.
	warnings ratelog.Limiter
}

func newBus(js jetstream.JetStream, node string, log logrus.FieldLogger, m *Metrics, out chan<- Event) *bus {
	return &bus{js: js, node: node, log: log, metrics: m, ops: make(chan busOp, busQueueSize), out: out}
}

// enqueue queues op without blocking; it fails when the queue is full.
func (b *bus) enqueue(op busOp) error {
	select {
	case b.ops <- op:
		return nil
	default:
		return errBusQueueFull
	}
}

func (b *bus) send(ctx context.Context, ev Event) {
	select {
	case b.out <- ev:
	case <-ctx.Done():
	}
}

// run works until ctx ends.
func (b *bus) run(ctx context.Context) {
	var requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	var statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
	var watcher *pubsub.Watcher[nodedrain.NodeDrainStatus]
	b.retry(ctx, "open the bus buckets", func() error {
		var err error
		requests, err = pubsub.OpenBucket(ctx, b.js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, Logger: b.log, OpenOnly: true},
			nodedrain.RequestCodec{})
		if err != nil {
			return err
		}
		statuses, err = pubsub.OpenBucket(ctx, b.js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, Logger: b.log, OpenOnly: true,
			DecodeErrors: b.metrics.BusDecodeErrors}, nodedrain.StatusCodec{})
		if err != nil {
			return err
		}
		watcher, err = statuses.Watch(ctx, b.node) // this node's status only
		return err
	})
	if ctx.Err() != nil {
		return
	}
	defer func() { _ = watcher.Stop() }()
	b.log.Info("bus buckets open; watching this node's drain status")
	go b.forward(ctx, watcher)
	for {
		select {
		case <-ctx.Done():
			return
		case op := <-b.ops:
			b.send(ctx, b.do(ctx, requests, statuses, op))
		}
	}
}

// retry calls f until it succeeds or ctx ends, backing off; the first failure is logged as a
// warning, later ones at debug level.
func (b *bus) retry(ctx context.Context, what string, f func() error) {
	wait := openBackoffMin
	for failures := 0; ctx.Err() == nil; failures++ {
		err := f()
		if err == nil {
			return
		}
		entry := b.log.WithError(err)
		if failures == 0 {
			entry.Warnf("cannot %s yet; retrying in the background", what)
		} else {
			entry.Debugf("cannot %s yet", what)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, openBackoffMax)
	}
}

func (b *bus) do(ctx context.Context, requests *pubsub.Bucket[nodedrain.NodeDrainRequest],
	statuses *pubsub.Bucket[nodedrain.NodeDrainStatus], op busOp) Event {
	octx, cancel := context.WithTimeout(ctx, busOpTimeout)
	defer cancel()
	switch {
	case op.read:
		st, rev, err := statuses.Get(octx, b.node)
		switch {
		case errors.Is(err, pubsub.ErrNotFound):
			return EvStatusRead{}
		case err != nil:
			return EvStatusRead{Err: err}
		case st.Node != b.node:
			return EvStatusRead{Err: fmt.Errorf("the status under this node's key names node %q", st.Node)}
		}
		return EvStatusRead{Status: &st, Revision: rev}
	case op.publish:
		return EvBusDone{Publish: true, RequestID: op.req.RequestID, Err: b.publish(octx, requests, op.req, op.own)}
	}
	return EvBusDone{RequestID: op.id, Err: b.withdraw(octx, requests, op.own, op.before)}
}

// publish writes the node's request unless the key holds a request this agent did not make.
func (b *bus) publish(ctx context.Context, requests *pubsub.Bucket[nodedrain.NodeDrainRequest], req nodedrain.NodeDrainRequest, own []string) error {
	cur, _, err := requests.Get(ctx, b.node)
	switch {
	case errors.Is(err, pubsub.ErrNotFound), errors.Is(err, pubsub.ErrDecode):
	case err != nil:
		return err
	case cur.RequestID != req.RequestID && !slices.Contains(own, cur.RequestID):
		return fmt.Errorf("publish request %s: %w (%s)", req.RequestID, ErrForeignRequest, cur.RequestID)
	}
	_, err = requests.Publish(ctx, b.node, req)
	return err
}

// withdraw removes the node's request if it is one this agent made (one of own), at the
// revision read, so that a request another agent published meanwhile stays.
func (b *bus) withdraw(ctx context.Context, requests *pubsub.Bucket[nodedrain.NodeDrainRequest], own []string, before time.Time) error {
	req, rev, err := requests.Get(ctx, b.node)
	switch {
	case errors.Is(err, pubsub.ErrNotFound):
		return nil
	case errors.Is(err, pubsub.ErrDecode):
		b.log.WithError(err).Warn("leaving an undecodable value under this node's request key (not this agent's)")
		return nil
	case err != nil:
		return err
	case !Stale(req, before) && !slices.Contains(own, req.RequestID):
		b.log.WithField("request", req.RequestID).Warn("not withdrawing the node's request: this agent did not make it")
		return nil
	}
	return requests.UnpublishRevision(ctx, b.node, rev)
}

// forward turns the status watch's events for this node into machine events.
func (b *bus) forward(ctx context.Context, w *pubsub.Watcher[nodedrain.NodeDrainStatus]) {
	live := false // past the first snapshot: a status delivered now was just published
	for ev := range w.Events() {
		if ev.Kind != pubsub.EventSnapshotDone && ev.Key != b.node {
			continue
		}
		switch ev.Kind {
		case pubsub.EventPut:
			if ev.Value.Node != b.node {
				b.metrics.BusDecodeErrors.Inc()
				b.warnings.Logger("status-wrong-node", b.log).WithField("status", ev.Value.Status).Warnf("ignoring a drain status for node %q published under this node's key", ev.Value.Node)
				continue
			}
			st := ev.Value
			if live && !st.UpdatedAt.IsZero() {
				b.metrics.StatusDelay.Observe(max(time.Since(st.UpdatedAt), 0).Seconds())
			}
			b.send(ctx, EvBusStatus{Status: &st, Revision: ev.Revision})
		case pubsub.EventDelete:
			b.send(ctx, EvBusStatus{Revision: ev.Revision})
		case pubsub.EventSnapshotDone:
			live = true
			b.send(ctx, EvBusSnapshot{})
		case pubsub.EventDecodeError:
			b.warnings.Logger("status-undecodable", b.log).WithError(ev.Err).Warn("ignoring a drain status for this node that does not decode")
		}
	}
	if err := w.Err(); err != nil && ctx.Err() == nil {
		b.log.WithError(err).Error("status watch ended")
	}
}
