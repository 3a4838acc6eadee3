package nodedrain

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The coordinator's drain as a readable machine. A Drain's state is its published status, the
// operation in flight (Waiting), the retry due (RetryOp, RetryAt) and a dozen flags; Phase names
// what the drain is doing, derived from that state alone (it adds none and changes nothing):
// every Drain is in exactly one phase. The agent's machine has its Phase in its state; this is
// the coordinator's counterpart.
//
// The transitions between phases are recorded in testdata/transitions.golden, one row per
// (phase, event) → (phase, actions), from every state the machine reaches (TestTransitionTable
// explores them from a fresh drain and from every status it publishes, resumed after a restart),
// and every transition a step test makes must be one of its rows. A change to the machine shows
// as a change to that table in review. Regenerate it with
//
//	go test ./pkg/nodedrain -run TestTransitionTable -update-transitions
//
// The phases, in the order a drain goes through them (the operation in flight or due, and the
// status, decide):
//
//	phase                 status              under way                  meaning
//	idle                  NOTREQUESTED        nothing                    no request; nothing to undo, no return gate
//	queued                REQUESTED           nothing                    waits for admission (EvAdmit)
//	cordoning             STARTING            cordon                     admitted: the cordon is in flight
//	cordon-retry          STARTING            cordon at RetryAt          a cordon failed: the next attempt waits
//	gate-before           CORDONED            volume gate                cordoned: the volume gate before eviction is asked
//	gate-before-wait      CORDONED            volume gate at RetryAt     it answered blocked (or failed): asked again
//	evicting              CORDONED/RETRYING   eviction                   an eviction attempt is in flight
//	evict-retry           DRAINRETRYING       eviction at RetryAt        an attempt failed (or pods landed): the next waits
//	gate-after            CORDONED/RETRYING   final volume gate          evicted: the gate (and policy) before COMPLETE is asked
//	gate-after-wait       CORDONED/RETRYING   final gate at RetryAt      a check before COMPLETE blocked or failed, or COMPLETE was not published: all again
//	checking-cordon       CORDONED/RETRYING   cordon check               the node still cordoned (ours), no pods, same Node object?
//	deleting-node         CORDONED/RETRYING   Node deletion              decommission: the Node object is deleted before COMPLETE
//	complete              COMPLETE            nothing                    the operation may run; waits for the withdrawal
//	released              COMPLETE/NOTSUPP.   nothing                    cleared, the node never came back: its admission slot released
//	decommissioned        COMPLETE            (keys removal at RetryAt)  decommission done, Node deleted; keys go after the linger
//	not-supported         NOTSUPPORTED        nothing                    nowhere to move the workloads: the operation may run
//	failed                FAILEDCORDON/DRAIN  nothing                    the drain failed: waits for the withdrawal (its cordon stays)
//	uncordon-after-write  any                 cordon or Node deletion    withdrawn or replaced during that write: awaited, then undone
//	uncordoning           NOTREQUESTED/REQ.   uncordon                   withdrawn, replaced or giving way: the uncordon is in flight
//	uncordon-retry        NOTREQUESTED/REQ.   uncordon at RetryAt        the uncordon failed: retried until it works
//	returning             NOTREQUESTED/REQ.   return gate                back from its operation: holds its slot while checked healthy
//	return-wait           NOTREQUESTED/REQ.   return gate at RetryAt     not healthy yet (or the check failed): asked again, until ReturnTimeout
//	lingering             NOTREQUESTED        keys removal at RetryAt    a decommission withdrawn: its NOTREQUESTED stays for the linger
//	forgetting            any                 keys removal               a decommissioned node's keys are removed from the bus
//	forget-retry          any                 keys removal at RetryAt    their removal failed: retried (a withdrawal now is its echo)
//	unserved              NOTREQUESTED        nothing                    resumed naming a request still on the bus: neither served nor dropped until withdrawn
//	unknown               —                   —                          none of the above: never reached (a test checks)
type Phase string

// The phases of a drain (see the table above).
const (
	PhaseIdle               Phase = "idle"
	PhaseQueued             Phase = "queued"
	PhaseCordoning          Phase = "cordoning"
	PhaseCordonRetry        Phase = "cordon-retry"
	PhaseGateBefore         Phase = "gate-before"
	PhaseGateBeforeWait     Phase = "gate-before-wait"
	PhaseEvicting           Phase = "evicting"
	PhaseEvictRetry         Phase = "evict-retry"
	PhaseGateAfter          Phase = "gate-after"
	PhaseGateAfterWait      Phase = "gate-after-wait"
	PhaseCheckingCordon     Phase = "checking-cordon"
	PhaseDeletingNode       Phase = "deleting-node"
	PhaseComplete           Phase = "complete"
	PhaseReleased           Phase = "released"
	PhaseDecommissioned     Phase = "decommissioned"
	PhaseNotSupported       Phase = "not-supported"
	PhaseFailed             Phase = "failed"
	PhaseUncordonAfterWrite Phase = "uncordon-after-write"
	PhaseUncordoning        Phase = "uncordoning"
	PhaseUncordonRetry      Phase = "uncordon-retry"
	PhaseReturning          Phase = "returning"
	PhaseReturnWait         Phase = "return-wait"
	PhaseLingering          Phase = "lingering"
	PhaseForgetting         Phase = "forgetting"
	PhaseForgetRetry        Phase = "forget-retry"
	PhaseUnserved           Phase = "unserved"
	PhaseUnknown            Phase = "unknown"
)

