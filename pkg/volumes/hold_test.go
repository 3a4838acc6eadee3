package volumes

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// holdWorld is a cluster's Longhorn with the replenishment Setting and volumes whose replicas
// a hold keeps; the Setting is shared by the package's tests, so they run one at a time.
type holdWorld struct {
	t     *testing.T
	c     *testenv.Cluster
	nodes []string
}

func newHoldWorld(t *testing.T, group string, setting string) *holdWorld {
	c := testenv.RequireCluster(t, cluster)
	w := &holdWorld{t: t, c: c, nodes: c.AddNodes(t, group, 3)}
	ensureLonghornNamespace(t, c.Client)
	for _, n := range w.nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	applyLonghorn(t, c.Dynamic, lhSetting(ReplenishmentWaitSetting, setting))
	return w
}

// volume applies a volume with staleReplicaTimeout minutes and replicas in states on the
// world's first nodes.
func (w *holdWorld) volume(name string, stale int64, states ...replicaState) volumeOn {
	v := volumeOn{name: name, nodes: w.nodes[:len(states)], state: states}
	objs := v.objects()
	require.NoError(w.t, unstructured.SetNestedField(objs[0].Object, stale, "spec", "staleReplicaTimeout"))
	applyLonghorn(w.t, w.c.Dynamic, objs...)
	return v
}

// setting reads the replenishment wait and whether it carries a hold record.
func (w *holdWorld) setting() (string, bool) {
	u, err := w.c.Dynamic.Resource(longhornSettings).Namespace(lhNS).Get(context.Background(), ReplenishmentWaitSetting, metav1.GetOptions{})
	require.NoError(w.t, err)
	v, _, _ := unstructured.NestedString(u.Object, "value")
	_, held := u.GetAnnotations()[ReplicaHoldAnnotation]
	return v, held
}

// stale reads a volume's staleReplicaTimeout and whether it carries a hold record.
func (w *holdWorld) stale(name string) (int64, bool) {
	u, err := w.c.Dynamic.Resource(longhornVolumes).Namespace(lhNS).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(w.t, err)
	v, _, _ := unstructured.NestedInt64(u.Object, "spec", "staleReplicaTimeout")
	_, held := u.GetAnnotations()[ReplicaHoldAnnotation]
	return v, held
}

func holding(expected time.Duration) func(*Config) {
	return func(cfg *Config) { cfg.HoldReplicas, cfg.ExpectedAway = true, expected }
}

// A drain under the wait policy whose node is expected away 20 minutes — longer than
// Longhorn's 10-minute replenishment wait and a volume's 15-minute stale replica timeout —
// raises both to 25 minutes before COMPLETE (never lowering the volume that waits an hour),
// keeps them raised while the node is away and its replicas fail, also across a coordinator
// that restarts, and restores the operator's values once the node's replica is healthy again:
// a catch-up, reported as such.
func TestReplicaHoldOutlastsTheMaintenance(t *testing.T) {
	w := newHoldWorld(t, "hold", "600")
	g := startGate(t, w.c, holding(20*time.Minute))
	vol := w.volume("vol-hold", 15, "healthy", "healthy")
	w.volume("vol-hold-long", 60, "healthy", "healthy")

	g.eventually(t, w.nodes[0], afterEviction, "safe to go down", func(r coordinator.GateResult) bool { return r.Safe })
	v, held := w.setting()
	assert.Equal(t, "1500", v, "raised to 20m expected + 5m margin")
	assert.True(t, held)
	stale, held := w.stale("vol-hold")
	assert.Equal(t, int64(25), stale)
	assert.True(t, held)
	stale, held = w.stale("vol-hold-long")
	assert.Equal(t, int64(60), stale, "never lowered")
	assert.False(t, held)
	rv := func(gvr schema.GroupVersionResource, name string) string {
		u, err := w.c.Dynamic.Resource(gvr).Namespace(lhNS).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		return u.GetResourceVersion()
	}
	before := rv(longhornSettings, ReplenishmentWaitSetting) + "/" + rv(longhornVolumes, "vol-hold")
	for range 3 {
		assert.True(t, g.check(t, w.nodes[0], afterEviction).Safe)
	}
	assert.Equal(t, before, rv(longhornSettings, ReplenishmentWaitSetting)+"/"+rv(longhornVolumes, "vol-hold"),
		"checks again write nothing: the hold is in place")
	assert.Equal(t, 1, g.events.count("Normal ReplicasHeld Node /"+w.nodes[0]), "held once: %s", g.events)
	heldNodes, err := g.Held(context.Background())
	require.NoError(t, err)
	assert.Contains(t, heldNodes, w.nodes[0], "a restarted coordinator releases a hold whose request is gone")

	// The node goes down: its replica fails. It comes back and withdraws: the drain is over, but
	// its replica is not healthy yet, so the hold stays.
	vol.state[0] = "failed"
	applyLonghorn(t, w.c.Dynamic, vol.objects()[1:]...) // its replicas and engine
	require.Eventually(t, func() bool { return g.check(t, w.nodes[1], beforeEviction).Safe == false }, 10*time.Second, 20*time.Millisecond,
		"the gate sees the failed replica")
	require.NoError(t, g.Release(context.Background(), w.nodes[0]))
	v, held = w.setting()
	assert.Equal(t, "1500", v, "held while the node's replica has not caught up")
	assert.True(t, held)

	// The coordinator restarts; the node's replica catches up; the new run restores.
	g.cancel()
	g2 := startGate(t, w.c, holding(20*time.Minute))
	vol.state[0] = "healthy"
	applyLonghorn(t, w.c.Dynamic, vol.objects()[1:]...)
	require.Eventually(t, func() bool {
		_, err := g2.ReturnCheck(context.Background(), w.nodes[0])
		v, held := w.setting()
		return err == nil && v == "600" && !held
	}, 10*time.Second, 50*time.Millisecond, "the operator's replenishment wait is restored")
	stale, held = w.stale("vol-hold")
	assert.Equal(t, int64(15), stale, "the operator's stale replica timeout is restored")
	assert.False(t, held)
	assert.Equal(t, 1, testutil.CollectAndCount(g2.metrics.ReplicaHolds), "one outcome observed")
	assert.Equal(t, 1, g2.events.count("Normal ReplicaHoldEnded Node /"+w.nodes[0], "caught up, none rebuilt"), g2.events)
}

