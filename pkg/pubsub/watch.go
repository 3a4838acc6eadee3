package pubsub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/ratelog"
)

// Backoff between attempts to re-create a broken watch.
const (
	resumeBackoffMin = 100 * time.Millisecond
	resumeBackoffMax = 5 * time.Second
	// freshnessCheck: how often a watch asks how far the bucket is written, to catch a consumer
	// that is alive (its heartbeats come, and say it delivered nothing more) yet delivers
	// nothing new: a replica of the stream that stopped applying it (seen with a NATS cluster
	// regaining its quorum) serves it. A revision written and still not delivered at the next
	// check makes the watch start another consumer.
	freshnessCheck = 2 * consumerHeartbeat
)

// Watcher delivers the events of one watch on a Bucket. It is created by
// Bucket.Watch and ends when its context is cancelled or Stop is called.
//
// A watcher first delivers the current value of every key (keys that were
// unpublished are left out), then one EventSnapshotDone, then every put and
// delete in revision order. A delete is only reported for a key the watcher
// delivered a value (or decode error) for. The bucket keeps BucketConfig.History
// revisions per key: a value overwritten (or unpublished) before the watcher
// received it is skipped, so with History 1 a burst of changes to one key may
// arrive as its last value only. The latest value of every key always
// arrives.
//
// It survives NATS reconnects and server restarts. The JetStream consumer
// behind a watch (see consume) lives in the memory of one server; it is
// taken for lost after two missed heartbeats (10 to 20 s), or at once when a
// delivery goes missing; one alive that delivers nothing while its keys are
// written (a freshness check every 10 s) is taken for lost after 10 to 20 s; a watch of
// every key checks each jump in the revisions its consumer delivers with a new consumer (see
// inner.contiguous).
// A Watcher re-creates it then, and as soon as the connection is back, starting right after the last revision it delivered: the changes
// made meanwhile arrive in order (subject to History as above), none twice,
// and the latest value of every key is never lost. If the bucket itself was
// replaced (deleted and created again, or the server came back without its
// store), the watcher reads every key again: callers get current values
// again and a delete for each key that no longer exists.
type Watcher[T any] struct {
	b       *Bucket[T]
	keys    []string // watched keys; none: all
	nc      *nats.Conn
	log     logrus.FieldLogger
	events  chan Event[T]
	cancel  context.CancelFunc
	done    chan struct{}
	resumes atomic.Uint64
	// warnings samples the log lines about single payloads; the metric counts them all.
	warnings ratelog.Limiter

	mu  sync.Mutex
	err error
}

