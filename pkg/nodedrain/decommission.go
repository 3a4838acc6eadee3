package nodedrain

import (
	"errors"
	"fmt"
	"time"
)

// A decommission (DeclaresDecommission) drains the node for good: after the checks before
// COMPLETE (volumes safe elsewhere, node still cordoned) the node's Node object is deleted
// (OpDeleteNode), then COMPLETE is published with the admission slot released (the node is no
// longer in the cluster), and the agent runs its decommission command. DecommissionLinger after
// the request's withdrawal (NOTREQUESTED, naming it, meanwhile), or after COMPLETE if nobody
// withdraws it, the node's keys are removed from the bus (OpForget) and the drain is forgotten.

// NodeGoneAfter is how long a decommission's Node object must stay missing before it counts as
// deleted: a Node deleted by someone else may be registering again (its kubelet restarted), and
// then it is drained again, as a new one.
const NodeGoneAfter = time.Minute

// nodeDeleted handles OpDeleteNode's answer.
func (s *stepper) nodeDeleted(e EvResult) {
	// (A decommission checked again because its COMPLETE could not be published keeps
	// SlotReleased: the Node it deleted, or found gone for NodeGoneAfter, is still missing, and
	// its COMPLETE goes out at once. Waiting for NodeGoneAfter again would let the agent's pod,
	// which outlives its Node by about 40 s, go before it: a machine stranded.)
	if errors.Is(e.Err, ErrChecksStale) {
		// Nothing was sent: everything before the deletion again, at once (the Node's time
		// missing, if it is, still counts).
		s.note(fmt.Sprintf("not deleting the Node object: %v; checking volumes and the cordon again", e.Err), nil)
		s.start(OpFinalGate, 0)
		return
	}
	if e.Err == nil && e.Missing && !s.d.Status.SlotReleased {
		if s.d.MissingSince.IsZero() {
			s.d.MissingSince = s.now
		}
		if gone := s.now.Sub(s.d.MissingSince); gone < NodeGoneAfter {
			wait := s.p.GateRecheck
			s.note(fmt.Sprintf("the Node object is missing (registering again?): checking volumes and the cordon again in %s; "+
				"it counts as deleted once missing for %s", wait, NodeGoneAfter), nil)
			s.retry(OpFinalGate, 0, wait)
			return
		}
	}
	s.d.MissingSince = time.Time{}
	switch {
	case e.Err == nil && e.UID != "" && s.d.NodeUID != "" && e.UID != s.d.NodeUID:
		// Deleted and registered again since the last check: not the object the drain emptied.
		s.cordonAgain("the Node object was replaced before its deletion (deleted, and registered again): " +
			"draining the new one from the cordon")
	case e.Err != nil:
		// Time passes before the next try: everything before COMPLETE is checked again. (Not
		// every GateRecheck: a deletion that is forbidden stays so until an operator acts.)
		wait := max(s.p.GateRecheck, s.p.DrainBackoffMax)
		s.note(fmt.Sprintf("cannot delete the Node object: %v; checking volumes and the cordon again in %s", e.Err, wait), nil)
		s.retry(OpFinalGate, 0, wait)
	case !e.Cordoned:
		s.cordonAgain("node was uncordoned during the drain; cordoning it again")
	default:
		s.d.Status.SlotReleased, s.d.Status.CordonedByUs = true, false
		s.set(StatusComplete, "node decommissioned: drained, its volumes safe elsewhere and its Node object deleted; "+
			"the operation may run", nil)
		s.outcome(StatusComplete, false)
		s.linger(s.now)
	}
}

// cordonAgain starts over from the cordon: the node was found uncordoned before COMPLETE, under
// a cordon that is not the drain's own, or as a new Node object; why says which.
func (s *stepper) cordonAgain(why string) {
	s.d.Status.CordonedByUs, s.d.CordonKnown, s.d.Evicted, s.d.MissingSince, s.d.NodeUID = false, false, false, time.Time{}, ""
	s.d.Status.SlotReleased = false // (a decommission checked again after its COMPLETE failed: its Node is back)
	s.set(StatusStarting, why, nil)
	s.start(OpCordon, 1)
}

// linger removes a decommissioned node's keys DecommissionLinger after its COMPLETE (at since),
// if its agent has not withdrawn the request by then (never when DecommissionLinger is zero).
func (s *stepper) linger(since time.Time) {
	if s.p.DecommissionLinger > 0 {
		s.forgetAfter(since)
	}
}

// decommissionWithdrawn handles the withdrawal of a decommissioned node's request: NOTREQUESTED
// naming it, so that an agent that did not withdraw it itself learns it was (edgedrainctl
// withdraw cancels its decommission; removed at once, the status would leave a restarted
// agent publishing its request again, for a Node gone for good); nothing to uncordon (the Node
// is gone); the keys go DecommissionLinger later.
func (s *stepper) decommissionWithdrawn() {
	s.d.Request = nil
	if s.d.Status.Status != StatusNotRequested {
		s.set(StatusNotRequested, fmt.Sprintf("request withdrawn; the node was decommissioned (its Node object deleted): "+
			"this status leaves the bus in %s", s.p.DecommissionLinger), nil)
	}
	s.forgetAfter(s.now)
}

// forgetAfter removes a withdrawn decommission's keys DecommissionLinger after since (at once
// when the linger is zero or over).
func (s *stepper) forgetAfter(since time.Time) {
	if wait := since.Add(s.p.DecommissionLinger).Sub(s.now); wait > 0 {
		s.retry(OpForget, 0, wait)
		return
	}
	s.start(OpForget, 0)
}

// forgotten handles OpForget's answer: once the keys are gone, so is the drain (it publishes
// nothing more); a failure is retried (Forgetting: the request may be gone already).
func (s *stepper) forgotten(e EvResult) {
	if e.Err != nil {
		s.retry(OpForget, 0, s.p.UncordonRetry)
		s.d.ForgetFailed = true
		return
	}
	s.d = Drain{Status: NodeDrainStatus{Node: s.d.Status.Node, Status: StatusNotRequested}}
	s.actions = append(s.actions, Forgotten{})
}

// Forgetting reports whether the drain is removing its node's keys: a forget in flight, or one
// that failed and is retried. Its removal of the request may have landed before it failed (the
// request goes first), so a withdrawal seen now is its echo, or changes nothing: the keys go.
func (d Drain) Forgetting() bool {
	return d.Waiting == OpForget || (d.RetryOp == OpForget && d.ForgetFailed)
}

// Forgotten reports that a decommissioned node's keys were removed from the bus: the
// coordinator forgets the node (nothing of it is published again).
type Forgotten struct{}

func (Forgotten) action() {}
