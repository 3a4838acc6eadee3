package nodedrain

import (
	"fmt"
	"time"
)

// Step returns the drain after ev happened at now, and the actions to take, in order.
func Step(d Drain, ev Event, now time.Time, p Limits) (Drain, []Action) {
	s := stepper{d: d, now: now, p: p}
	switch e := ev.(type) {
	case EvRequest:
		s.request(e.Request)
	case EvAdmit:
		s.admit()
	case EvQueued:
		if s.d.Status.Status == StatusRequested {
			s.note(e.Message, e.Blockers)
		}
	case EvNotSupported:
		if s.d.Status.Status == StatusRequested && s.d.Request != nil {
			s.set(StatusNotSupported, e.Reason, nil)
			s.outcome(StatusNotSupported, false)
		}
	case EvResult:
		s.result(e)
	case EvProgress:
		s.progress(e)
	case EvTimer:
		s.timer()
	case EvChanged:
		s.changed()
	case EvAPIUnreachable:
		s.apiUnreachable(e)
	case EvPublished:
		if !e.Holds && e.Status == s.d.Status.Status && !s.d.Status.HoldsSlot() {
			s.d.BusHolds = false
		}
	case EvNodeGone:
		s.nodeGone(e)
	case EvForgetIdle:
		if s.d.Idle() {
			s.start(OpForget, 0)
		}
	case EvCordonFound:
		s.cordonFound()
	case EvGiveWay:
		s.giveWay(e.Reason)
	case EvNodeUnmanaged:
		s.nodeUnmanaged(e)
	case EvReleaseSlot:
		if s.d.Cleared() && !s.d.Status.SlotReleased {
			// The bus shows the slot held until the release reaches it (S3 is about the bus).
			s.d.Status.SlotReleased, s.d.BusHolds = true, true
			s.set(s.d.Status.Status, e.Reason, nil)
			s.actions = append(s.actions, SlotReleased{Reason: e.Reason})
		}
	case EvPublishFailed:
		s.publishFailed()
	case EvCompleteNotLanded:
		s.completeNotLanded(e)
	}
	return s.d, s.actions
}

type stepper struct {
	d       Drain
	now     time.Time
	p       Limits
	actions []Action
}

// set changes the published status and queues its publication.
func (s *stepper) set(status DrainStatus, msg string, blockers []Blocker) {
	st := &s.d.Status
	st.Status, st.Message, st.Blockers, st.UpdatedAt = status, msg, blockers, s.now
	s.d.BusHolds = s.d.BusHolds || st.HoldsSlot()
	s.actions = append(s.actions, Publish{Status: *st})
}

// note changes the message (and blockers) of the current status, publishing only a real change.
func (s *stepper) note(msg string, blockers []Blocker) {
	if s.d.Status.Message == msg && sameBlockers(s.d.Status.Blockers, blockers) {
		return
	}
	s.set(s.d.Status.Status, msg, blockers)
}

func (s *stepper) start(op Op, attempt int) {
	s.d.Waiting, s.d.RetryOp = op, OpNone
	s.d.Reactive, s.d.ChangedDuring, s.d.CheckStarted = false, false, s.now
	if attempt > 0 {
		s.d.Status.Attempt = attempt
	}
	st := Start{Op: op, Attempt: s.d.Status.Attempt, Decommission: s.d.Status.Decommission}
	if op == OpDeleteNode {
		st.UID, st.CheckedAt = s.d.NodeUID, s.d.CheckedAt
	}
	s.actions = append(s.actions, st)
}

// retry starts op as attempt after the delay (the next EvTimer at or past that time).
func (s *stepper) retry(op Op, attempt int, after time.Duration) {
	s.d.Waiting, s.d.RetryOp, s.d.RetryAt, s.d.NextAttempt = OpNone, op, s.now.Add(after), attempt
	s.d.Reactive, s.d.ChangedDuring = false, false
}

// recheck asks a gate that answered blocked (by blockers) again after GateRecheck, or sooner
// after a change (reactDelay) when something an informer sees blocks it and changed while it
// was asked; a change before then brings it forward (changed).
func (s *stepper) recheck(op Op, blockers []Blocker) {
	took := max(s.now.Sub(s.d.CheckStarted), 0)
	changed := s.d.ChangedDuring
	after := s.p.GateRecheck
	reactive := informerSeen(blockers)
	if reactive && changed {
		after = min(after, s.reactDelay(took))
	}
	s.retry(op, 0, after)
	s.d.Reactive, s.d.CheckTook = reactive, took
}

