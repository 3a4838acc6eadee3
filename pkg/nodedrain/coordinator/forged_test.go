package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// drainedThenStopped drains a victim node to COMPLETE and stops the coordinator (as a kill).
func drainedThenStopped(t *testing.T, group string) (h *harness, attacker, victim string) {
	h = newHarness(t, group, 2)
	stop := h.run(h.config(h.c.Client))
	h.request(h.nodes[1], "r-victim", time.Now())
	h.waitStatus(h.nodes[1], nodedrain.StatusComplete, 60*time.Second)
	stop()
	return h, h.nodes[0], h.nodes[1]
}

// copyInto makes the server copy the latest message of key from under to key into (a direct
// get whose reply subject is the other key): what an agent, which may read its own request key,
// can do to another node's key whatever the bus permissions.
func (h *harness) copyInto(from, into string) {
	h.t.Helper()
	b := nodedrain.RequestsBucket
	nc := h.js.Conn()
	require.NoError(h.t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+b+".$KV."+b+"."+from, "$KV."+b+"."+into, nil))
	require.NoError(h.t, nc.Flush())
}

// attackerWrites puts raw bytes under the attacker's own request key.
func (h *harness) attackerWrites(key string, data []byte) {
	h.t.Helper()
	kv, err := h.js.KeyValue(context.Background(), nodedrain.RequestsBucket)
	require.NoError(h.t, err)
	_, err = kv.Put(context.Background(), key, data)
	require.NoError(h.t, err)
}

