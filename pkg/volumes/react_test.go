package volumes

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// The coordinator asks a blocked gate again when the gate's informers see a change, not only on
// its recheck timer: with the timer at an hour, the drain still completes as soon as the replica
// that makes the node safe turns healthy.
func TestCoordinatorReactsToTheReplicaThatMakesTheNodeSafe(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "e2e-react", 2)
	g := startGate(t, c, nil)
	vol := volumeOn{name: "vol-e2e-react", nodes: nodes, state: []replicaState{"healthy", "rebuilding"}}
	vol.rebs = []rebuild{{to: vol.addr(1), progress: 80, from: []string{vol.addr(0)}}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "the gate has seen the volume", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1
	})
	w := startDrainWorld(t, c, "e2e-react", g, func(cfg *coordinator.Config) {
		cfg.Limits.GateRecheck, cfg.Limits.GateReact = time.Hour, 20*time.Millisecond
	})

	w.request(nodes[0])
	w.waitFor(nodes[0], "CORDONED with the volume as blocker", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1
	})
	safe := rebuilt(t, c, vol)
	st := w.waitFor(nodes[0], "COMPLETE long before the hour's recheck", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusComplete
	})
	t.Logf("volume safe → COMPLETE: %s", st.UpdatedAt.Sub(safe).Round(time.Millisecond))

	// The return gate reacts too: the node is back and healthy, so its slot is freed without
	// waiting for the timer.
	w.withdraw(nodes[0])
	w.waitFor(nodes[0], "idle with its slot free", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.HoldsSlot()
	})
}