// reactDelay is how long after a change a blocked gate is asked again: GateReact, at least as
// long as the last check took (checks then run at most half the time), at most GateRecheck.
func (s *stepper) reactDelay(took time.Duration) time.Duration {
	return min(max(s.p.GateReact, took), s.p.GateRecheck)
}

// informerSeen reports whether one of blockers is something the gate's informers see change:
// a volume, a pod or a node (not a Prometheus alert or query, nor the policy itself).
func informerSeen(blockers []Blocker) bool {
	for _, b := range blockers {
		switch b.Kind {
		case BlockerVolume, BlockerPod, BlockerNode:
			return true
		}
	}
	return false
}

// changed handles EvChanged: a blocked gate's recheck comes reactDelay after the change at the
// latest; a gate check in flight is marked, since it may have read the world before the change.
func (s *stepper) changed() {
	switch {
	case s.d.gateInFlight():
		s.d.ChangedDuring = true
	case s.d.ReactsToChange():
		if at := s.now.Add(s.reactDelay(s.d.CheckTook)); at.Before(s.d.RetryAt) {
			s.d.RetryAt = at
		}
	}
}

func (s *stepper) outcome(result DrainStatus, withdrawn bool) {
	if r := s.d.Request; r != nil {
		s.actions = append(s.actions, Outcome{Result: result, Withdrawn: withdrawn, RequestedBy: r.RequestedBy, Since: r.RequestedAt})
	}
}