// A hold never outlives what it was for, and never overrides the operator: a value the operator
// changed while it held is kept; a node that never comes back ends its hold when its expected
// time away has passed; a replica replaced elsewhere is reported as a full rebuild.
func TestReplicaHoldEnds(t *testing.T) {
	t.Run("the operator's change is kept", func(t *testing.T) {
		w := newHoldWorld(t, "hold-op", "600")
		g := startGate(t, w.c, holding(20*time.Minute))
		w.volume("vol-hold-op", 0, "healthy", "healthy")
		g.eventually(t, w.nodes[0], afterEviction, "safe", func(r coordinator.GateResult) bool { return r.Safe })
		v, _ := w.setting()
		require.Equal(t, "1500", v)
		applyLonghorn(t, w.c.Dynamic, lhSetting(ReplenishmentWaitSetting, "7200")) // keeps annotations
		require.NoError(t, g.Release(context.Background(), w.nodes[0]))
		require.Eventually(t, func() bool { _, held := w.setting(); return !held }, 10*time.Second, 50*time.Millisecond)
		v, _ = w.setting()
		assert.Equal(t, "7200", v)
		stale, held := w.stale("vol-hold-op")
		assert.Equal(t, int64(0), stale, "a volume without a timeout is left alone")
		assert.False(t, held)
	})
	t.Run("a node that never comes back", func(t *testing.T) {
		w := newHoldWorld(t, "hold-gone", "600")
		var skew atomic.Int64
		g := startGate(t, w.c, func(cfg *Config) {
			holding(20 * time.Minute)(cfg)
			cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		})
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = g.Run(ctx) }()
		w.volume("vol-hold-gone", 15, "healthy", "healthy")
		g.eventually(t, w.nodes[0], afterEviction, "safe", func(r coordinator.GateResult) bool { return r.Safe })
		v, _ := w.setting()
		require.Equal(t, "1500", v)
		skew.Store(int64(26 * time.Minute)) // past the hold, never released
		require.Eventually(t, func() bool { v, held := w.setting(); return v == "600" && !held }, 10*time.Second, 50*time.Millisecond,
			"restored when the expected time away has passed (Run's pass)")
		require.Eventually(t, func() bool {
			return g.events.count("Warning ReplicaHoldEnded Node /"+w.nodes[0], "away longer than its replicas were held") == 1
		}, 10*time.Second, 20*time.Millisecond, "the expired hold is reported: %s", g.events)
		stale, held := w.stale("vol-hold-gone")
		assert.Equal(t, int64(15), stale)
		assert.False(t, held)
	})
	t.Run("a replica rebuilt elsewhere", func(t *testing.T) {
		w := newHoldWorld(t, "hold-rebuilt", "600")
		g := startGate(t, w.c, holding(20*time.Minute))
		vol := w.volume("vol-hold-rebuilt", 15, "healthy", "healthy")
		g.eventually(t, w.nodes[0], afterEviction, "safe", func(r coordinator.GateResult) bool { return r.Safe })
		// Longhorn gave up on the replica on nodes[0] and built one on nodes[2].
		require.NoError(t, w.c.Dynamic.Resource(longhornReplicas).Namespace(lhNS).Delete(context.Background(), "vol-hold-rebuilt-r-0", metav1.DeleteOptions{}))
		vol.nodes, vol.state = []string{w.nodes[2], w.nodes[1]}, []replicaState{"healthy", "healthy"}
		applyLonghorn(t, w.c.Dynamic, vol.objects()[1:]...) // its replica r-0 now on nodes[2]
		require.Eventually(t, func() bool {
			vols, err := g.longhorn.Volumes(w.nodes[0])
			return err == nil && len(vols) == 0
		}, 10*time.Second, 20*time.Millisecond, "the gate's caches see the replica moved")
		require.NoError(t, g.Release(context.Background(), w.nodes[0]))
		require.Eventually(t, func() bool { v, held := w.setting(); return v == "600" && !held }, 10*time.Second, 50*time.Millisecond)
		assert.Equal(t, 1, g.events.count("Warning ReplicaHoldEnded Node /"+w.nodes[0], "0 volume(s) caught up, 1 rebuilt in full"), g.events)
	})
}

