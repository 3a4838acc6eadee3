package volumes

import (
	"context"
	"fmt"
	"time"

	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// The check before COMPLETE is decided on what the API server says, not on caches that stopped
// following it (as after an API server restart, while each reflector backs off): the Node that
// holds the volume's other copy is deleted and the caches never hear of it.
func TestCheckBeforeCompleteReadsTheAPINotStaleCaches(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "stale", 2)
	g := startGate(t, c, nil)
	vol := volumeOn{name: "vol-stale", nodes: nodes, state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "the caches hold the volume", func(r coordinator.GateResult) bool {
		return r.Safe && len(g.longhornVolumes(t, nodes[0])) == 1
	})
	require.True(t, g.check(t, nodes[0], afterEviction).Safe, "the API agrees with the caches: safe")
	assert.Zero(t, testutil.ToFloat64(g.metrics.StaleCaches))

	g.cancel() // the informers stop: their caches stay as they were
	require.NoError(t, c.Client.CoreV1().Nodes().Delete(context.Background(), nodes[1], metav1.DeleteOptions{}))

	assert.True(t, g.check(t, nodes[0], beforeEviction).Safe, "the check before eviction answers from the caches")
	r := g.check(t, nodes[0], afterEviction)
	assert.False(t, r.Safe, "COMPLETE while the other copy's Node is gone")
	require.Len(t, r.Blockers, 1)
	assert.Equal(t, "vol-stale", r.Blockers[0].Name)
	assert.Contains(t, r.Blockers[0].Reason, "last healthy replica")
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.StaleCaches))
	assert.True(t, g.check(t, nodes[0], coordinator.GateOptions{AfterEviction: true, LastKnown: true}).Safe,
		"the API-unreachable rule asks for the last known view: the caches'")

	// A read that fails decides nothing: the check fails, to be asked again.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := g.Check(ctx, nodes[0], afterEviction)
	require.ErrorIs(t, err, ErrNotConfirmed)
}

// longhornVolumes is what the gate's Longhorn caches hold on node.
func (f *gateFixture) longhornVolumes(t testing.TB, node string) []Volume {
	t.Helper()
	vols, err := f.longhorn.Volumes(node)
	require.NoError(t, err)
	return vols
}

// BenchmarkCheckBeforeComplete is the check COMPLETE follows on the local cluster, answered from
// the caches alone (cached: the API-unreachable rule's last known view) and confirmed on a read of
// the API server (confirmed: every drain's), side by side, for an edge cluster's 3 nodes and 30
// Longhorn volumes of 3 replicas, and for 300.
//
//	go test -run '^$' -bench CheckBeforeComplete ./pkg/volumes
func BenchmarkCheckBeforeComplete(b *testing.B) {
	c := testenv.RequireCluster(b, cluster)
	for i, volumes := range []int{30, 300} {
		nodes := c.AddNodes(b, fmt.Sprintf("bench-confirm-%d", i), 3)
		g := startGate(b, c, func(cfg *Config) { log := logrus.New(); log.SetLevel(logrus.WarnLevel); cfg.Logger = log })
		var objs []*unstructured.Unstructured
		for v := range volumes {
			vol := volumeOn{name: fmt.Sprintf("vol-confirm-%d-%d", i, v), nodes: nodes, state: []replicaState{"healthy", "healthy", "healthy"}}
			objs = append(objs, vol.objects()...)
		}
		applyLonghorn(b, c.Dynamic, objs...)
		require.Eventually(b, func() bool { return len(g.longhornVolumes(b, nodes[0])) == volumes }, time.Minute, 20*time.Millisecond,
			"the caches never held the %d volumes", volumes)
		for _, mode := range []string{"cached", "confirmed"} {
			opts := coordinator.GateOptions{AfterEviction: true, LastKnown: mode == "cached"}
			b.Run(fmt.Sprintf("volumes=%d/%s", volumes, mode), func(b *testing.B) {
				for b.Loop() {
					r, err := g.Check(context.Background(), nodes[0], opts)
					if err != nil || !r.Safe {
						b.Fatalf("check: %+v, %v", r, err)
					}
				}
			})
		}
	}
}
