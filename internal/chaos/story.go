package chaos

import (
	"fmt"
	"strings"
	"time"
)

// How a violation is told: the events around it, one line each, and the report of a run.

// rel is t as an offset from the run's start.
func (h *history) rel(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(h.start).Seconds())
}

// story tells what happened to node (every node when empty) between from and to, with the
// faults and leadership changes of the time, the violation's moment marked.
func (h *history) story(node string, from, to, mark time.Time) string {
	var b strings.Builder
	marked := false
	lines := 0
	for _, e := range h.all {
		if e.At.Before(from) || e.At.After(to) {
			continue
		}
		switch e.Kind {
		case KindFault, KindLease, KindPhase, KindTerm, KindReplica:
		default:
			if node != "" && e.Node != node {
				continue
			}
		}
		if (e.Kind == KindFault || e.Kind == KindAsk) && strings.HasPrefix(e.Detail, "skipped") {
			continue
		}
		if !marked && e.At.After(mark) {
			fmt.Fprintf(&b, "  %12s  ──── here ────\n", h.rel(mark))
			marked = true
		}
		fmt.Fprintf(&b, "  %12s  %s\n", h.rel(e.At), describe(e))
		lines++
	}
	if !marked {
		fmt.Fprintf(&b, "  %12s  ──── here ────\n", h.rel(mark))
	}
	if lines == 0 {
		b.WriteString("  (nothing recorded in that window)\n")
	}
	return b.String()
}

// describe is one line of a story.
func describe(e Event) string {
	switch e.Kind {
	case KindStatus:
		if e.Status == nil {
			return fmt.Sprintf("%-8s %s deleted (rev %d)", e.Kind, e.Node, e.Rev)
		}
		s := e.Status
		var flags []string
		if s.CordonedByUs {
			flags = append(flags, "cordonedByUs")
		}
		if !s.ReturningSince.IsZero() {
			flags = append(flags, "returning")
		}
		if s.SlotReleased {
			flags = append(flags, "slotReleased")
		}
		if s.APIUnreachable {
			flags = append(flags, "apiUnreachable")
		}
		if !e.Marked {
			flags = append(flags, "UNMARKED")
		}
		msg := s.Message
		if len(msg) > 70 {
			msg = msg[:70] + "…"
		}
		return fmt.Sprintf("%-8s %s %s req=%s attempt=%d term=%d seq=%d rev=%d %s %q", e.Kind, e.Node, s.Status, s.RequestID,
			s.Attempt, s.Term, s.Seq, e.Rev, strings.Join(flags, ","), msg)
	case KindRequest:
		if e.Deleted {
			return fmt.Sprintf("%-8s %s withdrawn (rev %d)", e.Kind, e.Node, e.Rev)
		}
		return fmt.Sprintf("%-8s %s req=%s (rev %d) %s", e.Kind, e.Node, e.RequestID, e.Rev, e.Detail)
	case KindNode:
		if e.Deleted {
			return fmt.Sprintf("%-8s %s deleted", e.Kind, e.Node)
		}
		return fmt.Sprintf("%-8s %s unschedulable=%v annotated=%v ready=%v", e.Kind, e.Node, e.Unschedulable, e.Annotated, e.Ready)
	case KindPod:
		state := "placed"
		switch {
		case e.Deleted:
			state = "deleted"
		case e.Terminating:
			state = "terminating"
		}
		return fmt.Sprintf("%-8s %s %s on %s (evictable=%v)", e.Kind, e.Pod, state, e.Node, e.Evictable)
	case KindLease:
		return fmt.Sprintf("%-8s held by %q", e.Kind, e.Holder)
	case KindTerm:
		return fmt.Sprintf("%-8s %q took term %d", e.Kind, e.Holder, e.Rev)
	case KindReplica:
		return fmt.Sprintf("%-8s %s %s on %s %s (%s)", e.Kind, e.Volume, e.Target, e.Node, e.What, e.Detail)
	case KindRun:
		return fmt.Sprintf("%-8s %s %s command ran for req=%s", e.Kind, e.Node, e.Op, e.RequestID)
	case KindFault:
		return fmt.Sprintf("%-8s %s %s %s", e.Kind, e.What, e.Target, e.Detail)
	case KindAsk:
		return fmt.Sprintf("%-8s %s %s %s", e.Kind, e.Node, e.Op, e.Detail)
	case KindReboot:
		return fmt.Sprintf("%-8s %s %s %s", e.Kind, e.Node, e.What, e.Detail)
	case KindAgent:
		return fmt.Sprintf("%-8s %s %s req=%s %s", e.Kind, e.Node, e.What, e.RequestID, e.Detail)
	case KindPhase:
		return fmt.Sprintf("%-8s %s %s", e.Kind, e.What, e.Detail)
	}
	return string(e.Kind)
}

// Report is the verdict as text: every violation as a story, with the seed to replay the
// schedule.
func Report(vs []Violation, seed uint64) string {
	var b strings.Builder
	if len(vs) > 0 && vs[0].Lost > 0 {
		fmt.Fprintf(&b, "\n(the recorder lost %d revisions of the bus: a violation near one may be the recorder's)", vs[0].Lost)
	}
	for i, v := range vs {
		fmt.Fprintf(&b, "\n=== violation %d of %d: %s (seed %d) ===\n%s\n%s", i+1, len(vs), v.Invariant, seed, v.String(), v.Story)
	}
	return b.String()
}