// allPhases lists every phase but PhaseUnknown, in the order of the table above.
var allPhases = []Phase{
	PhaseIdle, PhaseQueued, PhaseCordoning, PhaseCordonRetry, PhaseGateBefore, PhaseGateBeforeWait, PhaseEvicting,
	PhaseEvictRetry, PhaseGateAfter, PhaseGateAfterWait, PhaseCheckingCordon, PhaseDeletingNode, PhaseComplete,
	PhaseReleased, PhaseDecommissioned, PhaseNotSupported, PhaseFailed, PhaseUncordonAfterWrite, PhaseUncordoning,
	PhaseUncordonRetry, PhaseReturning, PhaseReturnWait, PhaseLingering, PhaseForgetting, PhaseForgetRetry,
	PhaseUnserved,
}

func (p Phase) String() string { return string(p) }

// Phase returns the phase the drain is in (see the table at Phase). The undoing of a cordon,
// the return gate and the removal of a decommissioned node's keys come first: they go on
// whatever the status says (a new request waits in REQUESTED meanwhile); so does a NOTREQUESTED
// resumed over the request it names (unserved). Then the status and the operation in flight or
// due decide; a combination the machine never makes is PhaseUnknown.
func (d Drain) Phase() Phase {
	st := d.Status.Status
	none := d.Waiting == OpNone && d.RetryOp == OpNone
	switch {
	case d.Waiting == OpForget:
		return PhaseForgetting
	case d.Forgetting():
		return PhaseForgetRetry
	case d.RetryOp == OpForget && d.Waiting == OpNone:
		if st == StatusComplete && d.Request != nil {
			return PhaseDecommissioned // (the linger runs from the COMPLETE)
		}
		if st == StatusNotRequested && d.Request == nil {
			return PhaseLingering
		}
		return PhaseUnknown
	case d.UncordonAfter:
		if d.Waiting == OpCordon || d.Waiting == OpDeleteNode {
			return PhaseUncordonAfterWrite
		}
		return PhaseUnknown
	case d.Waiting == OpUncordon:
		return PhaseUncordoning
	case d.RetryOp == OpUncordon:
		return PhaseUncordonRetry
	case d.Waiting == OpReturnGate || d.RetryOp == OpReturnGate:
		if !d.Returning() || (st != StatusNotRequested && st != StatusRequested) {
			return PhaseUnknown
		}
		if d.Waiting == OpReturnGate {
			return PhaseReturning
		}
		return PhaseReturnWait
	case st == StatusNotRequested && d.Request != nil && none:
		return PhaseUnserved
	case d.Returning():
		return PhaseUnknown // (the return gate always has its check in flight or due)
	}
	switch st {
	case StatusNotRequested:
		if d.Idle() {
			return PhaseIdle
		}
	case StatusRequested:
		if d.Request != nil && none {
			return PhaseQueued
		}
	case StatusStarting:
		switch {
		case d.Request == nil:
		case d.Waiting == OpCordon:
			return PhaseCordoning
		case d.RetryOp == OpCordon && d.Waiting == OpNone:
			return PhaseCordonRetry
		}
	case StatusCordoned, StatusDrainRetrying:
		if d.Request == nil {
			break
		}
		switch d.Waiting {
		case OpGate:
			return PhaseGateBefore
		case OpEvict:
			return PhaseEvicting
		case OpFinalGate:
			return PhaseGateAfter
		case OpCheckCordon:
			return PhaseCheckingCordon
		case OpDeleteNode:
			return PhaseDeletingNode
		case OpNone:
			switch d.RetryOp {
			case OpGate:
				return PhaseGateBeforeWait
			case OpEvict:
				return PhaseEvictRetry
			case OpFinalGate:
				return PhaseGateAfterWait
			}
		}
	case StatusComplete, StatusNotSupported:
		switch {
		case d.Request == nil || !none:
		case d.Decommissioned():
			return PhaseDecommissioned
		case d.Status.SlotReleased:
			return PhaseReleased
		case st == StatusComplete:
			return PhaseComplete
		default:
			return PhaseNotSupported
		}
	case StatusFailedCordon, StatusFailedDrain:
		if d.Request != nil && none {
			return PhaseFailed
		}
	}
	return PhaseUnknown
}

// opLabels name the operations in EventName and ActionName: short, without spaces.
// opLabel is o's name without spaces (Op.String), as a table's names have none.
func opLabel(o Op) string { return strings.ReplaceAll(o.String(), " ", "-") }