func (s *stepper) request(r *NodeDrainRequest) {
	if r != nil && s.d.Request != nil && s.d.Request.RequestID == r.RequestID {
		return // the same request again (a watcher's snapshot after a reconnect)
	}
	if s.d.Request != nil && s.d.Status.Status.InProgress() {
		s.outcome(s.d.Status.Status, true)
	}
	// Any admitted drain may have cordoned the node although no reply said so (a lost reply, or
	// COMPLETE through the API-unreachable rule straight from STARTING): the uncordon finds out,
	// and only ever undoes a node carrying edgedrain's annotation.
	mayBeCordoned := s.d.Status.CordonedByUs || s.d.UncordonAfter
	switch s.d.Status.Status {
	case StatusStarting, StatusCordoned, StatusDrainRetrying, StatusFailedCordon, StatusFailedDrain, StatusComplete:
		mayBeCordoned = mayBeCordoned || !s.d.CordonKnown
	}
	// (A decommissioned node's Node object is gone: a Node of that name now is a new one.)
	mayBeCordoned = mayBeCordoned && !s.d.Decommissioned()
	if r == nil && s.d.Forgetting() {
		// The echo of the removal of the request under way: the removal goes on.
		s.d.Request = nil
		return
	}
	if s.d.Waiting != OpNone || s.d.RetryOp != OpNone {
		s.actions = append(s.actions, Cancel{})
	}
	if r == nil && s.d.Decommissioned() {
		s.decommissionWithdrawn()
		return
	}
	// The return gate: a node back from the operation its COMPLETE allowed (withdrawn, or
	// replaced by a new request) holds its slot until it is healthy again — unless its slot was
	// already released (it never came back in time), the gate is off, or the request declared
	// a whole-cluster shutdown (every node returns at once; holding a slot each would exceed
	// the limit). A gate under way carries on, whatever the request does: a new request waits
	// in REQUESTED, still holding the slot, until the node is healthy.
	// (A COMPLETE sent whose drain then ended, FAILED because its Node was gone, freed its slot
	// then, as a COMPLETE released as stale does: no gate either.)
	sent := s.d.Status.CompleteSent && s.d.Status.Status.InProgress()
	returning := s.d.Returning() || (s.d.Request != nil && (s.d.Status.Status == StatusComplete || sent) &&
		!s.d.Status.SlotReleased && s.p.ReturnTimeout > 0 && !DeclaresClusterShutdown(*s.d.Request) && !s.d.Status.Decommission)
	// A cordon or a Node deletion already sent may still land: the uncordon waits for its result.
	inFlight := s.d.Waiting
	writeInFlight := inFlight == OpCordon || inFlight == OpDeleteNode
	s.d.Request, s.d.Waiting, s.d.RetryOp, s.d.GateSafe, s.d.UncordonAfter, s.d.CordonKnown = r, OpNone, OpNone, false, false, false
	s.d.Evicted, s.d.MissingSince, s.d.NodeUID, s.d.ForgetFailed = false, time.Time{}, "", false
	// An uncordon already sent may still land too, and it removes whatever cordon of edgedrain's
	// it reads then: it is waited for (no drain is admitted before its answer), never doubled.
	// A second one, its answer taken for the first's, removed the cordon of the drain admitted
	// meanwhile, which went COMPLETE on a schedulable node (S2).
	if inFlight == OpUncordon {
		s.d.Waiting = OpUncordon
	}
	uncordon := func() {
		switch {
		case writeInFlight:
			s.d.Waiting, s.d.UncordonAfter = inFlight, true
		case inFlight != OpUncordon:
			s.start(OpUncordon, 0)
		}
	}
	st := &s.d.Status
	st.Attempt, st.StartedAt, st.SlotReleased, st.CompleteSent, st.APIUnreachable = 0, time.Time{}, false, false, false
	if !returning {
		st.ReturningSince = time.Time{}
	} else if st.ReturningSince.IsZero() {
		st.ReturningSince = s.now
	}
	if r == nil {
		// NOTREQUESTED keeps naming the withdrawn request: its agent, if it did not withdraw
		// it itself (edgedrainctl withdraw), learns that its operation is cancelled.
		if mayBeCordoned {
			msg := "request withdrawn; uncordoning the node"
			if returning {
				msg = "back from its operation: uncordoning the node; it holds its admission slot until it is healthy again"
			}
			s.set(StatusNotRequested, msg, nil)
			uncordon()
			return
		}
		if returning {
			s.set(StatusNotRequested, "back from its operation: holding its admission slot until it is healthy again", nil)
			s.start(OpReturnGate, 0)
			return
		}
		if st.Status != StatusNotRequested {
			s.set(StatusNotRequested, "request withdrawn", nil)
		}
		return
	}
	st.RequestID, st.RequestedBy, st.DeclaredShutdown = r.RequestID, r.RequestedBy, DeclaresClusterShutdown(*r)
	st.Decommission = DeclaresDecommission(*r)
	if mayBeCordoned {
		// A new request replaces one whose drain had (or may have) cordoned the node: undo
		// that cordon, as for a withdrawal; the new drain cordons again once admitted. Kept,
		// it would hold the node out of service without an admission slot.
		s.set(StatusRequested, "new request replaces the previous one; uncordoning the node until admitted", nil)
		uncordon()
		return
	}
	if returning {
		s.set(StatusRequested, "new request; back from its last operation, the node first holds its admission slot until it is healthy again", nil)
		s.start(OpReturnGate, 0)
		return
	}
	s.set(StatusRequested, "waiting for admission", nil)
}

func (s *stepper) admit() {
	if s.d.Status.Status != StatusRequested || s.d.Request == nil || s.d.uncordoning() {
		return
	}
	s.d.Status.StartedAt, s.d.Status.Attempt, s.d.Evicted = s.now, 1, false
	s.set(StatusStarting, "cordoning the node", nil)
	s.start(OpCordon, 1)
}