// rebuilt plays Longhorn finishing the rebuild of vol's replica 1: its engine controller reports
// the replica RW with no rebuild under way (the replica is still not healthy: the node stays
// blocked), then its volume controller sets the replica's spec.healthyAt, the one write that
// makes it a copy. It returns when that write was sent.
func rebuilt(t testing.TB, c *testenv.Cluster, vol volumeOn) time.Time {
	t.Helper()
	done := vol
	done.state, done.rebs = append([]replicaState{}, vol.state...), nil
	done.state[1] = "healthy"
	objs := done.objects()
	applyLonghorn(t, c.Dynamic, objs[len(objs)-1]) // the engine
	patch := []byte(`{"spec":{"healthyAt":"` + healthyAt + `"}}`)
	safe := time.Now()
	_, err := c.Dynamic.Resource(longhornReplicas).Namespace(lhNS).Patch(context.Background(), vol.name+"-r-1", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	return safe
}

// BenchmarkSafeToComplete measures the time from the Longhorn update that makes a drained node's
// volume safe to the COMPLETE the coordinator publishes, on the local cluster, with the gate's
// change signal (react, the default --volume-react 50 ms) and with the recheck timer alone (timer,
// the default 2 s), side by side.
// The figure is the median over the iterations (ms-p50) and the worst (ms-max).
//
//	go test -run '^$' -bench SafeToComplete -benchtime 10x ./pkg/volumes
func BenchmarkSafeToComplete(b *testing.B) {
	c := testenv.RequireCluster(b, cluster)
	for i, mode := range []string{"react", "timer"} {
		b.Run(mode, func(b *testing.B) {
			group := fmt.Sprintf("bench-react-%d", i)
			nodes := c.AddNodes(b, group, 2)
			g := startGate(b, c, nil)
			w := startDrainWorld(b, c, group, g.Gate, func(cfg *coordinator.Config) {
				cfg.Limits.GateRecheck, cfg.Limits.GateReact = nodedrain.DefaultLimits().GateRecheck, nodedrain.DefaultLimits().GateReact
				if mode == "timer" { // a reaction as late as the timer: no reaction at all
					cfg.Limits.GateReact = cfg.Limits.GateRecheck
				}
				cfg.Limits.ReturnTimeout = 0
			})
			var took []time.Duration
			b.ResetTimer()
			for n := range b.N {
				vol := volumeOn{name: fmt.Sprintf("vol-%s-%d", group, n), nodes: nodes, state: []replicaState{"healthy", "rebuilding"}}
				vol.rebs = []rebuild{{to: vol.addr(1), progress: 80, from: []string{vol.addr(0)}}}
				applyLonghorn(b, c.Dynamic, vol.objects()...)
				id := fmt.Sprintf("r-%d", n)
				w.Request(b, nodes[0], id, time.Now())
				w.WaitFor(b, nodes[0], 30*time.Second, "CORDONED and blocked", func(s nodedrain.NodeDrainStatus) bool {
					return s.RequestID == id && s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1
				})
				safe := rebuilt(b, c, vol)
				st := w.WaitFor(b, nodes[0], 30*time.Second, "COMPLETE", func(s nodedrain.NodeDrainStatus) bool {
					return s.RequestID == id && s.Status == nodedrain.StatusComplete
				})
				took = append(took, st.UpdatedAt.Sub(safe))
				w.Withdraw(b, nodes[0])
				w.WaitFor(b, nodes[0], 30*time.Second, "idle", func(s nodedrain.NodeDrainStatus) bool {
					return s.RequestID == id && s.Status == nodedrain.StatusNotRequested && !s.HoldsSlot() && !s.CordonedByUs
				})
				// The next iteration's volume is a new one: this one no longer counts.
				vol.state[0] = "failed"
				applyLonghorn(b, c.Dynamic, vol.objects()...)
			}
			b.StopTimer()
			slices.Sort(took)
			require.NotEmpty(b, took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// signalled reports whether the gate signalled a change since the last call.
func signalled(g *Gate) bool {
	select {
	case <-g.Changed():
		return true
	default:
		return false
	}
}

// Only changes that may concern a node whose check is blocked wake the coordinator: churn
// elsewhere in the cluster does not (review: any pod or engine update anywhere hurried every
// blocked check).
func TestGateSignalsOnlyChangesThatConcernABlockedNode(t *testing.T) {
	vol := volumeOn{name: "vol-w", nodes: []string{"a", "b"}, state: []replicaState{"healthy", "rebuilding"}}
	vol.rebs = []rebuild{{to: vol.addr(1), progress: 10, from: []string{vol.addr(0)}}}
	g := offlineGate(t, PolicyWait, []*corev1.Node{readyNode("a"), readyNode("b"), readyNode("c")}, vol.objects()...)
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	pods := g.reactTo(g.podConcerns)
	other := lhReplica("other-r-0", "other", "c", "healthy", "10.9.0.1")

	pods.OnUpdate(pod("web-1", "a"), pod("web-1", "a"))
	g.longhornChanged(longhornReplicas.Resource, vol.objects()[2])
	assert.False(t, signalled(g), "nothing is blocked yet: nothing to wake")

	r, err := g.Check(context.Background(), "a", beforeEviction)
	require.NoError(t, err)
	require.False(t, r.Safe)
	pods.OnUpdate(pod("web-2", "c"), pod("web-2", "c"))
	g.longhornChanged(longhornReplicas.Resource, other)
	assert.False(t, signalled(g), "a pod on another node, another volume's replica")
	pods.OnUpdate(pod("web-1", "a"), pod("web-1", "a"))
	assert.True(t, signalled(g), "a pod on the blocked node")
	g.longhornChanged(longhornReplicas.Resource, vol.objects()[2]) // the rebuilding replica, on b
	assert.True(t, signalled(g), "a replica of the blocking volume, wherever it is")
	g.longhornChanged(longhornNodes.Resource, lhNode("c", true))
	assert.True(t, signalled(g), "any Longhorn Node")

	require.NoError(t, g.Release(context.Background(), "a"))
	pods.OnUpdate(pod("web-1", "a"), pod("web-1", "a"))
	assert.False(t, signalled(g), "released: no longer watched")
}
