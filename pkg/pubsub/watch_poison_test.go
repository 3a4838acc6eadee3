package pubsub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// poison stores under key an empty message with the headers of a JetStream heartbeat or
// flow-control request (any client may put any header on its own write), directly, or (into
// set) as a server copy of such a message of its own under the key of another bucket.
func poison(t *testing.T, js jetstream.JetStream, bucket, key, descr string, copyFrom string) {
	t.Helper()
	ctx := testCtx(t)
	subj := "$KV." + bucket + "." + key
	if copyFrom != "" {
		subj = "$KV." + copyFrom + ".attacker"
	}
	m := nats.NewMsg(subj)
	m.Header.Set("Status", "100")
	m.Header.Set("Description", descr)
	_, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)
	if copyFrom != "" {
		nc := js.Conn()
		require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+copyFrom+".$KV."+copyFrom+".attacker", "$KV."+bucket+"."+key, nil))
		require.NoError(t, nc.Flush())
	}
}

// An empty stored message with a "Status: 100" header (what an agent may put under its own
// request key, or have the server copy under any key it can read) is a stored value like any
// other to a watch: nats.go took it for a heartbeat or flow-control request and skipped it, saw
// the next delivery as a gap, and re-created its consumer from the message again, for ever (the
// review's finding 3): the watch delivered nothing more, a new watcher's snapshot never ended
// (a coordinator restarting hung in its resume), and the client sent JetStream API requests
// without pause. The watch now delivers the message (here an undecodable value), and goes on.
func TestWatchDeliversAControlLookalike(t *testing.T) {
	for _, c := range []struct {
		name, descr string
		copied      bool
	}{{"heartbeat", "Idle Heartbeat", false}, {"flow control", "FlowControl Request", false}, {"copied heartbeat", "Idle Heartbeat", true}} {
		t.Run(c.name, func(t *testing.T) {
			srv := testenv.StartNATS(t)
			_, js := testenv.ConnectNATS(t, srv.ClientURL())
			ctx := testCtx(t)
			b, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "req", History: 5}, nil)
			require.NoError(t, err)
			from := ""
			if c.copied {
				from = "other"
				_, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: from}, nil)
				require.NoError(t, err)
			}
			publish(t, b, "x", 0)
			w := watch(t, b)
			expectEvents(t, w, put("x", 0), snapshotDone())

			poison(t, js, "req", "a", c.descr, from)
			for i := 1; i <= 3; i++ {
				publish(t, b, "b", i)
			}
			ai, err := js.AccountInfo(ctx)
			require.NoError(t, err)
			before := ai.API.Total
			ev := nextEventWithin(t, w, 5*time.Second)
			require.Equal(t, pubsub.EventDecodeError, ev.Kind, "the look-alike is a value like any other: %+v", ev)
			require.Equal(t, "a", ev.Key)
			require.ErrorIs(t, ev.Err, pubsub.ErrDecode)
			for i := 1; i <= 3; i++ {
				ev := nextEventWithin(t, w, 5*time.Second)
				require.Equal(t, seen{Kind: pubsub.EventPut, Key: "b", Value: record{N: i, S: "b"}}, seen{Kind: ev.Kind, Key: ev.Key, Value: ev.Value})
			}

			// A new watcher's snapshot (a coordinator starting) ends, the look-alike in it.
			w2 := watch(t, b)
			got := map[string]pubsub.EventKind{}
			for ev := nextEventWithin(t, w2, 5*time.Second); ev.Kind != pubsub.EventSnapshotDone; ev = nextEventWithin(t, w2, 5*time.Second) {
				got[ev.Key] = ev.Kind
			}
			require.Equal(t, map[string]pubsub.EventKind{"x": pubsub.EventPut, "a": pubsub.EventDecodeError, "b": pubsub.EventPut}, got)

			// And both watches rest: a few API requests (consumer creations), no loop.
			time.Sleep(2 * time.Second)
			ai, err = js.AccountInfo(ctx)
			require.NoError(t, err)
			require.Less(t, ai.API.Total-before, uint64(20), "JetStream API requests while the watches rest")
			require.Zero(t, w.Resumes(), "the first watch was re-created")

			// The bucket's other reads through consumers end too.
			for _, read := range []func(context.Context) error{
				func(ctx context.Context) error { _, err := b.History(ctx, "a"); return err },
				func(ctx context.Context) error { _, err := b.Keys(ctx); return err },
				func(ctx context.Context) error { _, _, err := b.ReadAll(ctx); return err },
			} {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := read(rctx)
				cancel()
				require.False(t, errors.Is(err, context.DeadlineExceeded), "a read through a consumer did not end")
				require.NoError(t, err)
			}
			h, err := b.History(ctx, "a")
			require.NoError(t, err)
			require.Len(t, h, 1)
			require.Error(t, h[0].Err, "the look-alike is an undecodable value")
			keys, err := b.Keys(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"a", "b", "x"}, keys)
			values, errs, err := b.ReadAll(ctx)
			require.NoError(t, err)
			require.Len(t, values, 2)
			require.Contains(t, errs, "a")
		})
	}
}

// nextEventWithin returns the watcher's next event or fails after d.
func nextEventWithin(t *testing.T, w *pubsub.Watcher[record], d time.Duration) pubsub.Event[record] {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		require.True(t, ok, "event channel closed")
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %s", d)
	}
	return pubsub.Event[record]{}
}

// A watch whose consumer is gone from the server (deleted; as well lost with a server that
// restarted without it) notices within two missed heartbeats and starts another after the last
// revision it delivered: nothing is lost.
func TestWatchReplacesALostConsumer(t *testing.T) {
	_, js, b := setup(t, "lost", pubsub.BucketConfig{History: 5})
	ctx := testCtx(t)
	w := watch(t, b)
	expectEvents(t, w, snapshotDone())
	publish(t, b, "a", 1)
	expectEvents(t, w, put("a", 1))

	s, err := js.Stream(ctx, "KV_lost")
	require.NoError(t, err)
	names := s.ConsumerNames(ctx)
	var deleted int
	for name := range names.Name() {
		require.NoError(t, s.DeleteConsumer(ctx, name))
		deleted++
	}
	require.NoError(t, names.Err())
	require.Equal(t, 1, deleted)
	publish(t, b, "a", 2)
	publish(t, b, "b", 3)
	ev := nextEventWithin(t, w, 25*time.Second)
	require.Equal(t, seen{Kind: pubsub.EventPut, Key: "a", Value: record{N: 2, S: "a"}}, seen{Kind: ev.Kind, Key: ev.Key, Value: ev.Value})
	expectEvents(t, w, put("b", 3))
	require.Equal(t, uint64(1), w.Resumes())
}