func (s *stepper) result(e EvResult) {
	if e.Op != s.d.Waiting || e.Op == OpNone {
		return // stale: the drain moved on
	}
	if s.d.UncordonAfter && e.Op == OpDeleteNode && e.Err == nil && e.Cordoned {
		// The Node deletion of a decommission withdrawn (or replaced) meanwhile landed: nothing
		// to uncordon; withdrawn, the node's keys go as after a decommission.
		s.d.UncordonAfter, s.d.Waiting, s.d.Status.CordonedByUs = false, OpNone, false
		if s.d.Request == nil {
			s.d.Status.SlotReleased = true // decommissioned
			s.note(fmt.Sprintf("request withdrawn; its Node object was deleted meanwhile (decommission): "+
				"this status leaves the bus in %s", s.p.DecommissionLinger), nil)
			s.forgetAfter(s.now)
			return
		}
		s.note("the Node object was deleted (a decommission's deletion was under way when this request came); "+
			"waiting for the node to register again", nil)
		return
	}
	if s.d.UncordonAfter && (e.Op == OpCordon || e.Op == OpDeleteNode) {
		// The cordon (or deletion) of a withdrawn or replaced drain has answered: now it can be undone.
		s.d.UncordonAfter = false
		s.start(OpUncordon, 0)
		return
	}
	if e.Op == OpReturnGate {
		// (The answer of a check a new request cancelled names the old request: ignored, and
		// the new request's check stays awaited.)
		if s.d.Returning() && e.RequestID == s.d.Status.RequestID {
			s.d.Waiting = OpNone
			s.returnGate(e)
		}
		return
	}
	if e.Op == OpForget {
		if e.RequestID == s.d.Status.RequestID {
			s.d.Waiting = OpNone
			s.forgotten(e)
		}
		return
	}
	if e.Op != OpUncordon && (s.d.Request == nil || e.RequestID != s.d.Request.RequestID) {
		return
	}
	s.d.Waiting = OpNone
	attempt := s.d.Status.Attempt
	switch e.Op {
	case OpCordon:
		switch {
		case e.Err == nil:
			s.d.Status.CordonedByUs, s.d.CordonKnown, s.d.NodeUID = e.ByUs, true, e.UID
			msg := "cordoned; checking volumes"
			if !e.ByUs {
				msg = "node already cordoned by someone else (edgedrain will leave it cordoned); checking volumes"
			}
			s.set(StatusCordoned, msg, nil)
			s.start(OpGate, 0)
		case e.Unreachable:
			s.note(fmt.Sprintf("cannot reach the Kubernetes API to cordon: %v; retrying", e.Err), nil)
			s.retry(OpCordon, attempt, s.p.CordonBackoffMax)
		case attempt >= s.p.CordonAttempts:
			s.set(StatusFailedCordon, fmt.Sprintf("cordon failed after %d attempts: %v", attempt, e.Err), nil)
			s.outcome(StatusFailedCordon, false)
		default:
			wait := Backoff(attempt, s.p.CordonBackoff, s.p.CordonBackoffMax)
			s.note(fmt.Sprintf("cordon attempt %d of %d failed: %v; retrying in %s", attempt, s.p.CordonAttempts, e.Err, wait), nil)
			s.retry(OpCordon, attempt+1, wait)
		}
	case OpGate, OpFinalGate:
		s.gate(e)
	case OpEvict:
		s.evicted(e, attempt)
	case OpCheckCordon:
		if e.Err == nil && !s.stale(e) {
			s.d.NodeMissing = e.Missing
		}
		switch {
		case e.Err == nil && s.stale(e):
			// The volume and policy answers before it are older still: all of them again.
			s.note("the cordon check answered too long ago (the coordinator was paused); checking again", nil)
			s.start(OpFinalGate, 0)
		case e.Err != nil:
			s.note(fmt.Sprintf("cannot check the node is still cordoned: %v; checking volumes and the cordon again", e.Err), nil)
			s.retry(OpFinalGate, 0, s.p.GateRecheck)
		case e.Missing:
			// Never COMPLETE for a node that vanished: it may register again (then it is a new
			// node, drained anew), or stay gone (then the coordinator ends the drain: EvNodeGone).
			s.note(fmt.Sprintf("the Node object is missing (deleted; registering again?): checking volumes and the cordon "+
				"again in %s; the drain ends if it stays missing for %s", s.p.GateRecheck, NodeGoneAfter), nil)
			s.retry(OpFinalGate, 0, s.p.GateRecheck)
		case s.d.NodeUID != "" && e.UID != "" && e.UID != s.d.NodeUID:
			// The name registered again: its pods, its cordon and its volumes are not the
			// drained node's.
			s.cordonAgain("the Node object was replaced during the drain (deleted, and registered again): " +
				"draining the new one from the cordon")
		case e.Cordoned && len(e.Pods) > 0 && !(e.Foreign && s.d.Status.CordonedByUs):
			// Pods landed on the node after the eviction attempt listed its pods (it evicts
			// those, as kubectl drain does): they go before COMPLETE, as a failed attempt's pods
			// do, within the attempts left (else COMPLETE with a pod the scheduler
			// bound to the node just before its cordon).
			s.d.Evicted = false
			s.evicted(EvResult{Err: fmt.Errorf("%d pod(s) landed on the node after the attempt listed its pods", len(e.Pods)),
				Blockers: e.Pods}, s.d.Status.Attempt)
		case e.Cordoned && e.Foreign && s.d.Status.CordonedByUs:
			// edgedrain's cordon is gone (someone uncordoned the node, then cordoned it): pods
			// may have landed meanwhile, so the drain starts over, under that cordon, which it
			// will leave in place. A decommission too, before it deletes the Node (else a
			// pod that landed in between would go with the deleted Node).
			s.cordonAgain("the node was uncordoned and cordoned again by someone else during the drain: " +
				"draining it again (that cordon is theirs; edgedrain will leave it)")
		case e.Cordoned && s.d.Status.Decommission:
			s.d.CheckedAt = e.At
			s.note("node drained and its volumes are safe elsewhere: deleting its Node object (decommission)", nil)
			s.start(OpDeleteNode, 0)
		case e.Cordoned:
			s.set(StatusComplete, "node drained and its volumes are safe: the operation may run", nil)
			s.outcome(StatusComplete, false)
		default:
			s.cordonAgain("node was uncordoned during the drain; cordoning it again")
		}
	case OpDeleteNode:
		s.nodeDeleted(e)
	case OpUncordon:
		if e.Err != nil {
			s.note(fmt.Sprintf("uncordon failed: %v; retrying in %s", e.Err, s.p.UncordonRetry), nil)
			s.retry(OpUncordon, 0, s.p.UncordonRetry)
			return
		}
		s.d.Status.CordonedByUs, s.d.UncordonedRV = false, e.ResourceVersion
		done := "node uncordoned"
		if e.Kept != "" {
			done = "node left cordoned: " + e.Kept
		}
		switch {
		case s.d.Returning():
			s.note(done+"; holding its admission slot until it is healthy again", nil)
			s.start(OpReturnGate, 0)
		case s.d.Request == nil:
			s.set(StatusNotRequested, "idle; "+done, nil)
		case e.Kept != "":
			s.note("new request; "+done+"; waiting for admission", nil)
		}
	}
}