// Watch starts watching the given keys of the bucket, or every key if none is given (a
// client allowed to read only its own key watches only that). It fails only if the first
// watch cannot be created; later interruptions are repaired in the background.
func (b *Bucket[T]) Watch(ctx context.Context, keys ...string) (*Watcher[T], error) {
	for _, k := range keys {
		if err := ValidKey(k); err != nil {
			return nil, fmt.Errorf("watch %s: %w", b.name, err)
		}
	}
	nc := b.js.Conn()
	ctx, cancel := context.WithCancel(ctx)
	// Listen before the first watch exists so no reconnect is missed.
	status := nc.StatusChanged(nats.CONNECTED)
	fail := func(err error) (*Watcher[T], error) {
		nc.RemoveStatusListener(status)
		cancel()
		return nil, fmt.Errorf("watch %s: %w", b.name, err)
	}
	created, _, err := b.streamState(ctx)
	if err != nil {
		return fail(err)
	}
	in, err := b.startInner(ctx, keys, 0)
	if err != nil {
		return fail(err)
	}
	w := &Watcher[T]{
		b:      b,
		keys:   slices.Clone(keys),
		nc:     nc,
		log:    b.log,
		events: make(chan Event[T], 64),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	st := &watchState{created: created, present: map[string]struct{}{}}
	go w.run(ctx, status, in, st)
	return w, nil
}

// startInner creates the consumer of a watch: a snapshot of the last value per key when from
// is 0, else every message from revision from on.
func (b *Bucket[T]) startInner(ctx context.Context, keys []string, from uint64) (*inner, error) {
	return b.consume(ctx, consumeOpts{keys: keys, from: from})
}

// streamState returns when the bucket's stream was created and its last
// revision.
func (b *Bucket[T]) streamState(ctx context.Context) (created time.Time, lastRev uint64, err error) {
	st, err := b.kv.Status(ctx)
	if err != nil {
		return time.Time{}, 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0, nil
	}
	info := bs.StreamInfo()
	return info.Created, info.State.LastSeq, nil
}

// Events returns the event channel; it is closed when the watch ends.
func (w *Watcher[T]) Events() <-chan Event[T] { return w.events }

// Stop ends the watch, waits until the event channel is closed and returns
// nil; it is safe to call more than once.
func (w *Watcher[T]) Stop() error {
	w.cancel()
	<-w.done
	return nil
}

// Err returns why the watch ended on its own (the NATS connection was
// closed); it is nil while the watch runs and after Stop or cancellation.
func (w *Watcher[T]) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Resumes returns how many times the watch was re-created after a reconnect
// or an interrupted consumer.
func (w *Watcher[T]) Resumes() uint64 { return w.resumes.Load() }

func (w *Watcher[T]) run(ctx context.Context, status chan nats.Status, in *inner, st *watchState) {
	defer close(w.done)
	defer close(w.events)
	defer w.nc.RemoveStatusListener(status)

	reconnected := (<-chan nats.Status)(status) // set to nil if ever closed
	backoff, lostBackoff := resumeBackoffMin, resumeBackoffMin
	fresh := time.NewTicker(freshnessCheck)
	defer fresh.Stop()
	// behind is a revision on the bus not yet delivered as of the last check, and checkedRev the
	// last revision delivered then (freshness check, below).
	var behind, checkedRev uint64
	// checkedGap is the last gap in a consumer's deliveries handed to a new consumer to check
	// (see inner.contiguous): the same gap from it was a deletion.
	var checkedGap revGap
	failing := false
	started := time.Now() // the current consumer's creation
	for {
		if in == nil {
			if w.nc.IsClosed() {
				w.mu.Lock()
				w.err = fmt.Errorf("watch %s: %w", w.b.name, nats.ErrConnectionClosed)
				w.mu.Unlock()
				w.log.Warn("watch ended: nats connection closed")
				return
			}
			var err error
			in, err = w.resume(ctx, st)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				entry := w.log.WithError(err).WithField("revision", st.lastRev)
				if !failing {
					entry.Warn("watch interrupted; retrying")
					failing = true
				} else {
					entry.Debug("watch retry failed")
				}
				select {
				case <-ctx.Done():
					return
				case _, ok := <-reconnected: // retry at once
					if !ok {
						reconnected = nil
					}
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, resumeBackoffMax)
				continue
			}
			backoff, failing = resumeBackoffMin, false
			w.resumes.Add(1)
			started = time.Now()
			behind = 0 // (a new consumer gets a whole period before it is judged)
			fresh.Reset(freshnessCheck)
		}

		select {
		case <-ctx.Done():
			in.stop()
			return
		case _, ok := <-reconnected:
			if !ok {
				reconnected = nil
				continue
			}
			// The consumer may have died with a restarted server; its missed
			// heartbeats would tell only later. Re-create it now.
			in.stop()
			in = nil
		case <-in.ended:
			// The consumer was lost (its server restarted, a delivery went missing) or the
			// connection closed: start again after the last revision delivered. One lost soon
			// after it was made waits (growing) first: whatever ends consumers at once must not
			// make the watch ask the server for new ones without pause.
			w.log.WithError(in.err).Debug("watch consumer ended")
			if time.Since(started) < resumeBackoffMax {
				select {
				case <-ctx.Done():
					return
				case <-time.After(lostBackoff):
				}
				lostBackoff = min(2*lostBackoff, resumeBackoffMax)
			} else {
				lostBackoff = resumeBackoffMin
			}
			in = nil
			continue
		case <-fresh.C:
			// Stuck, not slow: nothing delivered for a whole period (a caller reading slowly
			// delivers less, not nothing) and nothing handed on waiting, while a revision
			// written before the period began is still missing. A failed read keeps what the
			// last one found: the reads fail most while a cluster regains its quorum.
			latest, err := w.latest(ctx)
			if err != nil {
				w.warnings.Logger("freshness", w.log).WithError(err).Debug("watch freshness check failed")
				latest = behind
			}
			stuck := behind != 0 && st.lastRev < behind && st.lastRev == checkedRev && len(in.updates) == 0
			if latest > st.lastRev {
				behind = latest
			} else {
				behind = 0
			}
			checkedRev = st.lastRev
			if stuck {
				w.warnings.Logger("stuck", w.log).WithFields(logrus.Fields{"revision": st.lastRev, "written": behind}).
					Warn("watch consumer alive but delivering nothing: the bucket was written after the last revision it delivered, " +
						"and nothing came for a whole check; starting another")
				in.stop()
				in = nil
			}
		case e := <-in.updates:
			if e != nil && e.gapAfter != 0 && e.gapAfter >= st.lastRev {
				if gap := (revGap{e.gapAfter, e.rev}); gap != checkedGap {
					// Deleted meanwhile, or skipped: a new consumer from right after the last
					// revision taken delivers them if they are there, or this one again.
					w.log.WithFields(logrus.Fields{"revision": st.lastRev, "delivered": e.rev}).
						Debug("watch consumer delivered past revisions it did not deliver; checking with another")
					checkedGap = gap
					in.stop()
					in = nil
					continue
				}
			}
			if e != nil && checkedGap.after != 0 && e.rev < checkedGap.rev && e.rev > checkedGap.after {
				w.warnings.Logger("skipped", w.log).WithFields(logrus.Fields{"from": e.rev, "delivered": checkedGap.rev}).
					Warn("a watch consumer had skipped revisions (a NATS server caught its copy of the stream up without delivering them); another delivers them now")
				checkedGap = revGap{}
			}
			for _, ev := range apply(st, w.b, e) {
				if ev.Kind == EventDecodeError {
					// The caller gets the event and the metric; log quietly, and a sample only.
					w.warnings.Logger("undecodable", w.log).WithError(ev.Err).WithField("key", ev.Key).Debug("undecodable payload")
				}
				select {
				case w.events <- ev:
				case <-ctx.Done():
					in.stop()
					return
				}
			}
		}
	}
}

