package sim

import (
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// U1: a node is let go undrained (NOTSUPPORTED) as the last node up of a declared whole-cluster
// shutdown only when no other node could take its workloads: none is up, out of maintenance by
// the bus, and either schedulable or cordoned by edgedrain alone (a cordon edgedrain lifts, as it
// does for a drain whose request was replaced). The Node must have been such a target for
// lastNodeSlack before the decision: a coordinator decides on its informers' view, which runs
// behind the API (nodeview.go, informerlag.go); the bus status is the coordinator's own, read as
// of the decision. trackHealth records when each node could take the workloads.

// lastNodeSlack is how long another node must have been able to take the workloads before a
// NOTSUPPORTED for U1 to call it missed: the informers' lag, and a check-then-act.
const lastNodeSlack = maxViewLag + 2*freshness

// lastNodeMessage opens the NOTSUPPORTED of the last node up under a declaration.
const lastNodeMessage = "declared whole-cluster shutdown: this is the last node up"

// inMaintenance reports whether the bus shows node in maintenance: its drain under way past
// admission, COMPLETE, NOTSUPPORTED, or failed (its cordon kept).
func (s *Sim) inMaintenance(node string) bool {
	st, _ := s.statusOf(node).(nodedrain.NodeDrainStatus)
	return (st.Status.InProgress() && st.Status != nodedrain.StatusRequested) ||
		st.Status == nodedrain.StatusComplete || st.Status == nodedrain.StatusNotSupported ||
		st.Status == nodedrain.StatusFailedCordon || st.Status == nodedrain.StatusFailedDrain
}

// checkLastNodeUp checks U1 on a NOTSUPPORTED first published, decided now, under the
// declaration, while the API has answered long enough for the informers to have caught up.
func (s *Sim) checkLastNodeUp(prev, st nodedrain.NodeDrainStatus) {
	if st.Status != nodedrain.StatusNotSupported || !strings.HasPrefix(st.Message, lastNodeMessage) ||
		(prev.Status == st.Status && prev.RequestID == st.RequestID) || !st.UpdatedAt.Equal(s.w.now) {
		return
	}
	if !s.cluster.apiUp || s.w.now.Sub(s.cluster.apiUpAt) < maxCatchUp+time.Minute {
		return // (the informers may still be listing again)
	}
	for _, name := range s.cluster.order {
		if name != st.Node && s.hist.on(s.healthKeys(name).target, st.UpdatedAt, lastNodeSlack) && !s.inMaintenance(name) {
			s.violate("U1", "%s answered NOTSUPPORTED as the last node up while %s was up, in no maintenance, and could take its workloads",
				st.Node, name)
			return
		}
	}
}