func (s *stepper) gate(e EvResult) {
	switch {
	case e.Err != nil:
		s.note(fmt.Sprintf("volume gate: %v; asking again in %s", e.Err, s.p.GateRecheck), s.d.Status.Blockers)
		s.retry(e.Op, 0, s.p.GateRecheck)
	case !e.Safe:
		s.d.GateSafe = false
		s.note(blockedMessage(e.Blockers), e.Blockers)
		s.recheck(e.Op, e.Blockers)
	case e.Op == OpGate:
		s.d.GateSafe = true
		s.note("evicting pods", nil)
		s.start(OpEvict, 1)
	case s.stale(e):
		s.note("the volume check answered too long ago (the coordinator was paused); checking again", nil)
		s.start(OpFinalGate, 0)
	default:
		s.d.GateSafe = true
		s.start(OpCheckCordon, 0)
	}
}

// stale reports whether an answer is too old to act on (see MaxAnswerAge).
func (s *stepper) stale(e EvResult) bool {
	return !e.At.IsZero() && s.now.Sub(e.At) > MaxAnswerAge
}

func (s *stepper) evicted(e EvResult, attempt int) {
	switch {
	case e.Err == nil:
		s.d.Evicted = true
		s.note("all pods evicted; checking volumes again", nil)
		s.start(OpFinalGate, 0)
	case e.Unreachable:
		s.note(fmt.Sprintf("cannot reach the Kubernetes API to evict: %v; retrying", e.Err), e.Blockers)
		s.retry(OpEvict, attempt, s.p.DrainBackoffMax)
	case attempt >= s.p.DrainAttempts:
		s.set(StatusFailedDrain, fmt.Sprintf("eviction failed after %d attempts: %v", attempt, e.Err), e.Blockers)
		s.outcome(StatusFailedDrain, false)
	default:
		wait := Backoff(attempt, s.p.DrainBackoff, s.p.DrainBackoffMax)
		s.set(StatusDrainRetrying, fmt.Sprintf("eviction attempt %d of %d failed: %v; retrying in %s",
			attempt, s.p.DrainAttempts, e.Err, wait), e.Blockers)
		s.retry(OpEvict, attempt+1, wait)
	}
}

