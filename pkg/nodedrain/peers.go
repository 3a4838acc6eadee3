package nodedrain

import (
	"fmt"
	"slices"
	"strings"
)

// VolumePeers names one volume with data on a node and the other nodes holding a healthy copy
// of it. Under the wait policy a drain waits until each of its volumes has a usable copy on a
// node not in maintenance; two drains whose volume's only other copies are on each other's
// nodes would wait for each other forever.
type VolumePeers struct {
	Volume string
	Nodes  []string
}

// peerConflict says why node must not be in maintenance together with the nodes of inMaint: a
// volume of node whose every other copy is on one of them ("" when there is none). A volume
// with no other copy at all is not such a conflict: its drain waits for a copy whatever else is
// in maintenance, and admission does not hold it back for that.
func peerConflict(peers []VolumePeers, inMaint map[string]bool) string {
	for _, vp := range peers {
		if len(vp.Nodes) == 0 || slices.ContainsFunc(vp.Nodes, func(n string) bool { return !inMaint[n] }) {
			continue
		}
		nodes := slices.Sorted(slices.Values(vp.Nodes))
		return fmt.Sprintf("waiting: the other copies of volume %s are on %s, in maintenance: both drains would wait for each "+
			"other's copy (volume policy wait)", vp.Volume, strings.Join(nodes, ", "))
	}
	return ""
}
