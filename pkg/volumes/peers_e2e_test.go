package volumes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// With two slots and the wait policy, the two nodes holding a volume's only copies ask together:
// admitted together, each drain would wait forever for the copy on the other, cordoned, node.
// The second waits in REQUESTED until the first is over (issue 23, defect 5).
func TestTwoSlotsNeverPutBothCopiesOfAVolumeInMaintenance(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "e2e-peers", 3)
	g := startGate(t, c, nil)
	vol := volumeOn{name: "vol-peers", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "the gate has seen the volume", func(r coordinator.GateResult) bool {
		return r.Safe && len(g.Peers(nodes[0])) == 1
	})
	assert.Equal(t, []nodedrain.VolumePeers{{Volume: "vol-peers", Nodes: []string{nodes[1]}}}, g.Peers(nodes[0]))
	w := startDrainWorld(t, c, "e2e-peers", g, func(cfg *coordinator.Config) { cfg.MaxConcurrentDrains = 2 })

	w.request(nodes[0])
	w.waitFor(nodes[0], "COMPLETE", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	w.request(nodes[1])
	w.request(nodes[2])
	st := w.waitFor(nodes[1], "REQUESTED naming the volume", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && s.RequestID == "r-"+nodes[1] && s.Message != "waiting for admission"
	})
	assert.Contains(t, st.Message, "the other copies of volume vol-peers are on "+nodes[0]+", in maintenance")
	w.waitFor(nodes[2], "COMPLETE: the second slot goes to a node without the volume",
		func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	testenv.Never(t, func() bool { return w.last(nodes[1]).Status != nodedrain.StatusRequested },
		time.Second, 50*time.Millisecond, "the node with the volume's other copy is admitted while the first is in maintenance")

	w.withdraw(nodes[0]) // back from its maintenance
	w.waitFor(nodes[1], "COMPLETE once the first is over", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusComplete
	})
}