func (s *stepper) progress(e EvProgress) {
	if s.d.Waiting != OpEvict || s.d.Request == nil || e.RequestID != s.d.Request.RequestID {
		return
	}
	msg := fmt.Sprintf("evicting pods: evicted %d/%d", e.Evicted, e.Total)
	if e.WaitingDeletion > 0 {
		msg += fmt.Sprintf(", %d terminating", e.WaitingDeletion)
	}
	s.note(msg, e.Blockers)
}

func (s *stepper) timer() {
	if dl := s.d.ReturnDeadline(s.p); !dl.IsZero() && !s.now.Before(dl) {
		s.returnTimedOut()
	}
	op := s.d.RetryOp
	if op == OpNone || s.now.Before(s.d.RetryAt) {
		return
	}
	s.start(op, s.d.NextAttempt)
	if op == OpCordon || op == OpEvict {
		s.note(fmt.Sprintf("%s attempt %d", op, s.d.Status.Attempt), s.d.Status.Blockers)
	}
}

func (s *stepper) apiUnreachable(e EvAPIUnreachable) {
	if s.d.Request == nil || !s.d.Draining() {
		return
	}
	if s.d.Status.Decommission {
		// The exception is for an operation that may cure the node; a decommission deletes the
		// Node object, which needs the API.
		s.note(fmt.Sprintf("Kubernetes API unreachable for %s; a decommission waits for it (it deletes the Node object)",
			e.For.Round(time.Second)), s.d.Status.Blockers)
		return
	}
	if !s.d.Cordoned() {
		// The exception is for a drain under way: one the API saw cordoned before it went away.
		// A drain admitted just before (its cordon unanswered) has not begun to empty the node.
		s.note(fmt.Sprintf("Kubernetes API unreachable for %s; not proceeding: the node's cordon was never "+
			"confirmed, so its drain had not begun", e.For.Round(time.Second)), s.d.Status.Blockers)
		return
	}
	if s.d.NodeMissing {
		// The cordon the API confirmed was on a Node object since deleted; the name may have
		// registered again, schedulable, and taken pods before the outage.
		s.note(fmt.Sprintf("Kubernetes API unreachable for %s; not proceeding: the node's Node object was missing at the "+
			"last check (deleted; registering again?), so its cordon is not known", e.For.Round(time.Second)), s.d.Status.Blockers)
		return
	}
	if e.Uncordoned {
		// (The Node may have been deleted and registered again, schedulable,
		// while the drain waited for its volumes; no check read it before the outage.)
		s.note(fmt.Sprintf("Kubernetes API unreachable for %s; not proceeding: the node informer's last view shows the node "+
			"uncordoned, missing or replaced since the drain cordoned it", e.For.Round(time.Second)), s.d.Status.Blockers)
		return
	}
	if e.ViewBehind {
		s.note(fmt.Sprintf("Kubernetes API unreachable for %s; not proceeding: it went away soon after an earlier outage, "+
			"before the volume gate's caches could catch up, so their last view may be older than this outage",
			e.For.Round(time.Second)), s.d.Status.Blockers)
		return
	}
	if e.Safe {
		s.actions = append(s.actions, Cancel{})
		s.d.Waiting, s.d.RetryOp, s.d.Status.APIUnreachable = OpNone, OpNone, true
		s.set(StatusComplete, fmt.Sprintf("Kubernetes API unreachable for %s: letting the operation proceed, since the "+
			"volume gate's last view said this node's volumes were safe", e.For.Round(time.Second)), nil)
		s.outcome(StatusComplete, false)
		return
	}
	s.note(fmt.Sprintf("Kubernetes API unreachable for %s; not proceeding: the volume gate's last view says "+
		"%d volume(s) on this node are not safe elsewhere", e.For.Round(time.Second), len(e.Blockers)), e.Blockers)
}

func sameBlockers(a, b []Blocker) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
