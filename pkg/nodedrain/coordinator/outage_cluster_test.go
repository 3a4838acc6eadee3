package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// runLeader runs an engine under leader election (short lease timings, outage mode on) with the
// given client for both the engine and its Lease, until the test ends.
func (h *harness) runLeader(cfg Config, client kubernetes.Interface, identity string) {
	h.t.Helper()
	cfg.Identity = identity
	e, err := NewEngine(cfg)
	require.NoError(h.t, err)
	lc := DefaultLeaderConfig()
	lc.LeaseDuration, lc.RenewDeadline, lc.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	lc.Client, lc.Namespace, lc.Identity, lc.Logger = client, h.ns, identity, cfg.Logger
	lc.ActThroughAPIOutage = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunWithLeaderElection(ctx, lc, e.Run) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(h.t, err)
		case <-time.After(30 * time.Second):
			h.t.Errorf("coordinator %s did not stop", identity)
		}
	})
}

// With leader election on (the default) the leader loses its Lease when the API goes away; in
// outage mode it goes on, and the API-unreachable rule lets a drain whose volumes were safe
// proceed (DESIGN §3). When the API is back, the replica leads again and the withdrawal after
// the reboot is handled as usual.
func TestAPIOutageWithLeaderElection(t *testing.T) {
	h := newHarness(t, "outage-le", 2)
	client, proxy := proxiedClient(t, h)
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(client)
	cfg.Gate = gate
	cfg.APIUnreachableTimeout = 6 * time.Second // longer than the lease's renew deadline
	cfg.InformerRelist = -1                     // (the API is cut seconds after start, its caches just listed: the rule need not wait for them)
	h.runLeader(cfg, client, "a")
	node := h.nodes[0]
	h.request(node, "r1", time.Now())
	h.waitFor(node, 30*time.Second, "blocked by volumes", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })
	gate.set(node, true) // the gate's last view before the outage: safe
	proxy.Cut()
	st := h.waitStatus(node, nodedrain.StatusComplete, 40*time.Second)
	assert.Contains(t, st.Message, "Kubernetes API unreachable")
	assert.True(t, h.node(node).Spec.Unschedulable, "cordoned before the outage, and left so")

	require.NoError(t, proxy.Restore())
	h.withdraw(node) // the node rebooted; its agent withdraws
	h.waitFor(node, 40*time.Second, "uncordoned after the API came back", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && strings.Contains(s.Message, "uncordoned")
	})
	assert.False(t, h.node(node).Spec.Unschedulable)
}

// A leader cut off from the API (a partition: the other replica still reaches it) goes on in
// outage mode; the other replica takes the Lease and writes its term record first, so when the
// old leader's API-unreachable rule would let the drain through, its status write is refused:
// it never publishes COMPLETE behind the new leader's back.
func TestTakeoverFencesTheLeaderInOutageMode(t *testing.T) {
	h := newHarness(t, "outage-fence", 2)
	client, proxy := proxiedClient(t, h)
	oldGate := &testGate{safe: map[string]bool{}}
	old := h.config(client)
	old.Gate = oldGate
	old.APIUnreachableTimeout = 10 * time.Second // after the other replica took over (~3 s)
	old.InformerRelist = -1                      // (cut seconds after start: see TestAPIOutageWithLeaderElection)
	h.runLeader(old, client, "old")
	node := h.nodes[0]
	h.request(node, "r1", time.Now())
	h.waitFor(node, 30*time.Second, "blocked by volumes", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })

	standby := h.config(h.c.Client)
	standby.Gate = &testGate{safe: map[string]bool{}} // what the API shows: still not safe
	standby.APIUnreachableTimeout = old.APIUnreachableTimeout
	h.runLeader(standby, h.c.Client, "new")
	oldGate.set(node, true) // the cut-off leader's last view says safe
	proxy.Cut()

	require.Eventually(t, func() bool { return testutil.ToFloat64(old.Metrics.FencedWrites) >= 1 }, 60*time.Second,
		100*time.Millisecond, "the leader in outage mode was never fenced")
	term, _, err := h.terms(t).Get(context.Background(), nodedrain.TermKey)
	require.NoError(t, err)
	assert.Equal(t, "new", term.Coordinator)
	assert.NotContains(t, h.history(node), nodedrain.StatusComplete, "COMPLETE published although the active coordinator sees unsafe volumes")
	// The active coordinator, whose gate says unsafe, comes to wait for the volumes (it may first
	// be mid-cycle: evicting, or retrying an eviction on a loaded machine), and never completes.
	require.Eventually(t, func() bool {
		last, _ := h.last(node)
		return last.Status.InProgress() && len(last.Blockers) > 0
	}, 30*time.Second, 20*time.Millisecond, "the active coordinator does not wait for the volumes")
	assert.NotContains(t, h.history(node), nodedrain.StatusComplete)
}

// A leading coordinator whose write lands after another coordinator's term record (it was
// paused between its lease check and the write, or the write was delayed) is refused, like one
// in API-outage mode: the Lease fences only by time. Here the other coordinator's term record is
// written while this one still holds a valid Lease (no leader election: it always does), as a
// paused process would find it on waking; the drain it then carries on publishes nothing.
func TestAWriteAfterATakeoverIsRefusedWhileLeading(t *testing.T) {
	h := newHarness(t, "fence-lead", 2)
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(h.c.Client)
	cfg.Gate = gate
	h.run(cfg)
	node := h.nodes[0]
	h.request(node, "r1", time.Now())
	h.waitFor(node, 30*time.Second, "blocked by volumes", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })

	ctx := context.Background()
	terms, err := pubsub.OpenBucket(ctx, h.js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, WriterMark: nodedrain.StatusWriterMark},
		nodedrain.TermCodec{})
	require.NoError(t, err)
	other, err := terms.Publish(ctx, nodedrain.TermKey, nodedrain.Term{Coordinator: "other", Since: time.Now()})
	require.NoError(t, err)
	gate.set(node, true) // the drain moves on: evicting, then COMPLETE

	require.Eventually(t, func() bool { return testutil.ToFloat64(cfg.Metrics.FencedWrites) >= 1 }, 30*time.Second,
		50*time.Millisecond, "the write after the other coordinator's term record was not refused")
	statuses, err := pubsub.OpenBucket(ctx, h.js, pubsub.BucketConfig{Name: nodedrain.StatusBucket}, nodedrain.StatusCodec{})
	require.NoError(t, err)
	revs, err := statuses.History(ctx, node)
	require.NoError(t, err)
	for _, r := range revs {
		assert.Less(t, r.Rev, other, "a status (%v) landed after the other coordinator's term record", r.Value.Status)
	}
	assert.NotContains(t, h.history(node), nodedrain.StatusComplete)
}
