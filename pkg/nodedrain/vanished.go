package nodedrain

import (
	"fmt"
	"time"
)

// A Node deleted while its drain is under way (kubectl delete node during the eviction, a
// machine removed from the cluster) must not hold the drain, and its admission slot, for ever,
// nor ever let the agent proceed (N1): once the Node has been missing for
// NodeGoneAfter (a kubelet registering it again takes seconds), the coordinator ends the drain
// (EvNodeGone). A Node that registers again within that time is a new object: the check before
// COMPLETE tells it by its UID and the drain starts over on it. A Node that registers again
// later is drained anew when its agent, answered FAILED, asks again.

// EvNodeGone says the drain's Node object has been missing from the cluster for For; it comes
// again at every admission pass until the drain has ended.
type EvNodeGone struct{ For time.Duration }

func (EvNodeGone) event() {}

// nodeGone ends a drain under way whose Node object is gone: FAILEDCORDON from STARTING,
// FAILEDDRAIN otherwise, saying why; the slot is free once that is published. A decommission
// is left to its own rule: its Node going is its purpose, and its deletion (or a coordinator
// resuming after it) counts it as deleted once missing for NodeGoneAfter.
func (s *stepper) nodeGone(e EvNodeGone) {
	// A cordon in flight is a write that may still land (on a Node registered under the name in
	// the meantime): its answer comes first, as for a withdrawal; the coordinator says it again.
	if !s.mayEndUnderWay() {
		return
	}
	// Whatever cordon the drain made went with the Node object; the withdrawal looks all the
	// same (an uncordon touches only a node under edgedrain's own cordon).
	s.d.CordonKnown, s.d.NodeUID, s.d.MissingSince, s.d.Evicted = false, "", time.Time{}, false
	s.endUnderWay(fmt.Sprintf("the Node object has been gone for %s (deleted, and not registered again): drain ended and "+
		"its admission slot freed; the operation must not run. A Node registering under this name is drained anew when "+
		"its agent asks again", e.For.Round(time.Second)))
}

// mayEndUnderWay reports whether a drain under way may be ended from outside (its node gone or
// no longer managed): not a decommission, whose Node going is its purpose, nor while a cordon is
// in flight (a write that may still land: its answer comes first; the event comes again).
func (s *stepper) mayEndUnderWay() bool {
	return s.d.Request != nil && s.d.Draining() && !s.d.Status.Decommission && s.d.Waiting != OpCordon
}

// endUnderWay ends a drain under way, cancelling what it had in flight: FAILEDCORDON from
// STARTING, FAILEDDRAIN otherwise, with why.
func (s *stepper) endUnderWay(why string) {
	if s.d.Waiting != OpNone || s.d.RetryOp != OpNone {
		s.actions = append(s.actions, Cancel{})
	}
	s.d.Waiting, s.d.RetryOp = OpNone, OpNone
	status := StatusFailedDrain
	if s.d.Status.Status == StatusStarting {
		status = StatusFailedCordon
	}
	s.set(status, why, nil)
	s.outcome(status, false)
}

// EvNodeUnmanaged says the drain's node has stopped matching the coordinator's --node-selector
// (its labels changed) for For; it comes again at every admission pass until the drain has
// ended. The node is still there, with whatever cordon the drain made.
type EvNodeUnmanaged struct{ For time.Duration }

func (EvNodeUnmanaged) event() {}

// nodeUnmanaged ends a drain under way whose node the coordinator no longer manages: FAILEDCORDON
// from STARTING, FAILEDDRAIN otherwise, so that its agent never proceeds on it; the slot is free
// once that is published. Unlike a Node gone, the node keeps the cordon the drain made: what the
// drain knows of it stays, so that the agent's withdrawal or its next request (queued until the
// node matches again) undoes it, as for any failed drain. A cordon in flight is waited for.
func (s *stepper) nodeUnmanaged(e EvNodeUnmanaged) {
	if !s.mayEndUnderWay() {
		return
	}
	s.endUnderWay(fmt.Sprintf("the node has not matched this coordinator's --node-selector for %s (its labels changed): "+
		"drain ended and its admission slot freed; the operation must not run. edgedrain's cordon is undone when the agent "+
		"withdraws or asks again; the node is drained anew once it matches again", e.For.Round(time.Second)))
}
