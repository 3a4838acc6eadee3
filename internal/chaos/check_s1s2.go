package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// S1 (the agent's side and the coordinator's fencing) and S2 (what a COMPLETE may be stored on).

// releasedComplete reports whether st is a COMPLETE whose admission slot the coordinator
// released (a stale holder's, a node that never came back): it lets no command run. A
// decommission's COMPLETE carries SlotReleased by design, as its go-ahead. The simulation's
// releasedComplete (internal/sim) is the same rule.
func releasedComplete(st *nodedrain.NodeDrainStatus) bool {
	return st.Status == nodedrain.StatusComplete && st.SlotReleased && !st.Decommission
}

// runClearance finds, for command run r, the first status stored before it that clears its
// request (found), and the last one of those the key still held, not released, within
// ConfirmMaxAge before the command started (fresh: what the agent's confirmation read may
// have found).
func (h *history) runClearance(r Event) (found, fresh *Event) {
	sts := h.status[r.Node]
	for i := range sts {
		c := sts[i]
		if c.At.After(r.At) {
			break
		}
		if c.Status == nil || !c.Status.Status.Clears() || c.Status.RequestID != r.RequestID {
			continue
		}
		if found == nil {
			found = &sts[i]
		}
		if releasedComplete(c.Status) {
			continue
		}
		// The value held from c.At until the next write of the key.
		until := time.Time{}
		if i+1 < len(sts) {
			until = sts[i+1].At
		}
		if until.IsZero() || !until.Before(r.At.Add(-h.cfg.ConfirmMaxAge)) {
			fresh = &sts[i]
		}
	}
	return found, fresh
}

// checkS1: the agent's side of S1.
func (h *history) checkS1() []Violation {
	var out []Violation
	for _, r := range h.runs {
		switch found, fresh := h.runClearance(r); {
		case found == nil:
			out = append(out, h.around("S1", r.Node, r.At,
				"the %s command ran for request %s at %s with no COMPLETE or NOTSUPPORTED for that request stored before it",
				r.Op, r.RequestID, h.rel(r.At)))
		case fresh == nil:
			out = append(out, h.around("S1", r.Node, r.At,
				"the %s command ran for request %s at %s, but no COMPLETE for it that was not slot-released was under the key within %s before",
				r.Op, r.RequestID, h.rel(r.At), h.cfg.ConfirmMaxAge))
		}
	}
	return out
}

// checkRunCordoned: a command that S1 lets run finds its node cordoned (the drain's cordon is
// what keeps the pods off while the machine goes down). An operator's uncordon since the COMPLETE
// excuses it, and so does the Node deleted and registered again meanwhile: a new Node object
// starts uncordoned, and neither is edgedrain's doing.
func (h *history) checkRunCordoned() []Violation {
	var out []Violation
	for _, r := range h.runs {
		_, fresh := h.runClearance(r)
		if fresh == nil {
			continue // S1's own finding
		}
		n, ok := at(h.node[r.Node], r.At)
		if !ok || n.Deleted || h.cordonedAround(r.Node, r.At) || fresh.Status.APIUnreachable {
			continue
		}
		since := fresh.At.Add(-h.cfg.Slack)
		if h.operatorUncordoned(r.Node, since, r.At) || h.registeredAgain(r.Node, since, r.At) {
			continue
		}
		out = append(out, h.around(InvRunCordoned, r.Node, r.At,
			"the %s command ran for request %s at %s on a node not cordoned (last Node change seen at %s), no operator's uncordon since its COMPLETE at %s",
			r.Op, r.RequestID, h.rel(r.At), h.rel(n.At), h.rel(fresh.At)))
	}
	return out
}

// operatorUncordoned reports whether an operator's uncordon of node was injected in [from, to].
func (h *history) operatorUncordoned(node string, from, to time.Time) bool {
	return h.faultIn(node, from, to, func(f Event) bool {
		return (f.What == OpUncordon && f.Detail == "start") || (f.What == OpCordon && f.Detail == "end")
	})
}

// registeredAgain reports whether node's Node object was deleted and registered again (a
// node-delete fault ending) in [from, to].
func (h *history) registeredAgain(node string, from, to time.Time) bool {
	return h.faultIn(node, from, to, func(f Event) bool { return f.What == NodeDelete && f.Detail == "end" })
}

// faultIn reports whether a fault on target that is matches was recorded in [from, to].
func (h *history) faultIn(target string, from, to time.Time, is func(Event) bool) bool {
	for _, f := range h.faults {
		if f.Target == target && !f.At.Before(from) && !f.At.After(to) && is(f) {
			return true
		}
	}
	return false
}

