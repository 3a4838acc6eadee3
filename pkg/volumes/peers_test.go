package volumes

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Peers names, for each volume with a copy on the node, the other nodes holding an intact copy,
// or one being rebuilt, that is not going away; a failed, deleted or inactive replica is no
// copy, nor is a copy on a node whose Node object is gone, and a volume whose replica on the node
// failed is not the node's.
func TestPeersNameTheOtherCopies(t *testing.T) {
	vols := []Volume{
		{Name: "two", Replicas: []Replica{{Node: "a", Intact: true}, {Node: "b", Intact: true}}},
		{Name: "three", Replicas: []Replica{{Node: "a", Intact: true}, {Node: "b", Intact: false}, {Node: "c", Intact: true, Deleting: true},
			{Node: "d", Intact: true, Inactive: true}, {Node: "e", Intact: true, Running: false}}},
		{Name: "alone", Replicas: []Replica{{Node: "a", Intact: true}}},
		{Name: "failed-here", Replicas: []Replica{{Node: "a", Intact: false}, {Node: "b", Intact: true}}},
		{Name: "elsewhere", Replicas: []Replica{{Node: "b", Intact: true}, {Node: "c", Intact: true}}},
		{Name: "rebuilt-there", Replicas: []Replica{{Node: "a", Intact: true}, {Node: "f", Rebuilding: true}}},
		{Name: "rebuilt-here", Replicas: []Replica{{Node: "a", Rebuilding: true}, {Node: "b", Intact: true}}},
		{Name: "on-a-deleted-node", Replicas: []Replica{{Node: "a", Intact: true}, {Node: "gone", Intact: true}, {Node: "b", Intact: true}}},
	}
	assert.Equal(t, []nodedrain.VolumePeers{
		{Volume: "two", Nodes: []string{"b"}},
		{Volume: "three", Nodes: []string{"e"}},
		{Volume: "alone"},
		{Volume: "rebuilt-there", Nodes: []string{"f"}},
		{Volume: "rebuilt-here", Nodes: []string{"b"}},
		{Volume: "on-a-deleted-node", Nodes: []string{"b"}},
	}, Peers(vols, "a", func(n string) bool { return n != "gone" }))
}
