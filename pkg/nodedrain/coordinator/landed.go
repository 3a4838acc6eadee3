package coordinator

import (
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Landed holds, per node, the request of the COMPLETE a coordinator is known to have written
// there and not replaced by a later write of its own: an acknowledged write of this run, or the
// status read at resume. A write to the node's key that failed makes it unknown (Forget): the
// write may have landed (a lost reply) and replaced the COMPLETE, and a COMPLETE decided again
// for the same request would otherwise pass for the one on the bus. (A forger's value over it
// does not: putting the coordinator's COMPLETE back is the same act again, judged as of its
// decision.) The engine and the simulation's coordinator keep one each.
type Landed map[string]string

// Note records what a coordinator's status st, known to be on the bus, says of its node.
func (l Landed) Note(st nodedrain.NodeDrainStatus) {
	if st.Status == nodedrain.StatusComplete {
		l[st.Node] = st.RequestID
		return
	}
	delete(l, st.Node)
}

// MayRewrite reports whether st, a write the fence refused, may be written again at once. Not
// a COMPLETE decided longer than MaxAnswerAge before now that is not on the bus already: the
// first write landing late after a pause is the residual of any check before an act, but a
// second write would be another act on the same old checks; the drain checks again instead.
// A COMPLETE already landed (a repair puts it back) acts on nothing new.
func (l Landed) MayRewrite(st nodedrain.NodeDrainStatus, now time.Time) bool {
	return st.Status != nodedrain.StatusComplete || now.Sub(st.UpdatedAt) <= nodedrain.MaxAnswerAge || l[st.Node] == st.RequestID
}

// Forget makes node's COMPLETE unknown: a write to its key failed.
func (l Landed) Forget(node string) { delete(l, node) }
