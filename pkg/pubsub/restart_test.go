package pubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// An open watcher rides out restarts of the server (same store, same port):
// values survive, and every change made while the watcher's connection was
// away or after it came back arrives exactly once and in order.
func TestWatchSurvivesServerRestart(t *testing.T) {
	tests := []struct {
		name string
		// watcherReconnect is the watcher connection's reconnect pause; a
		// long one keeps it away while the test writes through another
		// connection.
		watcherReconnect time.Duration
		restarts         int
	}{
		{"write while the watcher is away", 2 * time.Second, 1},
		{"quick reconnects, two restarts", 50 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const bucket = "restart"
			ctx := testCtx(t)
			srv := testenv.StartNATS(t)
			ncW, jsW := testenv.ConnectNATSWith(t, pubsub.ConnectOptions{
				URLs:          []string{srv.ClientURL()},
				ReconnectWait: tt.watcherReconnect,
			})
			_, jsP := testenv.ConnectNATS(t, srv.ClientURL())
			pub, err := pubsub.OpenBucket[record](ctx, jsP, pubsub.BucketConfig{Name: bucket}, nil)
			require.NoError(t, err)
			sub, err := pubsub.OpenBucket[record](ctx, jsW, pubsub.BucketConfig{Name: bucket}, nil)
			require.NoError(t, err)

			publish(t, pub, "edge-1.shop.example.com", 1)
			publish(t, pub, "node-b", 1)
			w := watch(t, sub)
			expectEvents(t, w, put("edge-1.shop.example.com", 1), put("node-b", 1), snapshotDone())

			for i := 1; i <= tt.restarts; i++ {
				srv = testenv.RestartNATS(t, srv)

				// A fresh connection writes at once, typically before the
				// watcher's connection is back.
				_, jsC := testenv.ConnectNATS(t, srv.ClientURL())
				pubC, err := pubsub.OpenBucket[record](ctx, jsC, pubsub.BucketConfig{Name: bucket}, nil)
				require.NoError(t, err)
				v, _, err := pubC.Get(ctx, "edge-1.shop.example.com")
				require.NoError(t, err, "value survives the restart")
				require.Equal(t, record{N: 1, S: "edge-1.shop.example.com"}, v)

				down := fmt.Sprintf("while-away-%d", i)
				publish(t, pubC, down, i)
				require.NoError(t, pubC.Unpublish(ctx, "node-b"))
				t.Logf("restart %d: watcher connected while writing: %v", i, pubsub.Connected(ncW))

				// Nothing from before the restart is delivered again: the
				// next events are exactly the new changes.
				expectEvents(t, w, put(down, i), del("node-b"))

				after := fmt.Sprintf("after-%d", i)
				publish(t, pubC, after, i)
				expectEvents(t, w, put(after, i))
				publish(t, pubC, "node-b", i)
				expectEvents(t, w, put("node-b", i))
			}
			require.GreaterOrEqual(t, w.Resumes(), uint64(tt.restarts))
			require.True(t, pubsub.Connected(ncW))
		})
	}
}

// A server that comes back without its store (e.g. an emptyDir) loses the
// bucket; once it is created again, an open watcher reads it from scratch and
// ends up with exactly the new contents: keys that vanished are reported
// deleted.
func TestWatchRecoversFromReplacedBucket(t *testing.T) {
	const bucket = "replaced"
	ctx := testCtx(t)
	srv := testenv.StartNATS(t)
	_, jsW := testenv.ConnectNATSWith(t, pubsub.ConnectOptions{
		URLs:          []string{srv.ClientURL()},
		ReconnectWait: 200 * time.Millisecond,
	})
	sub, err := pubsub.OpenBucket[record](ctx, jsW, pubsub.BucketConfig{Name: bucket}, nil)
	require.NoError(t, err)
	for i := 1; i <= 5; i++ {
		publish(t, sub, "keep", i) // push revisions beyond what the new bucket will have
	}
	publish(t, sub, "vanishes", 1)
	w := watch(t, sub)
	state := map[string]record{}
	converge(t, w, state, map[string]record{"keep": {N: 5, S: "keep"}, "vanishes": {N: 1, S: "vanishes"}})

	cfg := srv.Config()
	srv.Shutdown()
	cfg.StoreDir = t.TempDir()
	srv, err = pubsub.StartEmbedded(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)

	_, jsC := testenv.ConnectNATS(t, srv.ClientURL())
	pub, err := pubsub.OpenBucket[record](ctx, jsC, pubsub.BucketConfig{Name: bucket}, nil)
	require.NoError(t, err)
	publish(t, pub, "keep", 9)
	publish(t, pub, "new", 1)

	replaced := 0
	convergeCounting(t, w, state, map[string]record{"keep": {N: 9, S: "keep"}, "new": {N: 1, S: "new"}}, &replaced)
	require.Equal(t, 1, replaced, "the watcher did not say the bucket was replaced")
	publish(t, pub, "later", 1)
	converge(t, w, state, map[string]record{"keep": {N: 9, S: "keep"}, "new": {N: 1, S: "new"}, "later": {N: 1, S: "later"}})
}

// A watch of one key resumes after a server restart still watching that key alone (nats.go
// rewrites the key list it is given: the resume must not reuse it).
func TestWatchOfOneKeySurvivesServerRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartNATS(t)
	_, jsW := testenv.ConnectNATSWith(t, pubsub.ConnectOptions{URLs: []string{srv.ClientURL()}, ReconnectWait: 50 * time.Millisecond})
	sub, err := pubsub.OpenBucket[record](ctx, jsW, pubsub.BucketConfig{Name: "restart-one", History: 4}, nil)
	require.NoError(t, err)
	publish(t, sub, "node-a", 1)
	w, err := sub.Watch(ctx, "node-a")
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	expectEvents(t, w, put("node-a", 1), snapshotDone())

	srv = testenv.RestartNATS(t, srv)
	_, jsC := testenv.ConnectNATS(t, srv.ClientURL())
	pub, err := pubsub.OpenBucket[record](ctx, jsC, pubsub.BucketConfig{Name: "restart-one"}, nil)
	require.NoError(t, err)
	publish(t, pub, "node-b", 1)
	publish(t, pub, "node-a", 2)
	expectEvents(t, w, put("node-a", 2))
	require.Eventually(t, func() bool { return w.Resumes() >= 1 }, 10*time.Second, 10*time.Millisecond)
	publish(t, pub, "node-a", 3)
	expectEvents(t, w, put("node-a", 3))
}
