package pubsub_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A watch whose consumer is alive (its heartbeats come, and say it delivered nothing more) but
// delivers nothing new, as a replica of a NATS cluster that stopped applying its stream serves
// it, starts another consumer once a revision written stays undelivered for a whole check: the
// value arrives, once. Paused on the server (which keeps a paused consumer's heartbeats going),
// the consumer is such a one.
func TestWatchWhoseConsumerStallsStartsAnother(t *testing.T) {
	for _, keys := range [][]string{nil, {"node-1"}} {
		t.Run(map[bool]string{true: "every key", false: "one key"}[keys == nil], func(t *testing.T) {
			t.Parallel()
			_, js, b := setup(t, "stall", pubsub.BucketConfig{})
			ctx := testCtx(t)
			publish(t, b, "node-1", 1)
			w, err := b.Watch(ctx, keys...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = w.Stop() })
			expectEvents(t, w, put("node-1", 1), snapshotDone())

			stream, err := js.Stream(ctx, "KV_stall")
			require.NoError(t, err)
			names := stream.ConsumerNames(ctx)
			paused := 0
			for name := range names.Name() {
				_, err := stream.PauseConsumer(ctx, name, time.Now().Add(time.Hour))
				require.NoError(t, err)
				paused++
			}
			require.NoError(t, names.Err())
			require.Equal(t, 1, paused, "the watch's consumer")

			publish(t, b, "node-1", 2)
			start := time.Now()
			select {
			case ev := <-w.Events():
				require.Equal(t, put("node-1", 2), seen{Kind: ev.Kind, Key: ev.Key, Value: ev.Value})
			case <-time.After(time.Minute):
				t.Fatal("the stalled watch never delivered the value written after it stalled")
			}
			t.Logf("delivered %s after the write", time.Since(start).Round(time.Second))
			require.EqualValues(t, 1, w.Resumes(), "one consumer started after the stalled one")
			select {
			case ev := <-w.Events():
				t.Fatalf("delivered again: %+v", ev)
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}
