package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Bus timings.
const (
	trustedKeysRefresh = 10 * time.Second
	busOpTimeout       = 5 * time.Second
	openBackoffMin     = 500 * time.Millisecond
	openBackoffMax     = 30 * time.Second
	busQueueSize       = 32
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
	boot    string    // the node's boot ID: with before, a request naming another boot is stale
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

	// guard judges every status read or delivered (the watch and the reads run apart).
	guardMu sync.Mutex
	guard   StatusGuard
	// probe asks the API, on a read of the API-unreachable rule's COMPLETE (nil: never).
	probe APIProbe
}

func newBus(js jetstream.JetStream, node string, keys func() nodedrain.KeySet, log logrus.FieldLogger, m *Metrics, out chan<- Event) *bus {
	return &bus{js: js, node: node, log: log, metrics: m, ops: make(chan busOp, busQueueSize), out: out,
		guard: StatusGuard{Keys: keys}}
}

// judge runs the guard on the status st stored at rev (copied: a server copy), counting and
// logging (sampled) a refusal; it reports whether st may be taken.
func (b *bus) judge(st nodedrain.NodeDrainStatus, rev uint64, copied bool) bool {
	return b.verdict(st, rev, copied) == VerdictTake
}

// verdict is judge's, with a stale value told from a refused one.
func (b *bus) verdict(st nodedrain.NodeDrainStatus, rev uint64, copied bool) Verdict {
	b.guardMu.Lock()
	v, err := b.guard.Check(b.node, rev, st, copied)
	b.guardMu.Unlock()
	if v == VerdictRefuse {
		reason := nodedrain.RefusalReason(err)
		b.metrics.RefusedStatuses.WithLabelValues(reason).Inc()
		b.warnings.Logger("status-refused-"+reason, b.log).WithError(err).WithFields(logrus.Fields{
			"status": st.Status, "request": st.RequestID, "revision": rev, "signedBy": st.SignedBy,
		}).Warn("refusing a drain status under this node's key: not one the coordinator wrote for it now")
	}
	return v
}

// judgeDelete runs the guard on the removal of the node's status at rev.
func (b *bus) judgeDelete(rev uint64) bool {
	b.guardMu.Lock()
	defer b.guardMu.Unlock()
	return b.guard.CheckDelete(rev) == VerdictTake
}

// checkedRead is a read of the node's status that went through the bus's copy check and the
// guard: a status to take (nil: the key has none), or nothing to take (refused: a forgery, copy,
// replay or stale value; err without refused: the read failed).
type checkedRead struct {
	status  *nodedrain.NodeDrainStatus
	rev     uint64
	refused bool
	stale   bool // refused as older than what was taken: a replica behind, read again
	err     error
}

// readChecked reads the node's status with the bus's copy check and the guard.
func (b *bus) readChecked(ctx context.Context, statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]) checkedRead {
	st, rev, origin, err := statuses.GetChecked(ctx, b.node)
	switch {
	case errors.Is(err, pubsub.ErrNotFound):
		if !b.judgeDelete(rev) { // (rev 0 too: see StatusGuard.CheckDelete)
			return checkedRead{rev: rev, refused: true, stale: true, err: fmt.Errorf("the status read is older than one already taken (revision %d)", rev)}
		}
		return checkedRead{rev: rev}
	case errors.Is(err, pubsub.ErrDecode):
		return checkedRead{rev: rev, refused: true, err: err}
	case err != nil:
		return checkedRead{err: err}
	}
	switch b.verdict(st, rev, origin == pubsub.Copied) {
	case VerdictStale:
		// A direct get may be answered by a replica that lags (an R3 bucket).
		return checkedRead{rev: rev, refused: true, stale: true, err: fmt.Errorf("the status read (revision %d) is older than one already taken", rev)}
	case VerdictRefuse:
		return checkedRead{rev: rev, refused: true, err: fmt.Errorf("the status read (revision %d) is not one the agent takes", rev)}
	}
	return checkedRead{status: &st, rev: rev}
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
			DecodeErrors: b.metrics.BusDecodeErrors, WriterMark: nodedrain.StatusWriterMark}, nodedrain.StatusCodec{})
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
	go b.forward(ctx, watcher, statuses)
	// The trusted keys are read again now and then even without a status to judge: a rotation
	// shows in the log when the new key arrives, before the coordinator signs with it.
	refresh := time.NewTicker(trustedKeysRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-refresh.C:
			b.guard.Keys()
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
		r := b.readChecked(octx, statuses)
		ev := EvStatusRead{Status: r.status, Revision: r.rev, Err: r.err}
		if r.status != nil && r.status.APIUnreachable && b.probe != nil {
			pctx, cancel := context.WithTimeout(ctx, apiProbeTimeout)
			ev.APIReachable = b.probe(pctx)
			cancel()
		}
		return ev
	case op.publish:
		return EvBusDone{Publish: true, RequestID: op.req.RequestID, Err: b.publish(octx, requests, op.req, op.own, op.before, op.boot)}
	}
	return EvBusDone{RequestID: op.id, Err: b.withdraw(octx, requests, op.own, op.before, op.boot)}
}