// The hold saves a rebuild and must never cost the drain: a node with many volumes reaches
// COMPLETE (the writes do not eat the time the check before COMPLETE has for its read), a
// Setting whose value is not a number lets the drain go on without the hold (said once), and a
// garbled record is replaced, the value then taken for the operator's.
func TestReplicaHoldNeverCostsTheDrain(t *testing.T) {
	t.Run("many volumes", func(t *testing.T) {
		w := newHoldWorld(t, "hold-many", "600")
		g := startGate(t, w.c, holding(20*time.Minute))
		for i := range 60 {
			w.volume(fmt.Sprintf("vol-hold-many-%d", i), 15, "healthy", "healthy")
		}
		g.eventually(t, w.nodes[0], afterEviction, "safe to go down", func(r coordinator.GateResult) bool { return r.Safe })
		for i := range 60 {
			stale, held := w.stale(fmt.Sprintf("vol-hold-many-%d", i))
			require.Equal(t, int64(25), stale, "volume %d", i)
			require.True(t, held, "volume %d", i)
		}
	})
	t.Run("a setting that is not a number", func(t *testing.T) {
		w := newHoldWorld(t, "hold-nan", "soon")
		g := startGate(t, w.c, holding(20*time.Minute))
		w.volume("vol-hold-nan", 15, "healthy", "healthy")
		g.eventually(t, w.nodes[0], afterEviction, "safe without the hold", func(r coordinator.GateResult) bool { return r.Safe })
		g.check(t, w.nodes[0], afterEviction)
		assert.Equal(t, 1, g.events.count("Warning ReplicaHoldFailed Node /"+w.nodes[0], "not a number of seconds"),
			"given up once, not tried at every check: %s", g.events)
		v, held := w.setting()
		assert.Equal(t, "soon", v)
		assert.False(t, held)
		// The drain is over: the next one tries the hold afresh (and says so again).
		require.NoError(t, g.Release(context.Background(), w.nodes[0]))
		g.check(t, w.nodes[0], afterEviction)
		assert.Equal(t, 2, g.events.count("Warning ReplicaHoldFailed Node /"+w.nodes[0], "not a number of seconds"), g.events)
	})
	t.Run("a garbled record", func(t *testing.T) {
		w := newHoldWorld(t, "hold-garbled", "900")
		s := lhSetting(ReplenishmentWaitSetting, "900")
		s.SetAnnotations(map[string]string{ReplicaHoldAnnotation: `{"original": "a lot"`})
		_, err := testenv.ApplyLonghorn(context.Background(), w.c.Dynamic, s)
		require.NoError(t, err)
		g := startGate(t, w.c, holding(20*time.Minute))
		w.volume("vol-hold-garbled", 15, "healthy", "healthy")
		g.eventually(t, w.nodes[0], afterEviction, "safe", func(r coordinator.GateResult) bool { return r.Safe })
		v, held := w.setting()
		assert.Equal(t, "1500", v)
		assert.True(t, held)
		require.NoError(t, g.Release(context.Background(), w.nodes[0]))
		require.Eventually(t, func() bool { v, held := w.setting(); return v == "900" && !held }, 10*time.Second, 50*time.Millisecond,
			"the value found under the garbled record is restored")
	})
}