// checkFenced: the coordinator's side of S1, as the bus alone shows it: a status write lands
// only while its writer's term record is the last one written (a coordinator that took over
// writes its own first, fencing the one before, paused or not).
func (h *history) checkFenced() []Violation {
	var out []Violation
	reported := map[int]bool{}
	for _, node := range h.nodes {
		for _, e := range h.status[node] {
			if e.Status == nil || e.Rev == 0 {
				continue
			}
			var last *Event
			for i := range h.terms {
				if h.terms[i].Rev < e.Rev {
					last = &h.terms[i]
				}
			}
			if last == nil || e.Status.Term == int(last.Rev) || reported[e.Status.Term] {
				continue
			}
			reported[e.Status.Term] = true // one story per fenced run
			writer := "an unknown coordinator run"
			for _, t := range h.terms {
				if int(t.Rev) == e.Status.Term {
					writer = fmt.Sprintf("%q's run of term %d (recorded at %s)", t.Holder, t.Rev, h.rel(t.At))
				}
			}
			out = append(out, h.around("S1", node, e.At,
				"%s stored at %s (rev %d) was written by %s, after %q wrote term record %d at %s",
				e.Status.Status, h.rel(e.At), e.Rev, writer, last.Holder, last.Rev, h.rel(last.At)))
		}
	}
	return out
}

// cordonedAround: the harness saw node cordoned at t, or within Slack after it. Its view lags
// the API by its informers' delay or its poller's period, longest on a loaded machine after
// an API restart: a drain with no pod to evict goes from its confirmed cordon to COMPLETE
// faster than that lag, so a cordon seen just after the decision was there at it.
func (h *history) cordonedAround(node string, t time.Time) bool {
	if n, ok := at(h.node[node], t); ok && n.Unschedulable {
		return true
	}
	for _, n := range h.node[node] {
		if n.At.After(t) && !n.At.After(t.Add(h.cfg.Slack)) && n.Unschedulable {
			return true
		}
	}
	return false
}

// checkS2: a COMPLETE is stored only with the node cordoned and no evictable pod left on it.
func (h *history) checkS2() []Violation {
	var out []Violation
	for _, node := range h.nodes {
		sts := h.status[node]
		for i, c := range sts {
			if c.Status == nil || c.Status.Status != nodedrain.StatusComplete || c.Status.APIUnreachable || c.Status.Decommission {
				continue
			}
			if i > 0 && sts[i-1].Status != nil && sts[i-1].Status.Status == nodedrain.StatusComplete && sts[i-1].Status.RequestID == c.Status.RequestID {
				continue // a re-publication decides nothing new
			}
			// Cordoned for Slack before the decision (the informer sees the cordon late, never
			// before the API did).
			if n, ok := at(h.node[node], c.At); ok && !n.Deleted && !h.cordonedAround(node, c.At) &&
				!h.operatorUncordoned(node, c.At.Add(-2*h.cfg.Slack), c.At) {
				out = append(out, h.around("S2", node, c.At,
					"COMPLETE for request %s stored at %s while the node was not cordoned", c.Status.RequestID, h.rel(c.At)))
			}
			if lost := h.lastCopies(node, c.At); len(lost) > 0 {
				out = append(out, h.around("S2", node, c.At,
					"COMPLETE for request %s stored at %s while the node held the only intact copy of %s (no healthy replica on another up, Ready node for %s before)",
					c.Status.RequestID, h.rel(c.At), strings.Join(lost, ", "), h.cfg.Slack))
			}
			if left := h.podsLeft(node, c.At); len(left) > 0 {
				out = append(out, h.around("S2", node, c.At,
					"COMPLETE for request %s stored at %s with evictable pods still on the node: %s",
					c.Status.RequestID, h.rel(c.At), strings.Join(left, ", ")))
			}
		}
	}
	return out
}

// podsLeft lists the evictable pods on node at t: bound before it by more than Slack, deleted
// (as the informer saw it) more than Slack after it.
func (h *history) podsLeft(node string, t time.Time) []string {
	var left []string
	for _, evs := range h.pods {
		if evs[0].Node != node || !evs[0].Evictable || evs[0].At.After(t.Add(-h.cfg.Slack)) {
			continue
		}
		last, ok := at(evs, t.Add(h.cfg.Slack))
		if ok && !last.Deleted && last.Node == node {
			left = append(left, evs[0].Pod)
		}
	}
	sort.Strings(left)
	return left
}

// lastCopies lists the volumes with an intact (healthy) replica on node at t and no healthy
// replica on another node that was up and Ready, neither at t nor Slack before.
func (h *history) lastCopies(node string, t time.Time) []string {
	var out []string
	for vol, keys := range h.volumes {
		intact := false
		for _, k := range keys {
			if e, ok := at(h.replicas[k], t); ok && e.Node == node && e.What == "healthy" {
				intact = true
			}
		}
		if !intact {
			continue
		}
		safe := false
		for _, k := range keys {
			for _, when := range []time.Time{t, t.Add(-h.cfg.Slack)} {
				e, ok := at(h.replicas[k], when)
				if ok && e.Node != node && e.What == "healthy" && h.upAndReady(e.Node, when) {
					safe = true
				}
			}
		}
		if !safe {
			out = append(out, vol)
		}
	}
	sort.Strings(out)
	return out
}

// upAndReady: node's machine is not down (a reboot) and its Node exists and is Ready at t.
func (h *history) upAndReady(node string, t time.Time) bool {
	if b, ok := at(h.reboots[node], t); ok && b.What == "down" {
		return false
	}
	n, ok := at(h.node[node], t)
	return ok && !n.Deleted && n.Ready
}
