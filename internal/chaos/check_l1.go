package chaos

import (
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// S5 (an operation once per request, attempts within their limits) and L1 (the state at the
// end of the quiet period).

// goesDown reports whether an operation takes its machine down (the harness plays the machine
// going down after its command ran).
func goesDown(op string) bool {
	return op == string(agent.OpReboot) || op == string(agent.OpShutdown)
}

// does reports whether a command run of operation ran does what an ask of operation asked did,
// as the simulation's L1 counts it: the machine going down (a reboot or a shutdown) clears the
// reboot sentinel, which lives in a tmpfs; an update is done only by an update.
func does(ran, asked string) bool {
	if asked == string(agent.OpReboot) {
		return goesDown(ran)
	}
	return ran == asked
}

// checkAttempts: no published attempt number is past its limit (the simulation's rule: the
// drain limit for DRAINRETRYING and FAILEDDRAIN, the cordon limit for the rest).
func (h *history) checkAttempts() []Violation {
	var out []Violation
	for _, node := range h.nodes {
		for _, e := range h.status[node] {
			if e.Status == nil {
				continue
			}
			limit := h.cfg.CordonAttempts
			if e.Status.Status == nodedrain.StatusDrainRetrying || e.Status.Status == nodedrain.StatusFailedDrain {
				limit = h.cfg.DrainAttempts
			}
			if e.Status.Attempt > limit {
				out = append(out, h.around("S5", node, e.At,
					"%s published with attempt %d at %s, past the limit of %d", e.Status.Status, e.Status.Attempt, h.rel(e.At), limit))
				break
			}
		}
	}
	return out
}

// checkOnce: an operation runs at most once for a given request.
func (h *history) checkOnce() []Violation {
	var out []Violation
	first := map[string]Event{}
	for _, r := range h.runs {
		key := r.Node + "/" + r.RequestID
		if f, ok := first[key]; ok {
			out = append(out, h.violation("S5", r.Node, r.At, f.At.Add(-30*time.Second), r.At.Add(5*time.Second),
				"the %s command ran again for request %s at %s (first at %s)", r.Op, r.RequestID, h.rel(r.At), h.rel(f.At)))
			continue
		}
		first[key] = r
	}
	return out
}

// checkL1 judges the state at the quiet period's end.
func (h *history) checkL1() []Violation {
	if h.end.IsZero() {
		return []Violation{{Invariant: "L1", What: "the run never reached the end of its quiet period", Story: h.story("", h.start, time.Now(), h.start)}}
	}
	var out []Violation
	add := func(node, format string, args ...any) {
		out = append(out, h.violation("L1", node, h.end, h.end.Add(-3*time.Minute), h.end, format, args...))
	}
	for _, node := range h.nodes {
		if e, ok := at(h.request[node], h.end); ok && !e.Deleted {
			add(node, "request %s stored at %s still on the bus at the end of the quiet period", e.RequestID, h.rel(e.At))
		}
		if e, ok := at(h.status[node], h.end); ok && e.Status != nil &&
			(e.Status.Status != nodedrain.StatusNotRequested || !e.Status.ReturningSince.IsZero()) {
			add(node, "its status at the end is %s (stored at %s, returning since %v)", e.Status.Status, h.rel(e.At), !e.Status.ReturningSince.IsZero())
		}
		if e, ok := at(h.node[node], h.end); ok && !e.Deleted && (e.Annotated || e.Unschedulable) {
			add(node, "the node is left cordoned=%v with edgedrain's record=%v (since %s)", e.Unschedulable, e.Annotated, h.rel(e.At))
		}
		if a, ok := h.agents[node]; ok && a.What != "idle" {
			add(node, "its agent is not idle at the end: %s %s %s", a.What, a.RequestID, a.Detail)
		}
		for _, s := range h.sentinel[node] {
			if !h.askDone(s) {
				add(node, "the %s asked for at %s never ran", s.Op, h.rel(s.At))
			}
		}
	}
	return out
}

// askDone reports whether the operation ask s asked for ran after it (a run of that operation,
// see does), or an operator's withdrawal of a request of the node cancelled it.
func (h *history) askDone(s Event) bool {
	for _, r := range h.runs {
		if r.Node == s.Node && r.At.After(s.At) && does(r.Op, s.Op) {
			return true
		}
	}
	for _, f := range h.faults {
		if f.What == OpWithdraw && f.Target == s.Node && f.Detail == "start" && f.At.After(s.At) {
			return true
		}
	}
	return false
}