// revGap is a consumer's delivery of rev right after after, with revisions between them.
type revGap struct{ after, rev uint64 }

// latest is the last revision written to what the watch watches: the stream's last sequence
// for a watch of every key, else the last revision of each of its keys (a direct get, which a
// client allowed to read only its own key may make). A replica that lags answers behind, never
// ahead.
func (w *Watcher[T]) latest(ctx context.Context) (uint64, error) {
	if len(w.keys) == 0 {
		ctx, cancel := context.WithTimeout(ctx, directGetTimeout)
		defer cancel()
		_, last, err := w.b.streamState(ctx)
		return last, err
	}
	var last uint64
	for _, key := range w.keys {
		rev, err := w.b.revisionOf(ctx, key)
		if err != nil {
			return 0, err
		}
		last = max(last, rev)
	}
	return last, nil
}

// revisionOf is the revision of key's last message (a delete marker's too; 0: none), as a direct
// get answers it, without decoding the value: a forgery under the key would otherwise count as
// an undecodable value at every check.
func (b *Bucket[T]) revisionOf(ctx context.Context, key string) (uint64, error) {
	_, reply, err := b.directGet(ctx, key)
	if err != nil {
		return 0, err
	}
	rev, err := b.storedRevision(key, reply.Header)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	return rev, err
}

// resume re-creates the underlying watch after the last delivered revision,
// or from scratch when the bucket was replaced since.
func (w *Watcher[T]) resume(ctx context.Context, st *watchState) (*inner, error) {
	created, last, err := w.b.streamState(ctx)
	if err != nil {
		return nil, err
	}
	from := st.lastRev + 1
	if !created.Equal(st.created) || last < st.lastRev {
		w.log.WithField("revision", st.lastRev).Warn("bucket was replaced; reading every key again")
		st.startResync(created)
		from = 0
		select {
		case w.events <- Event[T]{Kind: EventReplaced}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	} else if !st.snapshotDone && st.lastRev == 0 {
		from = 0 // nothing delivered yet: a plain snapshot
	}
	in, err := w.b.startInner(ctx, w.keys, from)
	if err != nil {
		return nil, err
	}
	w.log.WithField("revision", from).Info("watch resumed")
	return in, nil
}
