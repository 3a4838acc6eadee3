package nodedrain

import (
	"fmt"
	"strings"
	"time"
)

// The return gate (DESIGN §9): a node back from the operation its COMPLETE allowed keeps its
// admission slot until it is healthy again, at most Policy.ReturnTimeout.

// returnGate handles the return gate's answer: the node back from its operation keeps its
// admission slot until it is Ready, its replicas are rebuilt and its pods are Ready.
func (s *stepper) returnGate(e EvResult) {
	switch {
	case e.Err != nil:
		s.note(fmt.Sprintf("back from its operation; cannot check it is healthy again: %v; asking again in %s", e.Err, s.p.GateRecheck),
			s.d.Status.Blockers)
		s.retry(OpReturnGate, 0, s.p.GateRecheck)
	case !e.Safe:
		s.note(fmt.Sprintf("back from its operation; holding its admission slot until it is healthy again: waiting for %s",
			DescribeBlockers(e.Blockers)), e.Blockers)
		s.recheck(OpReturnGate, e.Blockers)
	default:
		s.ended(ReturnHealthy)
		if s.d.Request != nil {
			s.set(StatusRequested, "healthy again after its last operation; waiting for admission", nil)
			return
		}
		s.set(StatusNotRequested, "idle; back from its operation and healthy again", nil)
	}
}

// returnTimedOut releases the slot of a node whose return gate waited ReturnTimeout.
func (s *stepper) returnTimedOut() {
	if s.d.Waiting == OpReturnGate {
		s.actions = append(s.actions, Cancel{})
		s.d.Waiting = OpNone
	}
	if s.d.RetryOp == OpReturnGate {
		s.d.RetryOp = OpNone
	}
	waitingFor := s.d.Status.Blockers
	s.ended(ReturnTimedOut)
	msg := fmt.Sprintf("the return gate timed out after %s: admission slot released", s.p.ReturnTimeout)
	if len(waitingFor) > 0 {
		msg += " while still waiting for " + DescribeBlockers(waitingFor)
	} else {
		// (Its first check had not answered: an API unreachable, say.)
		msg += " before the node could be checked"
	}
	switch {
	case s.d.uncordoning():
		msg += "; uncordoning the node"
	case s.d.Request != nil:
		msg += "; waiting for admission"
	default:
		msg = "idle; " + msg
	}
	s.set(s.d.Status.Status, msg, waitingFor)
}

// ended closes the return gate (ReturnEnded for the metric and the Event).
func (s *stepper) ended(result string) {
	if !s.d.Returning() {
		return
	}
	s.actions = append(s.actions, ReturnEnded{Result: result, Waited: s.now.Sub(s.d.Status.ReturningSince),
		Blockers: s.d.Status.Blockers})
	s.d.Status.ReturningSince = time.Time{}
}

// blockedMessage says what a gate waits for: volumes to be safe on other nodes, or (the
// maintenance policy's blockers before COMPLETE) anything else.
func blockedMessage(bs []Blocker) string {
	for _, b := range bs {
		if b.Kind != BlockerVolume {
			return fmt.Sprintf("waiting for %d blocker(s) to clear before COMPLETE", len(bs))
		}
	}
	return fmt.Sprintf("waiting for %d volume(s) to be safe on other nodes", len(bs))
}

// DescribeBlockers names blockers briefly for a message: "volume db, pod shop/web-1 and 2 more".
func DescribeBlockers(bs []Blocker) string {
	var parts []string
	for i, b := range bs {
		if i == 3 {
			return strings.Join(parts, ", ") + fmt.Sprintf(" and %d more", len(bs)-3)
		}
		name := b.Name
		if b.Namespace != "" {
			name = b.Namespace + "/" + name
		}
		parts = append(parts, strings.ToLower(string(b.Kind))+" "+name)
	}
	return strings.Join(parts, ", ")
}
