package coordinator

import (
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// strandedCordons tells each drain whose node the informer shows carrying edgedrain's cordon
// record that it is so (nodedrain.EvCordonFound): one idle or queued, with nothing under way,
// uncordons it. A cordon whose client gave up may land after its drain ended (S4). A view of
// the node older than the drain's own last uncordon (an informer that has not yet delivered
// it) shows the record that uncordon removed, not a cordon that landed since: it says nothing.
func (c *Core) strandedCordons(nodes []nodedrain.NodeInfo, now time.Time) []NodeAction {
	var out []NodeAction
	for _, n := range nodes {
		d, ok := c.drains[n.Name]
		if ok && n.CordonRecord && !olderThan(n.ResourceVersion, d.UncordonedRV) {
			out = append(out, c.Handle(n.Name, nodedrain.EvCordonFound{}, now)...)
		}
	}
	return out
}

// olderThan reports whether the Node object of resourceVersion seen is older than the one of
// resourceVersion mark. Either unknown, or not comparable: false (the view is taken as it is).
func olderThan(seen, mark string) bool {
	if seen == "" || mark == "" {
		return false
	}
	cmp, err := resourceversion.CompareResourceVersion(seen, mark)
	return err == nil && cmp < 0
}
