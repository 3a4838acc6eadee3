package coordinator

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// busEngine is an engine on its own bus with its buckets open, for what a run does with the
// bus alone (no cluster needed).
func busEngine(t *testing.T) (*testenv.Bus, *Engine, Config) {
	t.Helper()
	bus := testenv.StartBus(t)
	e, cfg := engineOn(t, bus.JS)
	return bus, e, cfg
}

// engineOn is an engine on js with its buckets open and its term claimed.
func engineOn(t *testing.T, js jetstream.JetStream) (*Engine, Config) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream = fake.NewSimpleClientset(), js
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	e, err := NewEngine(cfg)
	require.NoError(t, err)
	require.NoError(t, e.openBuckets(context.Background()))
	require.NoError(t, e.claimTerm(context.Background()))
	return e, cfg
}

// denyReads lets every client do anything, except the user "restricted", which may not publish
// to the subjects in it: the server refuses such a request and nobody answers it.
type denyReads []string

func (d denyReads) Check(c server.ClientAuthentication) bool {
	u := &server.User{Username: c.GetOpts().Username, Password: c.GetOpts().Password}
	if u.Username == "restricted" {
		u.Permissions = &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: d}}
	}
	c.RegisterUser(u)
	return true
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

// A status key the resume cannot read (here the server refuses the coordinator's reads of it,
// direct get and message API alike, and leaves them unanswered; as well a server that drops
// them) fails the resume, which is started again, rather than leave the key out: it may hold a
// drain, a return gate or a decommission under way. The resume used to skip it with a warning
// (the review's finding 2), and the run went on without the node.
func TestUnreadableStatusFailsTheResume(t *testing.T) {
	const node = "edge-1"
	bus := testenv.StartBusWith(t, pubsub.EmbeddedConfig{Authentication: denyReads{
		"$JS.API.DIRECT.GET.KV_" + nodedrain.StatusBucket + ".$KV." + nodedrain.StatusBucket + "." + node,
		"$JS.API.DIRECT.GET.KV_" + nodedrain.StatusBucket, // (GetCurrent's)
		"$JS.API.STREAM.MSG.GET.KV_" + nodedrain.StatusBucket,
	}}, pubsub.ConnectOptions{})
	returning(t, bus, node)
	_, js := testenv.ConnectNATSWith(t, pubsub.ConnectOptions{URLs: []string{bus.NATS.ClientURL()}, User: "restricted", Password: "x"})
	e, _ := engineOn(t, js)
	ctx := context.Background()

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

	// A coordinator that may read the key resumes the node's return gate.
	other, _ := engineOn(t, bus.JS)
	statuses, _, _, err := other.readStatuses(ctx)
	require.NoError(t, err)
	require.Equal(t, "r1", statuses[node].RequestID, "the node's return gate was not resumed")
}

// directGets turns the status stream's direct gets on or off: off, the server answers none
// ("no responders"), as a server that drops them would leave them unanswered.
func directGets(t *testing.T, bus *testenv.Bus, on bool) {
	t.Helper()
	ctx := context.Background()
	s, err := bus.JS.Stream(ctx, "KV_"+nodedrain.StatusBucket)
	require.NoError(t, err)
	sc := s.CachedInfo().Config
	sc.AllowDirect = on
	_, err = bus.JS.UpdateStream(ctx, sc)
	require.NoError(t, err)
}

// A forged status whose key a direct get does not answer for is read through the stream's
// message API and repaired. It used to stay in the repair list for good, read again every
// tick and never repaired (the review's finding 5).
func TestRepairReadsPastAnUnansweredDirectGet(t *testing.T) {
	bus, e, cfg := busEngine(t)
	ctx := context.Background()
	const node = "edge-1"
	returning(t, bus, node)
	forged, err := bus.Statuses.Publish(ctx, node, nodedrain.NodeDrainStatus{Node: node, RequestID: "r1", Status: nodedrain.StatusComplete,
		UpdatedAt: time.Now()}) // unsigned
	require.NoError(t, err)
	directGets(t, bus, false)
	_, _, _, err = bus.Statuses.GetChecked(ctx, node)
	require.Error(t, err, "the status key can still be read with a direct get (the test's means changed)")

	e.repairs[node] = true
	e.retryRepairs(ctx)
	require.Empty(t, e.repairs, "the key is still to be repaired")
	st, rev, origin, err := bus.Statuses.GetStored(ctx, node)
	require.NoError(t, err)
	require.Greater(t, rev, forged, "the forgery was not repaired")
	require.Equal(t, pubsub.Restored, origin)
	require.NoError(t, cfg.TrustedKeys().Verify(node, st))
	require.Equal(t, nodedrain.StatusNotRequested, st.Status, "not the coordinator's own status: %+v", st)
}

// A decommissioned node's status is removed even when direct gets of its key are not answered:
// forget reads it through the stream's message API. It failed, and was retried for ever.
func TestForgetReadsPastAnUnansweredDirectGet(t *testing.T) {
	bus, e, _ := busEngine(t)
	ctx := context.Background()
	const node = "edge-1"
	returning(t, bus, node)
	directGets(t, bus, false)
	require.NoError(t, e.forget(ctx, node, "r1"))
	_, _, _, err := bus.Statuses.GetStored(ctx, node)
	require.ErrorIs(t, err, pubsub.ErrNotFound, "the node's status was not removed")
}

// Keys left to repair are read a few a tick, in turn from where the last tick stopped, and one
// that cannot be read (here: the status stream is gone) is given up, logged, after
// maxRepairReadFailures ticks. Every key was read at every tick, for ever: thousands of them
// held the engine's loop (the review's finding 5).
func TestRepairReadsAreBoundedAndTakenInTurn(t *testing.T) {
	bus, e, _ := busEngine(t)
	ctx := context.Background()
	log, hook := test.NewNullLogger()
	e.log = log
	const keys = 40
	for i := range keys {
		e.repairs[fmt.Sprintf("edge-%02d", i)] = true
	}
	require.NoError(t, bus.JS.DeleteStream(ctx, "KV_"+nodedrain.StatusBucket))

	fails := func() (least, most, total int) {
		least = math.MaxInt
		for i := range keys {
			n := e.repairFails[fmt.Sprintf("edge-%02d", i)]
			least, most, total = min(least, n), max(most, n), total+n
		}
		return least, most, total
	}
	e.retryRepairs(ctx)
	_, _, read := fails()
	require.LessOrEqual(t, read, maxRepairReads, "reads in one tick")
	require.Positive(t, read)
	for tick := 0; len(e.repairs) > 0; tick++ {
		require.Less(t, tick, 20*keys*maxRepairReadFailures, "the unreadable keys were never given up")
		if least, most, _ := fails(); len(e.repairs) == keys {
			require.LessOrEqual(t, most-least, 1, "a key was read again before another was read once")
		}
		e.retryRepairs(ctx)
	}
	require.Equal(t, uint64(keys), e.repairsLost)
	var said bool
	for _, entry := range hook.AllEntries() {
		said = said || strings.HasPrefix(entry.Message, "giving up repairing a forged status")
	}
	require.True(t, said, "no give-up was logged")
}