// publish writes the node's request unless the key holds a request this agent did not make.
func (b *bus) publish(ctx context.Context, requests *pubsub.Bucket[nodedrain.NodeDrainRequest], req nodedrain.NodeDrainRequest,
	own []string, before time.Time, boot string) error {
	cur, _, err := requests.Get(ctx, b.node)
	switch {
	case errors.Is(err, pubsub.ErrNotFound), errors.Is(err, pubsub.ErrDecode):
	case err != nil:
		return err
	case cur.RequestID != req.RequestID && !slices.Contains(own, cur.RequestID) && !Stale(cur, before, boot):
		return fmt.Errorf("publish request %s: %w (%s)", req.RequestID, ErrForeignRequest, cur.RequestID)
	}
	_, err = requests.Publish(ctx, b.node, req)
	return err
}

// withdraw removes the node's request if it is one this agent made (one of own), at the
// revision read, so that a request another agent published meanwhile stays.
func (b *bus) withdraw(ctx context.Context, requests *pubsub.Bucket[nodedrain.NodeDrainRequest], own []string, before time.Time, boot string) error {
	req, rev, err := requests.Get(ctx, b.node)
	switch {
	case errors.Is(err, pubsub.ErrNotFound):
		return nil
	case errors.Is(err, pubsub.ErrDecode):
		b.log.WithError(err).Warn("leaving an undecodable value under this node's request key (not this agent's)")
		return nil
	case err != nil:
		return err
	case !Stale(req, before, boot) && !slices.Contains(own, req.RequestID) && !before.IsZero():
		return fmt.Errorf("withdraw request %s: %w", req.RequestID, ErrMadeSinceBoot)
	case !Stale(req, before, boot) && !slices.Contains(own, req.RequestID):
		b.log.WithField("request", req.RequestID).Warn("not withdrawing the node's request: this agent did not make it")
		return nil
	}
	return requests.UnpublishRevision(ctx, b.node, rev)
}

// forward turns the status watch's events for this node into machine events. A delivered
// status is taken as a checked read of the key gives it: the watch cannot tell a server copy
// (KV watch entries carry no headers), the read can. When the read fails, the delivery itself
// is judged by its signature and order alone; the agent still acts only after a checked read.
func (b *bus) forward(ctx context.Context, w *pubsub.Watcher[nodedrain.NodeDrainStatus], statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]) {
	live := false // past the first snapshot: a status delivered now was just published
	for ev := range w.Events() {
		if ev.Kind == pubsub.EventReplaced {
			b.guardMu.Lock()
			b.guard.Reset()
			b.guardMu.Unlock()
			b.log.Warn("the status bucket was replaced: statuses taken before are forgotten")
			continue
		}
		if ev.Kind != pubsub.EventSnapshotDone && ev.Key != b.node {
			continue
		}
		switch ev.Kind {
		case pubsub.EventPut:
			st, rev, ok := b.checkDelivery(ctx, statuses, ev)
			if !ok {
				continue
			}
			if st == nil {
				b.send(ctx, EvBusStatus{Revision: rev})
				continue
			}
			if live && !st.UpdatedAt.IsZero() {
				b.metrics.StatusDelay.Observe(max(time.Since(st.UpdatedAt), 0).Seconds())
			}
			b.send(ctx, EvBusStatus{Status: st, Revision: rev})
		case pubsub.EventDelete:
			if b.judgeDelete(ev.Revision) {
				b.send(ctx, EvBusStatus{Revision: ev.Revision})
			}
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

// checkDelivery judges a delivered status: first as delivered (signature and order: a forgery
// is refused even if something newer follows at once), then through a checked read of the key,
// which tells a server copy (KV watch entries carry no headers); what the read gives (this
// revision, or a newer value or delete superseding it) is what is taken. When the read fails
// (three times), the delivery stands on its signature and order: it can move the machine on
// (to ask for its confirmation read), never start a command, which only the answer of a checked
// confirmation read (ReadStatus) can. ok false: nothing to take; a nil status with ok: the key's status was removed since.
func (b *bus) checkDelivery(ctx context.Context, statuses *pubsub.Bucket[nodedrain.NodeDrainStatus],
	ev pubsub.Event[nodedrain.NodeDrainStatus]) (st *nodedrain.NodeDrainStatus, rev uint64, ok bool) {
	v := ev.Value
	if !b.judge(v, ev.Revision, false) {
		return nil, 0, false
	}
	var r checkedRead
	for i, wait := range deliveryReadRetries {
		if i > 0 { // the first read goes at once: no timer on every delivery
			select {
			case <-ctx.Done():
				return nil, 0, false
			case <-time.After(wait):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, busOpTimeout)
		r = b.readChecked(rctx, statuses)
		cancel()
		switch {
		case r.stale, r.err == nil && r.status == nil && r.rev < ev.Revision:
			continue // a replica behind the delivery: read again, then the delivery stands
		case r.refused:
			return nil, 0, false
		case r.err == nil:
			return r.status, max(r.rev, ev.Revision), true
		}
	}
	return &v, ev.Revision, true
}

// deliveryReadRetries are the waits before each checked read of a delivered status: a read that
// fails is tried again twice before the delivery stands on its signature and order alone.
var deliveryReadRetries = []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond} // the first is not waited for