// An agent copies its own delete marker under a draining node's key: the coordinator keeps the
// drain, puts the node's request back, and the node's real withdrawal still uncordons it.
func TestCopiedWithdrawalIsIgnoredAndRepaired(t *testing.T) {
	h := newHarness(t, "forge-del", 2)
	attacker, victim := h.nodes[0], h.nodes[1]
	cfg := h.config(h.c.Client)
	h.run(cfg)
	h.request(victim, "r-victim", time.Now())
	h.waitStatus(victim, nodedrain.StatusComplete, 60*time.Second)
	// Every kubelet reads Node objects: the cordon record names the request by digest only, so
	// no other node learns the ID the victim's agent acts on.
	ann := h.node(victim).Annotations[CordonAnnotation]
	require.Contains(t, ann, RequestDigest("r-victim"))
	require.NotContains(t, ann, "r-victim")

	h.attackerWrites(attacker, []byte(`{"Node":"`+attacker+`","RequestID":"a1","RequestedBy":2}`))
	h.Withdraw(t, attacker)
	h.copyInto(attacker, victim)

	require.Eventually(t, func() bool { return testutil.ToFloat64(cfg.Metrics.ForgedRequests) >= 1 },
		10*time.Second, 20*time.Millisecond, "the copied delete marker was not recognised")
	require.Eventually(t, func() bool {
		r, _, err := h.Requests.Get(context.Background(), victim)
		return err == nil && r.RequestID == "r-victim"
	}, 10*time.Second, 20*time.Millisecond, "the victim's request was not put back")
	st, _ := h.last(victim)
	require.Equal(t, nodedrain.StatusComplete, st.Status, "the victim's drain was disturbed: %+v", st)
	require.True(t, h.node(victim).Spec.Unschedulable, "the victim was uncordoned by a forged withdrawal")

	// A status delivered under the victim's key (a consumer of the attacker's own status with
	// that deliver subject: no copy headers, and no request) is undone as well while the drain
	// is served, or the victim's agent would find a value it did not write and leave it.
	h.attackerWrites(victim, []byte(`{"Node":"`+attacker+`","Status":2}`))
	require.Eventually(t, func() bool {
		r, _, err := h.Requests.Get(context.Background(), victim)
		return err == nil && r.RequestID == "r-victim"
	}, 10*time.Second, 20*time.Millisecond, "the victim's request was not put back after an undecodable value")

	// The victim's own withdrawal (its agent reads its request back, as put back) ends the drain.
	h.withdraw(victim)
	h.waitFor(victim, 30*time.Second, "uncordoned after the real withdrawal", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
}

// An agent writes another node's request under its own key and copies it under that node's key,
// before and while the coordinator runs: the node is never drained, and its key is cleared.
func TestCopiedRequestDrainsNothing(t *testing.T) {
	h := newHarness(t, "forge-put", 3)
	attacker := h.nodes[0]
	plant := func(victim string) {
		data, err := nodedrain.EncodeRequest(nodedrain.NodeDrainRequest{Node: victim, RequestID: "forged-" + victim,
			RequestedAt: time.Now(), RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
		require.NoError(t, err)
		h.attackerWrites(attacker, data)
		h.copyInto(attacker, victim)
	}
	plant(h.nodes[1]) // in the snapshot a starting coordinator reads
	r, _, err := h.Requests.Get(context.Background(), h.nodes[1])
	require.NoError(t, err, "the copy did not land (the attack changed)")
	require.Equal(t, "forged-"+h.nodes[1], r.RequestID)
	cfg := h.config(h.c.Client)
	h.run(cfg)
	require.Eventually(t, func() bool { return testutil.ToFloat64(cfg.Metrics.ForgedRequests) == 1 },
		10*time.Second, 20*time.Millisecond, "the copy in the snapshot was not recognised")
	// Live: the copy lands and is recognised.
	require.Eventually(t, func() bool {
		plant(h.nodes[2])
		return testutil.ToFloat64(cfg.Metrics.ForgedRequests) >= 2
	}, 10*time.Second, 100*time.Millisecond, "no live copy was recognised")

	for _, victim := range h.nodes[1:] {
		require.Eventually(t, func() bool {
			_, _, err := h.Requests.Get(context.Background(), victim)
			return err != nil
		}, 10*time.Second, 20*time.Millisecond, "the copied request under %s was not cleared", victim)
	}
	testenv.RequireNever(t, func() bool {
		for _, victim := range h.nodes[1:] {
			if st, ok := h.last(victim); (ok && st.RequestID != "") || h.node(victim).Spec.Unschedulable {
				return true
			}
		}
		return false
	}, 2*time.Second, 50*time.Millisecond, "a copied request was served")
	// The attacker's own key keeps its misnamed value: no drain is served for it, and writing
	// over every unusable value would let a flood of them double the writes.
	_, _, err = h.Requests.Get(context.Background(), attacker)
	require.NoError(t, err)
}

// An agent may write its own key, headers and all: a "Nats-Rollup: all" would erase every
// node's request. The buckets refuse rollups.
func TestRollupIsRefused(t *testing.T) {
	h := newHarness(t, "forge-rollup", 2)
	h.run(h.config(h.c.Client))
	h.request(h.nodes[1], "r-victim", time.Now())
	h.waitStatus(h.nodes[1], nodedrain.StatusComplete, 60*time.Second)
	for _, b := range []string{nodedrain.RequestsBucket, nodedrain.StatusBucket} {
		msg := nats.NewMsg("$KV." + b + "." + h.nodes[0])
		msg.Data = []byte("{}")
		msg.Header.Set("Nats-Rollup", "all")
		_, err := h.js.PublishMsg(context.Background(), msg)
		require.Error(t, err, "a rollup on %s was accepted", b)
		require.Contains(t, err.Error(), "rollup")
	}
	r, _, err := h.Requests.Get(context.Background(), h.nodes[1])
	require.NoError(t, err)
	require.Equal(t, "r-victim", r.RequestID)
}

// While no coordinator runs, an agent copies its delete marker under a drained node's key: the
// next coordinator tells it from a withdrawal by the key's history, keeps the drain and puts the
// request back.
func TestCopiedWithdrawalWhileNoCoordinatorRuns(t *testing.T) {
	h, attacker, victim := drainedThenStopped(t, "forge-down")
	h.attackerWrites(attacker, []byte("x"))
	h.Withdraw(t, attacker)
	h.copyInto(attacker, victim)
	_, _, err := h.Requests.Get(context.Background(), victim)
	require.ErrorIs(t, err, pubsub.ErrNotFound, "the copied delete marker did not land (the attack changed)")

	cfg := h.config(h.c.Client)
	h.run(cfg)
	require.Eventually(t, func() bool {
		r, _, err := h.Requests.Get(context.Background(), victim)
		return err == nil && r.RequestID == "r-victim"
	}, 10*time.Second, 20*time.Millisecond, "the victim's request was not put back")
	testenv.RequireNever(t, func() bool {
		st, _ := h.last(victim)
		return st.Status != nodedrain.StatusComplete || !h.node(victim).Spec.Unschedulable
	}, 2*time.Second, 50*time.Millisecond, "the victim's drain was released by a copied withdrawal")
	assert.Equal(t, 1.0, testutil.ToFloat64(cfg.Metrics.ForgedRequests))
}

// A node's real withdrawal with a copy written on top of it before the coordinator looked: the
// history shows the withdrawal, which is honoured (the node is uncordoned), and the copy is
// removed.
func TestWithdrawalUnderACopyIsHonoured(t *testing.T) {
	h, attacker, victim := drainedThenStopped(t, "forge-under")
	h.withdraw(victim) // the victim's agent, after its reboot
	data, err := nodedrain.EncodeRequest(nodedrain.NodeDrainRequest{Node: victim, RequestID: "forged", RequestedAt: time.Now(),
		RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
	require.NoError(t, err)
	h.attackerWrites(attacker, data)
	h.copyInto(attacker, victim)
	require.Eventually(t, func() bool {
		r, _, err := h.Requests.Get(context.Background(), victim)
		return err == nil && r.RequestID == "forged"
	}, 10*time.Second, 20*time.Millisecond, "the copy did not land (the attack changed)")

	h.run(h.config(h.c.Client))
	h.waitFor(victim, 30*time.Second, "uncordoned: the withdrawal under the copy counts", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	require.Eventually(t, func() bool {
		_, _, err := h.Requests.Get(context.Background(), victim)
		return errors.Is(err, pubsub.ErrNotFound)
	}, 10*time.Second, 20*time.Millisecond, "the copy was not removed")
}

// A status copied under a key it does not name (an agent's own CORDONED, copied under a name no
// node has) is not taken for that key's drain at start-up: it would hold an admission slot for
// good, and the key's later statuses would go out under the copied node's name.
func TestStatusUnderAnotherKeyIsIgnoredAtStartUp(t *testing.T) {
	h := newHarness(t, "forge-status", 2)
	_, err := h.Statuses.Publish(context.Background(), "ghost", nodedrain.NodeDrainStatus{Node: h.nodes[0],
		Status: nodedrain.StatusCordoned, RequestID: "x", UpdatedAt: time.Now()})
	require.NoError(t, err)
	h.run(h.config(h.c.Client))
	h.request(h.nodes[1], "r1", time.Now())
	h.waitStatus(h.nodes[1], nodedrain.StatusComplete, 60*time.Second)
}

// A node's status hidden by a copied delete marker (a client had the server copy a deleted
// request key's marker under it) when the coordinator starts: the resume reads the key's history
// for the coordinator's own last status, counts the copy, and puts a signed status back. Keys
// alone would not list the key, and a return gate under way would be forgotten.
func TestCopiedDeleteMarkerAtStartUpIsResumedOver(t *testing.T) {
	h := newHarness(t, "forge-delete", 2)
	ctx := context.Background()
	node := h.nodes[0]
	back := time.Now().Add(-time.Second)
	_, err := h.Statuses.Publish(ctx, node, testenv.SignStatus(nodedrain.NodeDrainStatus{Node: node, RequestID: "r1",
		Status: nodedrain.StatusNotRequested, RequestedBy: nodedrain.RequesterDeviceOp, UpdatedAt: back, ReturningSince: back}))
	require.NoError(t, err)
	h.request("spare", "r-spare", time.Now())
	require.NoError(t, h.Requests.Unpublish(ctx, "spare"))
	nc := h.JS.Conn()
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+nodedrain.RequestsBucket+".$KV."+nodedrain.RequestsBucket+".spare",
		"$KV."+nodedrain.StatusBucket+"."+node, nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		_, _, origin, err := h.Statuses.GetChecked(ctx, node)
		return errors.Is(err, pubsub.ErrNotFound) && origin == pubsub.Copied
	}, 5*time.Second, 20*time.Millisecond, "the copied delete marker did not land")

	cfg := h.config(h.c.Client)
	h.run(cfg)
	require.Eventually(t, func() bool {
		st, _, origin, err := h.Statuses.GetChecked(ctx, node)
		return err == nil && origin != pubsub.Copied && testenv.TrustedKeys().Verify(node, st) == nil && st.RequestID == "r1"
	}, 15*time.Second, 50*time.Millisecond, "the coordinator did not put the node's status back")
	require.Equal(t, 1.0, testutil.ToFloat64(cfg.Metrics.ForgedStatuses.WithLabelValues("copied")))
}

// An agent stores an empty message with a heartbeat's "Status: 100" header under its own request
// key, and has the server copy it under another node's status key: nats.go's watches took it for
// a heartbeat and stalled on it (the review's finding 3): the coordinator saw no request any
// more, and a coordinator starting never finished its resume. Both watches now see an
// undecodable value: the request is ignored, the status repaired, and drains go on, also after
// a restart.
func TestControlLookalikeStallsNoWatch(t *testing.T) {
	h := newHarness(t, "forge-ctl", 2)
	attacker, victim := h.nodes[0], h.nodes[1]
	cfg := h.config(h.c.Client)
	stop := h.run(cfg)
	h.request(victim, "r-victim", time.Now())
	h.waitStatus(victim, nodedrain.StatusComplete, 60*time.Second)

	m := nats.NewMsg("$KV." + nodedrain.RequestsBucket + "." + attacker)
	m.Header.Set("Status", "100")
	m.Header.Set("Description", "Idle Heartbeat")
	_, err := h.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	nc := h.js.Conn()
	b := nodedrain.RequestsBucket
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+b+".$KV."+b+"."+attacker, "$KV."+nodedrain.StatusBucket+"."+victim, nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return testutil.ToFloat64(cfg.Metrics.ForgedStatuses.WithLabelValues("other")) >= 1 }, // undecodable
		10*time.Second, 20*time.Millisecond, "the copy under the victim's status key was not seen")
	h.waitStatus(victim, nodedrain.StatusComplete, 10*time.Second)

	// The request watch still delivers: the victim's withdrawal ends its drain.
	h.withdraw(victim)
	h.waitFor(victim, 30*time.Second, "uncordoned after the withdrawal", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	stop()

	// A coordinator starting over both finishes its resume and serves a new request.
	h.run(h.config(h.c.Client))
	h.request(victim, "r-victim-2", time.Now())
	h.waitFor(victim, 60*time.Second, "the new request drained", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusComplete && s.RequestID == "r-victim-2"
	})
}
