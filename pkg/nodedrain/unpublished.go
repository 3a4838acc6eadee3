package nodedrain

// publishFailed handles EvPublishFailed: a COMPLETE that did not reach the bus is not published
// later as it was. What made it true may have changed meanwhile (an operator uncordoned the
// node; a decommissioned node's kubelet registered it again), so the drain checks again first.
//
// A COMPLETE re-published only to mark its slot released is not such a COMPLETE: the first one
// reached the bus, the agent may have run its operation; it is retried as it is. A decommission's
// COMPLETE carries SlotReleased from its first publication (its Node object was deleted), and
// until a publication of it is acknowledged (BusHolds: the bus may still show the node
// CORDONED, and no other node is admitted in its place) it is checked again like any other: a
// Node that registers again meanwhile is a new node, drained before it is deleted, and a
// COMPLETE sent as it was would tell the agent to power off a machine that is in the cluster
// again (simulation, D1). Its status keeps SlotReleased while it is checked again: the Node
// object it deleted is gone, so a withdrawal meanwhile (the COMPLETE may have landed, its reply
// lost, and the agent run its command) is a decommissioned node's, whose keys go; a Node found
// under the name starts the drain over (cordonAgain), as a node that is no longer decommissioned.
func (s *stepper) publishFailed() {
	st := &s.d.Status
	if st.Status != StatusComplete || s.d.Request == nil || (st.SlotReleased && !(s.d.Decommissioned() && s.d.BusHolds)) {
		return
	}
	// After a pause: a bus that refuses writes at once must not turn this into a loop of gate
	// checks and Node reads.
	// Its write may have landed all the same (a lost reply): the agent may act on it.
	st.CompleteSent, st.APIUnreachable = true, false
	if !s.d.Evicted {
		// A COMPLETE of the API-unreachable rule: its pods were never evicted (checked
		// again from the final gate only, it would go COMPLETE with a pod on it).
		s.set(StatusCordoned, "the COMPLETE could not be published; checking volumes, the pods and the cordon again", nil)
		s.retry(OpGate, 0, s.p.GateRecheck)
		return
	}
	s.set(StatusCordoned, "the COMPLETE could not be published; checking volumes and the cordon again", nil)
	s.retry(OpFinalGate, 0, s.p.GateRecheck)
}

// completeNotLanded handles EvCompleteNotLanded: the drain, checking again after its COMPLETE
// could not be published, forgets that it was sent. Such a drain never gives way to another
// (its node may be going down on the COMPLETE); two of them whose volume has its other copies
// on each other's nodes would wait for each other for good, as would their return gates.
func (s *stepper) completeNotLanded(e EvCompleteNotLanded) {
	st := &s.d.Status
	if s.d.Request == nil || s.d.Request.RequestID != e.RequestID || st.RequestID != e.RequestID ||
		!st.CompleteSent || st.Status == StatusComplete {
		return
	}
	st.CompleteSent = false
}
