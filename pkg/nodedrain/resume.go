package nodedrain

import "time"

// Resume rebuilds a node's drain after a coordinator restart from the status it last published
// and the request now on the bus (nil: none), and returns the actions that carry it on. Each
// operation is idempotent, so redoing the one that was under way is safe: a cordon finds the node
// already cordoned by edgedrain and does not cordon it again.
func Resume(st NodeDrainStatus, req *NodeDrainRequest, now time.Time, p Limits) (Drain, []Action) {
	d := Drain{Status: st, BusHolds: st.HoldsSlot(), ResumedAt: now}
	if req == nil || req.RequestID != st.RequestID {
		if req == nil && !st.Status.InProgress() && st.Status != StatusComplete && !st.Status.Failed() &&
			st.Status != StatusNotSupported {
			// Idle: only a cordon of ours may be left to undo, and a return gate to carry on.
			s := stepper{d: d, now: now, p: p}
			switch {
			case d.Decommissioned():
				s.forgetAfter(st.UpdatedAt)
			case st.CordonedByUs:
				s.start(OpUncordon, 0)
			case d.Returning():
				s.start(OpReturnGate, 0)
			}
			return s.d, s.actions
		}
		if (st.Status == StatusComplete || st.CompleteSent) && st.RequestID != "" {
			// The request this COMPLETE answered (its withdrawal starts the return gate, as if
			// this coordinator had seen the request).
			d.Request = RequestOf(st, "(restored from its status)")
		}
		return Step(d, EvRequest{Request: req}, now, p)
	}
	d.Request = req
	s := stepper{d: d, now: now, p: p}
	switch st.Status {
	case StatusRequested:
		switch {
		case st.CordonedByUs:
			// Queued with our cordon still on (the coordinator stopped while undoing it): undo
			// it; admission waits for that (and the return gate, if any, follows it).
			s.start(OpUncordon, 0)
		case d.Returning():
			s.start(OpReturnGate, 0)
		}
	case StatusStarting:
		s.start(OpCordon, st.Attempt)
	case StatusCordoned:
		s.start(OpGate, 0)
	case StatusDrainRetrying:
		// The status does not say whether attempt N failed ("attempt N of M failed") or was
		// under way ("eviction attempt N"): take the next, but never past the limit (an
		// interrupted last attempt is redone as itself).
		s.retry(OpEvict, min(st.Attempt+1, p.DrainAttempts), 0)
	case StatusComplete:
		if d.Decommissioned() {
			s.linger(st.UpdatedAt)
		}
	}
	return s.d, s.actions
}
