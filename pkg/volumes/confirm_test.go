package volumes

import (
	"context"
	"testing"

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
func (f *gateFixture) longhornVolumes(t *testing.T, node string) []Volume {
	t.Helper()
	vols, err := f.longhorn.Volumes(node)
	require.NoError(t, err)
	return vols
}
