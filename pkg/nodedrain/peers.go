package nodedrain

import (
	"fmt"
	"slices"
	"strings"
	"time"
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

// EvGiveWay says the drain gives way to drains admitted before it (GiveWay): it goes back to
// REQUESTED and undoes its cordon; Reason says why.
type EvGiveWay struct{ Reason string }

func (EvGiveWay) event() {}

// GiveWay lists the drains under way that must give way (node → why): a drain that may
// (mayGiveWay) with a volume whose every other copy is on nodes whose drains are under way too
// and were admitted before it. Admission keeps such pairs apart, but a copy can fail after both were admitted (a third copy's disk): then each
// drain waits for the other's copy, which its cordon makes unusable, and Longhorn rebuilds no
// copy as long as the volume has as many as it asks for, wherever they are (nor on a cordoned
// node, by default, nor on a full disk). The drain admitted last gives way, so that in any such
// cycle exactly one does: its node uncordoned, its copy counts again, and it waits in REQUESTED
// (peerConflict) until the drains ahead are done. A drain cleared (COMPLETE) is never taken back.
func GiveWay(drains map[string]Drain, peers func(node string) []VolumePeers) map[string]string {
	out := map[string]string{}
	for name, d := range drains {
		if !d.mayGiveWay() {
			continue
		}
		for _, vp := range peers(name) {
			if len(vp.Nodes) > 0 && !slices.ContainsFunc(vp.Nodes, func(n string) bool { return !aheadOf(drains[n], n, d, name) }) {
				nodes := slices.Sorted(slices.Values(vp.Nodes))
				out[name] = fmt.Sprintf("giving way: the other copies of volume %s are on %s, whose drains came first and "+
					"would wait for this node's copy (volume policy wait)", vp.Volume, strings.Join(nodes, ", "))
				break
			}
		}
	}
	return out
}

// mayGiveWay reports whether the drain can give way: past its cordon, the cordon edgedrain's (or
// not known: an uncordon undoes only edgedrain's), no operation in flight, not a decommission
// (which evicts its copies whatever the policy), and no COMPLETE sent: one whose publication
// failed may have landed all the same, the node going down, and giving way would free its slot
// for a third drain.
func (d Drain) mayGiveWay() bool {
	return d.Request != nil && d.Cordoned() && d.Waiting == OpNone && !d.Status.Decommission && !d.Status.CompleteSent &&
		(d.Status.CordonedByUs || !d.CordonKnown)
}

// aheadOf reports whether p, node pn's drain, is under way and was admitted before d, node
// dn's (the same instant: by name), or has sent its COMPLETE: such a drain cannot give way (its
// node may be going down), so the other one does, whenever it was admitted.
func aheadOf(p Drain, pn string, d Drain, dn string) bool {
	if p.Request == nil || !p.Draining() {
		return false
	}
	if p.Status.CompleteSent != d.Status.CompleteSent {
		return p.Status.CompleteSent
	}
	a, b := p.Status.StartedAt, d.Status.StartedAt
	return a.Before(b) || (a.Equal(b) && pn < dn)
}

// giveWay takes a drain that must give way (EvGiveWay) back to REQUESTED, undoing its cordon
// as a new request does; admitted again later, it starts over from the cordon.
func (s *stepper) giveWay(why string) {
	d := &s.d
	if !d.mayGiveWay() {
		return
	}
	if d.RetryOp != OpNone {
		s.actions = append(s.actions, Cancel{})
	}
	d.RetryOp, d.GateSafe, d.Evicted, d.CordonKnown, d.NodeUID, d.MissingSince = OpNone, false, false, false, "", time.Time{}
	d.Status.Attempt, d.Status.StartedAt = 0, time.Time{}
	s.set(StatusRequested, why+"; uncordoning the node until admitted again", nil)
	s.start(OpUncordon, 0)
}