// EventName names ev for the transition table: its type, and in parentheses what about it
// decides the transition (which operation answered and how, which kind of request). Names are
// stable and have no spaces.
func EventName(ev Event) string {
	switch e := ev.(type) {
	case EvRequest:
		if e.Request == nil {
			return "EvRequest(withdrawn)"
		}
		return "EvRequest(new)" // (its kind, a decommission or a shutdown, matters only to the drain it starts)
	case EvResult:
		return "EvResult(" + opLabel(e.Op) + ":" + resultOutcome(e) + ")"
	case EvAPIUnreachable:
		switch {
		case e.Uncordoned:
			return "EvAPIUnreachable(uncordoned)"
		case e.ViewBehind:
			return "EvAPIUnreachable(view-behind)"
		case e.Safe:
			return "EvAPIUnreachable(safe)"
		}
		return "EvAPIUnreachable(unsafe)"
	case EvPublished:
		return "EvPublished(" + e.Status.String() + ")"
	}
	return typeName(ev)
}

// resultOutcome says how an operation answered, as far as the machine tells answers apart.
func resultOutcome(e EvResult) string {
	switch {
	case errors.Is(e.Err, ErrChecksStale):
		return "stale-checks"
	case e.Err != nil && e.Unreachable:
		return "unreachable"
	case e.Err != nil:
		return "error"
	}
	switch e.Op {
	case OpCordon:
		if !e.ByUs {
			return "ok-not-ours"
		}
	case OpGate, OpFinalGate, OpReturnGate:
		if !e.Safe {
			if !informerSeen(e.Blockers) {
				return "blocked-policy" // (rechecked at GateRecheck only)
			}
			return "blocked"
		}
		return "safe"
	case OpCheckCordon:
		switch {
		case e.Missing:
			return "missing"
		case !e.Cordoned:
			return "uncordoned"
		case e.Foreign && len(e.Pods) > 0:
			return "foreign+pods"
		case e.Foreign:
			return "foreign"
		case len(e.Pods) > 0:
			return "pods"
		}
	case OpDeleteNode:
		switch {
		case e.Missing:
			return "missing"
		case !e.Cordoned:
			return "not-deleted"
		}
	case OpUncordon:
		if e.Kept != "" {
			return "kept"
		}
	}
	return "ok"
}

// eventLabel is EventName with what the drain's state at now adds to it: a timer that finds a
// retry due or the return gate's deadline past, an answer older than MaxAnswerAge, a Node object
// other than the one the drain cordoned, a Node missing for NodeGoneAfter, a request or a
// withdrawal delivered again.
func eventLabel(d Drain, ev Event, now time.Time, p Limits) string {
	name := EventName(ev)
	var quals []string
	switch e := ev.(type) {
	case EvTimer:
		if dl := d.ReturnDeadline(p); !dl.IsZero() && !now.Before(dl) {
			quals = append(quals, "deadline")
		}
		if d.RetryOp != OpNone && !now.Before(d.RetryAt) {
			quals = append(quals, "due")
		}
		if len(quals) == 0 {
			quals = append(quals, "early")
		}
		return name + "(" + strings.Join(quals, "+") + ")"
	case EvRequest:
		switch {
		case e.Request != nil && d.Request != nil && e.Request.RequestID == d.Request.RequestID:
			return "EvRequest(same)"
		case e.Request == nil && d.Request == nil:
			quals = append(quals, "again")
		}
	case EvResult:
		if !e.At.IsZero() && now.Sub(e.At) > MaxAnswerAge {
			quals = append(quals, "old")
		}
		if (e.Op == OpCheckCordon || e.Op == OpDeleteNode) && e.Err == nil && e.UID != "" && d.NodeUID != "" && e.UID != d.NodeUID {
			quals = append(quals, "replaced")
		}
		if e.Op == OpDeleteNode && e.Err == nil && e.Missing && !d.MissingSince.IsZero() && now.Sub(d.MissingSince) >= NodeGoneAfter {
			quals = append(quals, "gone")
		}
		if e.Op != d.Waiting {
			quals = append(quals, "not-awaited")
		}
	}
	if len(quals) == 0 {
		return name
	}
	return strings.TrimSuffix(name, ")") + "+" + strings.Join(quals, "+") + ")"
}

// ActionName names a for the transition table: its type, and in parentheses the status
// published, the operation started, the outcome reported or how a return gate ended.
func ActionName(a Action) string {
	switch a := a.(type) {
	case Publish:
		return "Publish(" + a.Status.Status.String() + ")"
	case Start:
		return "Start(" + opLabel(a.Op) + ")"
	case Outcome:
		if a.Withdrawn {
			return "Outcome(withdrawn)"
		}
		return "Outcome(" + a.Result.String() + ")"
	case ReturnEnded:
		return "ReturnEnded(" + a.Result + ")"
	}
	return typeName(a)
}

// actionLabel is ActionName with what the drain's state before the step adds to it: a
// publication of the status it already had, for the same request (a new message or blockers), is
// a note.
func actionLabel(before Drain, a Action) string {
	if p, ok := a.(Publish); ok && p.Status.Status == before.Status.Status && p.Status.RequestID == before.Status.RequestID {
		return "Publish(note)"
	}
	return ActionName(a)
}

// typeName is v's type name without its package.
func typeName(v any) string {
	t := fmt.Sprintf("%T", v)
	return t[strings.LastIndexByte(t, '.')+1:]
}
