package coordinator

import (
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// strandedCordons tells each drain whose node the informer shows carrying edgedrain's cordon
// record that it is so (nodedrain.EvCordonFound): one idle or queued, with nothing under way,
// uncordons it. A cordon whose client gave up may land after its drain ended (S4).
func (c *Core) strandedCordons(nodes []nodedrain.NodeInfo, now time.Time) []NodeAction {
	var out []NodeAction
	for _, n := range nodes {
		if _, ok := c.drains[n.Name]; ok && n.CordonRecord {
			out = append(out, c.Step(n.Name, nodedrain.EvCordonFound{}, now)...)
		}
	}
	return out
}
