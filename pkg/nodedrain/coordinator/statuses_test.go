package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// busEngine is an engine on its own bus with its buckets open, for what a run does with the
// bus alone (no cluster needed).
func busEngine(t *testing.T) (*testenv.Bus, *Engine, Config) {
	t.Helper()
	bus := testenv.StartBus(t)
	cfg := DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream = fake.NewSimpleClientset(), bus.JS
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	e, err := NewEngine(cfg)
	require.NoError(t, err)
	require.NoError(t, e.openBuckets(context.Background()))
	return bus, e, cfg
}

// returning publishes, as a coordinator, node's NOTREQUESTED of a return gate under way.
func returning(t *testing.T, bus *testenv.Bus, node string) {
	t.Helper()
	back := time.Now().Add(-time.Second)
	_, err := bus.Statuses.Publish(context.Background(), node, testenv.SignStatus(nodedrain.NodeDrainStatus{Node: node, RequestID: "r1",
		Status: nodedrain.StatusNotRequested, RequestedBy: nodedrain.RequesterDeviceOp, UpdatedAt: back, ReturningSince: back}))
	require.NoError(t, err)
}

// A copy of a message carrying a header named Status, aimed at a node's status key while no
// coordinator runs (any agent may put such a message under its own request key): the resume
// reads it as a forgery and resumes the node from the coordinator's own last status. It read
// as "no status" (the review's finding 1), and the node's return gate was forgotten.
func TestStatusHeaderCopyAtResumeIsResumedOver(t *testing.T) {
	for _, status := range []string{"404", "503"} {
		t.Run(status, func(t *testing.T) {
			bus, e, cfg := busEngine(t)
			ctx := context.Background()
			const node = "edge-1"
			returning(t, bus, node)
			m := nats.NewMsg("$KV." + nodedrain.RequestsBucket + ".spare")
			m.Header.Set("Status", status)
			_, err := bus.JS.PublishMsg(ctx, m)
			require.NoError(t, err)
			nc := bus.JS.Conn()
			require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+nodedrain.RequestsBucket+".$KV."+nodedrain.RequestsBucket+".spare",
				"$KV."+nodedrain.StatusBucket+"."+node, nil))
			require.NoError(t, nc.Flush())
			require.Eventually(t, func() bool {
				h, err := bus.Statuses.History(ctx, node)
				return err == nil && len(h) == 2
			}, 5*time.Second, 20*time.Millisecond, "the copy did not land")

			statuses, forged, _, err := e.readStatuses(ctx)
			require.NoError(t, err)
			require.Contains(t, forged, node, "the copy was not taken for a forgery")
			require.Equal(t, "r1", statuses[node].RequestID, "the node's return gate was not resumed")
			require.False(t, statuses[node].ReturningSince.IsZero())
			require.Equal(t, 1.0, testutil.ToFloat64(cfg.Metrics.ForgedStatuses.WithLabelValues("copied")))
		})
	}
}

// A status key the resume cannot read (here the status stream does not answer direct gets;
// as well a server that drops the request) fails the resume, which is started again, rather
// than leave the key out: it may hold a drain, a return gate or a decommission under way. The
// resume used to skip it with a warning (the review's finding 2), and the run went on without
// the node.
func TestUnreadableStatusFailsTheResume(t *testing.T) {
	bus, e, _ := busEngine(t)
	ctx := context.Background()
	const node = "edge-1"
	returning(t, bus, node)
	direct := func(on bool) {
		s, err := bus.JS.Stream(ctx, "KV_"+nodedrain.StatusBucket)
		require.NoError(t, err)
		sc := s.CachedInfo().Config
		sc.AllowDirect = on
		_, err = bus.JS.UpdateStream(ctx, sc)
		require.NoError(t, err)
	}
	direct(false)
	_, _, _, err := bus.Statuses.GetChecked(ctx, node)
	require.Error(t, err, "the status key can still be read (the test's means changed)")

	done := make(chan error, 1)
	go func() {
		statuses, _, _, err := e.readStatuses(ctx)
		if err == nil {
			t.Errorf("the resume went on without the unreadable key: %v", statuses)
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		require.Contains(t, err.Error(), node)
	case <-time.After(30 * time.Second):
		t.Fatal("the resume's read did not end")
	}

	direct(true)
	statuses, _, _, err := e.readStatuses(ctx)
	require.NoError(t, err)
	require.Equal(t, "r1", statuses[node].RequestID, "the node's return gate was not resumed once the key could be read")
}
