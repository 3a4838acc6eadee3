package agent

import (
	"fmt"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// This file holds the agent's last check before it runs a command the bus cleared: a fresh
// read of the node's status, recent enough to stand for the bus now, that still clears the
// current request and still gives the node its admission slot.

// ConfirmMaxAge bounds the age of the confirmation read a command runs on: the read must have
// been asked for at most this long before the command starts, or it is read again. A read
// answered or handled later (the agent paused or starved, its loop held up, the bus slow) says
// what the bus held when it was made, not now: a withdrawal or a stale holder's slot release may
// have come since. Twice the bus's operation timeout, so that a read queued behind one publish
// that timed out still counts; far below any --stale-holder-timeout that makes sense.
const ConfirmMaxAge = 2 * busOpTimeout

// confirmedNow reports whether a confirmation read for the current request stands for the bus
// now: it cleared the request and was asked for within ConfirmMaxAge.
func (s *stepper) confirmedNow() bool {
	if s.m.Confirmed != s.m.State.RequestID {
		return false
	}
	if age := s.now.Sub(s.m.ConfirmAskedAt); age > ConfirmMaxAge {
		s.m.Confirmed = ""
		s.report(LevelWarn, "the status read that confirmed request %s was asked for %s ago (more than %s): reading it again before the %s",
			s.m.State.RequestID, age.Round(time.Millisecond), ConfirmMaxAge, s.m.State.Operation)
		return false
	}
	return true
}

// confirm asks for a fresh read of the status (unless one is under way or waits for its retry):
// the watch may be behind, or replaying history after a reconnect (a COMPLETE since withdrawn).
func (s *stepper) confirm() {
	if s.m.Confirming || !s.m.ConfirmRetryAt.IsZero() {
		return
	}
	s.m.Confirming, s.m.State.RetryAt = true, time.Time{} // due now: the read's answer decides
	s.m.ReadFrom, s.m.ConfirmAskedAt = s.m.BusRevision, s.now
	s.actions = append(s.actions, ReadStatus{})
}

// statusRead takes the status read from the bus as the node's status; if it still clears the
// current request, the command may run. Only such a checked read confirms a command: a status the
// watch delivered never does, whatever it says.
func (s *stepper) statusRead(e EvStatusRead) {
	s.m.Confirming = false
	if e.Err != nil {
		s.m.ConfirmRetryAt = s.now.Add(s.p.BusRetry)
		s.report(LevelWarn, "cannot read the drain status to confirm it before the %s: %v; retrying in %s", s.m.State.Operation, e.Err, s.p.BusRetry)
		return
	}
	if s.m.BusRevision != s.m.ReadFrom && e.Revision < s.m.BusRevision {
		// The watch delivered a newer value while the read was under way (the read was served
		// before it was written). The delivery confirms nothing: it may stand without its
		// checked read (the bus layer's fallback, e.g. a server copy of an old COMPLETE the
		// read answers "no value" for), so the status is read again, checked, at once (the
		// reconcile that follows asks). The older read is not taken either: it would roll the
		// agent back.
		return
	}
	// The read is the bus now. A read older than a value the agent had before asking means the
	// bucket was replaced: the read is the truth then.
	s.takeBus(e.Status, e.Revision)
	if c := e.Status; c != nil && c.RequestID == s.m.State.RequestID && e.outageNotEveryones() {
		s.askAgain(fmt.Sprintf("COMPLETE for request %s comes from the API-unreachable rule (%s), but this node reaches the "+
			"Kubernetes API: the coordinator alone is cut off from it, so the %s does not run undrained on it",
			c.RequestID, c.Message, s.m.State.Operation))
		return
	}
	// Only what the read answered confirms.
	if c := e.Status; c != nil && c.RequestID == s.m.State.RequestID && c.Status.Clears() && !s.m.slotReleased() {
		if s.m.State.Operation != OpDecommission || (c.Status == nodedrain.StatusComplete && c.Decommission) {
			s.m.Confirmed = c.RequestID
			return
		}
		if s.m.NotDecommissioned != c.RequestID {
			// A decommission wipes or powers off the machine for good: only a coordinator that
			// says it deleted the Node (not NOTSUPPORTED, nor an older coordinator's COMPLETE)
			// lets it run; an operator's override file still can.
			s.m.NotDecommissioned = c.RequestID
			s.report(LevelWarn, "%s for request %s does not say the node was decommissioned (its Node object deleted): "+
				"the decommission does not run (an older coordinator, or decommissions off?); withdraw the request, or force it with the override file",
				c.Status, c.RequestID)
		}
	}
	// Not confirmed: unless the answer moves the operation on (a released slot, a withdrawal),
	// ask again only after a while (no loop of reads while something else, e.g. an override,
	// keeps it cleared).
	s.m.ConfirmRetryAt = s.now.Add(s.p.BusRetry)
}

// slotReleased reports whether the bus's status is a COMPLETE (or NOTSUPPORTED) whose admission slot the
// coordinator released because the node never came back (SlotReleased: NotReady, or its Node
// object gone, for the stale-holder timeout; or down under a declared whole-cluster shutdown).
// The slot may be another node's now. A decommission's COMPLETE carries SlotReleased too (its
// Node object is deleted, by design): that one is the decommission's go-ahead.
func (m Machine) slotReleased() bool {
	b := m.Bus
	return b != nil && (b.Status == nodedrain.StatusComplete || b.Status == nodedrain.StatusNotSupported) &&
		b.SlotReleased && !b.Decommission
}

// released handles a COMPLETE for the current request whose slot was released: the operation
// does not run on it, or one node more than --max-concurrent-drains could be in maintenance.
// The request is withdrawn (the coordinator uncordons the node) and the operation asks again at
// once with a new request, which waits for admission like any other. No drain failed: no
// backoff, and the drain failures are not counted.
func (s *stepper) released() {
	st := &s.m.State
	s.askAgain(fmt.Sprintf("%s for request %s says its admission slot was released (%s): another node may be in maintenance "+
		"in its place, so the %s does not run on it", s.m.Bus.Status, st.RequestID, s.m.Bus.Message, st.Operation))
}

// askAgain withdraws the current request, whose COMPLETE the operation does not run on (why),
// and asks again at once with a new request, which waits for admission like any other. No drain
// failed: no backoff, and the drain failures are not counted.
func (s *stepper) askAgain(why string) {
	st := &s.m.State
	s.report(LevelWarn, "%s; withdrawing the request and asking again", why)
	st.Phase, st.RetryAt, st.ClearedBy = PhaseBackoff, s.now, Clearance{}
	s.m.Confirmed, s.m.ConfirmRetryAt = "", time.Time{}
	if st.OnBus {
		st.OnBus = false
		s.sync()
	}
}
