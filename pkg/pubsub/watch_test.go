package pubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestWatchEmptyBucketGivesOnlySnapshotMarker(t *testing.T) {
	_, _, b := setup(t, "empty", pubsub.BucketConfig{})
	w := watch(t, b)
	ev := expectEvents(t, w, snapshotDone())
	require.Zero(t, ev[0].Revision)

	// The next event is the first put: nothing came in between.
	publish(t, b, "node-1", 1)
	expectEvents(t, w, put("node-1", 1))
}

func TestWatchLateWatcherGetsCurrentValues(t *testing.T) {
	for _, history := range []int{1, 5} {
		t.Run(fmt.Sprintf("history %d", history), func(t *testing.T) {
			_, _, b := setup(t, "late", pubsub.BucketConfig{History: history})
			ctx := testCtx(t)
			publish(t, b, "edge-1.shop.example.com", 1)
			publish(t, b, "edge-1.shop.example.com", 2)
			publish(t, b, "node-b", 1)
			publish(t, b, "gone", 1)
			require.NoError(t, b.Unpublish(ctx, "gone"))
			require.NoError(t, b.Unpublish(ctx, "never-there"))

			w := watch(t, b)
			evs := expectEvents(t, w,
				put("edge-1.shop.example.com", 2),
				put("node-b", 1),
				snapshotDone(),
			)
			require.Less(t, evs[0].Revision, evs[1].Revision)
			// The marker carries the revision the snapshot is complete up to,
			// including the unreported deletes.
			require.Greater(t, evs[2].Revision, evs[1].Revision)

			// A key deleted before the watch reappears as a plain put.
			publish(t, b, "gone", 2)
			expectEvents(t, w, put("gone", 2))
		})
	}
}

func TestWatchDeliversPutsAndDeletesInOrder(t *testing.T) {
	// History keeps every revision until the watcher has it; with History 1
	// a value overwritten before delivery is skipped (see the burst test).
	_, _, b := setup(t, "order", pubsub.BucketConfig{History: 10})
	ctx := testCtx(t)
	w := watch(t, b)
	expectEvents(t, w, snapshotDone())

	a, c := "edge-1.shop.example.com", "edge-2.shop.example.com"
	publish(t, b, a, 1)
	publish(t, b, c, 1)
	require.NoError(t, b.Unpublish(ctx, a))
	publish(t, b, c, 2)
	publish(t, b, a, 3)
	require.NoError(t, b.Unpublish(ctx, c))

	evs := expectEvents(t, w,
		put(a, 1), put(c, 1), del(a), put(c, 2), put(a, 3), del(c),
	)
	for i := 1; i < len(evs); i++ {
		require.Greater(t, evs[i].Revision, evs[i-1].Revision)
	}
}

func TestWatchDecodeErrorDoesNotStopTheWatch(t *testing.T) {
	for _, when := range []string{"in snapshot", "after snapshot"} {
		t.Run(when, func(t *testing.T) {
			counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "decode_errors_total", Help: "test"})
			_, js, b := setup(t, "corrupt", pubsub.BucketConfig{DecodeErrors: counter, History: 5})
			ctx := testCtx(t)
			raw, err := js.KeyValue(ctx, "corrupt")
			require.NoError(t, err)
			writeCorrupt := func() {
				_, err := raw.Put(ctx, "edge-1.shop.example.com", []byte(`{"n":"not a number"`))
				require.NoError(t, err)
			}

			var w *pubsub.Watcher[record]
			if when == "in snapshot" {
				writeCorrupt()
				w = watch(t, b)
			} else {
				w = watch(t, b)
				expectEvents(t, w, snapshotDone())
				writeCorrupt()
			}

			ev := nextEvent(t, w)
			require.Equal(t, pubsub.EventDecodeError, ev.Kind)
			require.Equal(t, "edge-1.shop.example.com", ev.Key)
			require.NotZero(t, ev.Revision)
			require.ErrorIs(t, ev.Err, pubsub.ErrDecode)
			require.Contains(t, ev.Err.Error(), "edge-1.shop.example.com")
			require.Contains(t, ev.Err.Error(), "unexpected end of JSON input", "underlying reason is kept")
			if when == "in snapshot" {
				expectEvents(t, w, snapshotDone())
			}
			require.Equal(t, uint64(1), b.DecodeErrorCount())
			require.Equal(t, 1.0, counterValue(t, counter))

			publish(t, b, "edge-1.shop.example.com", 7)
			require.NoError(t, b.Unpublish(ctx, "edge-1.shop.example.com"))
			expectEvents(t, w, put("edge-1.shop.example.com", 7), del("edge-1.shop.example.com"))
		})
	}
}

func TestWatchEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(cancel context.CancelFunc, w *pubsub.Watcher[record])
	}{
		{"Stop", func(_ context.CancelFunc, w *pubsub.Watcher[record]) { _ = w.Stop() }},
		{"context cancelled", func(cancel context.CancelFunc, _ *pubsub.Watcher[record]) { cancel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, b := setup(t, "ends", pubsub.BucketConfig{})
			publish(t, b, "node-1", 1)
			ctx, cancel := context.WithCancel(testCtx(t))
			w, err := b.Watch(ctx)
			require.NoError(t, err)
			// End the watch without reading: it must not block on the
			// undelivered events.
			tt.end(cancel, w)
			require.Eventually(t, func() bool {
				for {
					select {
					case _, ok := <-w.Events():
						if !ok {
							return true
						}
					default:
						return false
					}
				}
			}, eventTimeout, 10*time.Millisecond, "event channel closed")
			require.NoError(t, w.Stop(), "Stop after the end is harmless")
			require.NoError(t, w.Err())
		})
	}
}

func TestWatchEndsWhenConnectionCloses(t *testing.T) {
	srv, _, _ := setup(t, "closed", pubsub.BucketConfig{})
	nc, js := testenv.ConnectNATS(t, srv.ClientURL())
	other, err := pubsub.OpenBucket[record](testCtx(t), js, pubsub.BucketConfig{Name: "closed"}, nil)
	require.NoError(t, err)
	w, err := other.Watch(testCtx(t))
	require.NoError(t, err)
	expectEvents(t, w, snapshotDone())

	nc.Close()
	require.Eventually(t, func() bool {
		select {
		case _, ok := <-w.Events():
			return !ok
		default:
			return false
		}
	}, eventTimeout, 10*time.Millisecond)
	require.ErrorContains(t, w.Err(), "connection closed")
}

// With History 1 a value overwritten before a watcher received it is skipped,
// but the watcher always converges on the bucket's contents and never reports
// a delete for a key it did not deliver.
func TestWatchConvergesUnderBursts(t *testing.T) {
	_, _, b := setup(t, "burst", pubsub.BucketConfig{History: 1})
	ctx := testCtx(t)
	w := watch(t, b)
	expectEvents(t, w, snapshotDone())

	want := map[string]record{}
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("edge-%d.shop.example.com", i%7)
		if i%5 == 4 {
			require.NoError(t, b.Unpublish(ctx, key))
			delete(want, key)
			continue
		}
		publish(t, b, key, i)
		want[key] = record{N: i, S: key}
	}
	converge(t, w, map[string]record{}, want)
}

// A watch of some keys delivers only theirs: no value, decode error or delete of another key.
func TestWatchOfOneKeySeesOnlyIt(t *testing.T) {
	_, _, b := setup(t, "filtered", pubsub.BucketConfig{History: 4})
	ctx := testCtx(t)
	publish(t, b, "node-1", 1)
	publish(t, b, "node-2", 1)
	w, err := b.Watch(ctx, "node-1")
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	expectEvents(t, w, put("node-1", 1), snapshotDone())
	publish(t, b, "node-2", 2)
	require.NoError(t, b.Unpublish(ctx, "node-2"))
	publish(t, b, "node-1", 2)
	expectEvents(t, w, put("node-1", 2))

	_, err = b.Watch(ctx, "bad key")
	require.ErrorIs(t, err, pubsub.ErrInvalidKey)
}
