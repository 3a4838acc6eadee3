package chaos

import (
	"sort"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// S3 (how many nodes are in maintenance at once) and S4 (edgedrain's cordon does not outlive its
// request; an operator's cordon is not edgedrain's to remove).

// holders lists the nodes in maintenance at t (S3's definition, see check.go).
func (h *history) holders(t time.Time) []string {
	var out []string
	for _, node := range h.nodes {
		var st *nodedrain.NodeDrainStatus
		if e, ok := at(h.status[node], t); ok {
			st = e.Status
		}
		req, live := "", false
		if e, ok := at(h.request[node], t); ok && !e.Deleted {
			req, live = e.RequestID, true
		}
		switch {
		case st != nil && st.HoldsSlot():
			out = append(out, node+" ("+st.Status.String()+")")
		case st != nil && st.Status.Clears() && !st.SlotReleased && live && req == st.RequestID:
			out = append(out, node+" ("+st.Status.String()+" for its live request)")
		case h.downOrBack(node, t):
			out = append(out, node+" (its operation ran, not back and Ready yet)")
		}
	}
	return out
}

// downOrBack reports whether node's reboot (or shutdown) command ran for a request whose slot was
// not released and the node has not been seen back and Ready since.
func (h *history) downOrBack(node string, t time.Time) bool {
	var run *Event
	for i := range h.runs {
		r := h.runs[i]
		// An update's node does not go down: it is in maintenance while the bus shows its
		// COMPLETE for the live request, then in the return gate.
		if r.Node == node && !r.At.After(t) && goesDown(r.Op) {
			run = &h.runs[i]
		}
	}
	if run == nil {
		return false
	}
	if e, ok := at(h.status[node], t); ok && e.Status != nil && e.Status.SlotReleased && e.Status.RequestID == run.RequestID {
		return false
	}
	for _, f := range h.faults {
		if f.What == OpWithdraw && f.Target == node && f.Detail == "start" && !f.At.Before(run.At.Add(-h.cfg.ConfirmMaxAge)) && !f.At.After(t) {
			return false // the operator withdrew it: a node down on a withdrawn request holds no slot
		}
	}
	var up time.Time
	for _, b := range h.reboots[node] {
		if b.What == "up" && b.At.After(run.At) && !b.At.After(t) {
			up = b.At
			break
		}
	}
	if up.IsZero() {
		return true
	}
	// Back and Ready: Ready when it came up (kwok may report it before the harness records
	// the machine up) or since.
	if n, ok := at(h.node[node], up); ok && n.Ready && !n.Deleted {
		return false
	}
	for _, n := range h.node[node] {
		if n.At.After(up) && !n.At.After(t) && n.Ready {
			return false
		}
	}
	return true
}

// MostInMaintenance is the largest number of nodes in maintenance at once in a history (S3's
// count), for the run's summary: a run that never reached the limit did not test it.
func MostInMaintenance(events []Event) int {
	h := index(events, Config{})
	most := 0
	for _, e := range h.all {
		if countsForS3(e.Kind) {
			most = max(most, len(h.holders(e.At)))
		}
	}
	return most
}

// countsForS3: events of these kinds may change who is in maintenance.
func countsForS3(k Kind) bool {
	switch k {
	case KindStatus, KindRequest, KindRun, KindReboot, KindNode:
		return true
	}
	return false
}

// checkS3 sweeps the history's change points and reports every stretch longer than Slack with
// more than MaxConcurrent nodes in maintenance. A stretch is measured when it ends as well as
// while it lasts: one bounded by two events (the second bringing the count back under the
// limit) has no event inside it to measure it at.
func (h *history) checkS3() []Violation {
	var out []Violation
	var overSince time.Time
	var overHolders []string
	reported := false
	report := func(until time.Time, ongoing bool) {
		if reported || overSince.IsZero() || until.Sub(overSince) < h.cfg.Slack {
			return
		}
		reported = true
		node := strings.Fields(overHolders[len(overHolders)-1])[0]
		how := "until"
		if ongoing {
			how = "still at"
		}
		out = append(out, h.violation("S3", node, overSince, overSince.Add(-time.Minute), until.Add(5*time.Second),
			"%d nodes in maintenance at once from %s (%s %s), max-concurrent-drains %d: %s",
			len(overHolders), h.rel(overSince), how, h.rel(until), h.cfg.MaxConcurrent, strings.Join(overHolders, ", ")))
	}
	for _, e := range h.all {
		if !countsForS3(e.Kind) {
			continue
		}
		hs := h.holders(e.At)
		if len(hs) <= h.cfg.MaxConcurrent {
			report(e.At, false) // the stretch ends here: it lasted until now
			overSince, overHolders, reported = time.Time{}, nil, false
			continue
		}
		if overSince.IsZero() {
			overSince = e.At
		}
		if len(hs) > len(overHolders) {
			overHolders = hs
		}
		report(e.At, true)
	}
	report(h.last(), true)
	return out
}

// last is the quiet period's end, or the last event of a run that did not get there.
func (h *history) last() time.Time {
	if h.end.IsZero() && len(h.all) > 0 {
		return h.all[len(h.all)-1].At
	}
	return h.end
}

// S4Bound is S4's bound: how long a node may carry edgedrain's cordon with no live request while
// a leader reaches the API and the bus. It must equal the simulation's strandedFor
// (internal/sim); no product constant says it.
const S4Bound = 90 * time.Second

// busServers is how many NATS servers the harness's cluster has: one of them out (killed,
// paused, or one client's link to it cut or stalled) leaves the quorum and a route to it.
const busServers = 3

// s4Grace is how long after a fault that suspends S4 ends the bound starts counting again: the
// uncordon the fault made fail is retried after the coordinator's UncordonRetry, and takes an
// API round trip (Slack). What else follows a fault (a Lease taken over by the other
// coordinator, at most its LeaseDuration of 10 s) is counted: the bound has room for it.
func (h *history) s4Grace() time.Duration {
	return h.cfg.Slack + nodedrain.DefaultLimits().UncordonRetry
}

// suspendsS4 reports whether fault kind what on target takes a leader's API or bus away, and
// under what key its start and end pair (faults of one key that overlap count once).
func suspendsS4(what, target string) (group, key string, ok bool) {
	switch what {
	case CoordKill, CoordPause, APICut, APIRestart:
		return "", what + "/" + target, true
	case NATSKill, NATSPause:
		return "bus", target, true
	case LinkStall, LinkCut:
		client, server, found := strings.Cut(target, "→")
		if !found || !strings.HasPrefix(client, "coordinator-") {
			return "", "", false // an agent's link: the coordinators still reach the bus
		}
		server, _, _ = strings.Cut(server, " ")
		return "link/" + client, server, true
	}
	return "", "", false
}

// disrupted reports whether a fault that suspends S4's bound is under way at t, or ended less
// than s4Grace before. A coordinator or the API out suspends it; one NATS server out (or one
// coordinator's link to one server) does not: the others keep the quorum and the client
// reconnects to them, so only more than one at once (the quorum, or a coordinator's every route
// but one, gone) does.
func (h *history) disrupted(t time.Time) bool {
	open := map[string]map[string]time.Time{} // group -> key -> since
	ended := map[string]map[string]time.Time{}
	add := func(m map[string]map[string]time.Time, group, key string, at time.Time) {
		if m[group] == nil {
			m[group] = map[string]time.Time{}
		}
		m[group][key] = at
	}
	for _, f := range h.faults {
		if f.At.After(t) {
			break
		}
		group, key, ok := suspendsS4(f.What, f.Target)
		if !ok {
			continue
		}
		switch f.Detail {
		case "start":
			add(open, group, key, f.At)
		case "end":
			delete(open[group], key)
			add(ended, group, key, f.At)
		}
	}
	for group, keys := range open {
		if group == "" && len(keys) > 0 {
			return true
		}
		// A group of servers out at once: those still open, and those that ended within the
		// grace (the client has not yet come back to them).
		out := len(keys)
		for key, at := range ended[group] {
			if _, still := keys[key]; !still && t.Sub(at) < h.s4Grace() {
				out++
			}
		}
		if out > busServers/2 {
			return true
		}
	}
	for _, at := range ended[""] {
		if t.Sub(at) < h.s4Grace() {
			return true
		}
	}
	return false
}

// checkS4 measures, for each node, how long it stays cordoned by edgedrain with nothing to hold
// the cordon, counting only undisturbed time.
func (h *history) checkS4() []Violation {
	var out []Violation
	var points []time.Time
	for _, f := range h.faults {
		points = append(points, f.At, f.At.Add(h.s4Grace()))
	}
	end := h.last()
	for _, node := range h.nodes {
		ps := append([]time.Time(nil), points...)
		for _, list := range [][]Event{h.node[node], h.request[node], h.status[node]} {
			for _, e := range list {
				ps = append(ps, e.At)
			}
		}
		ps = append(ps, end)
		sort.Slice(ps, func(i, j int) bool { return ps[i].Before(ps[j]) })
		var held time.Duration
		var since time.Time
		for i := 0; i+1 < len(ps); i++ {
			t, next := ps[i], ps[i+1]
			if t.After(end) {
				break
			}
			if !h.strandedCordon(node, t) {
				held, since = 0, time.Time{}
				continue
			}
			if since.IsZero() {
				since = t
			}
			if !h.disrupted(t) {
				held += next.Sub(t)
			}
			if held > S4Bound {
				out = append(out, h.violation("S4", node, next, since.Add(-30*time.Second), next,
					"edgedrain's cordon stayed from %s to %s with no live request and out of the return gate: %s undisturbed, over %s",
					h.rel(since), h.rel(next), held.Round(time.Second), S4Bound))
				held = -24 * time.Hour // once per stretch
			}
		}
	}
	return out
}

// strandedCordon: at t the node carries edgedrain's cordon and record, no request is live and
// its status is not in the return gate.
func (h *history) strandedCordon(node string, t time.Time) bool {
	n, ok := at(h.node[node], t)
	if !ok || n.Deleted || !n.Unschedulable || !n.Annotated {
		return false
	}
	if r, ok := at(h.request[node], t); ok && !r.Deleted {
		return false
	}
	if s, ok := at(h.status[node], t); ok && s.Status != nil && s.Status.HoldsSlot() {
		return false
	}
	return true
}

// edgedrainCordoning reports whether edgedrain published, between from and to, that it was
// cordoning node (STARTING).
func (h *history) edgedrainCordoning(node string, from, to time.Time) bool {
	for _, e := range h.status[node] {
		if e.Status != nil && e.Status.Status == nodedrain.StatusStarting && !e.At.Before(from) && !e.At.After(to) {
			return true
		}
	}
	return false
}

// checkOperatorCordons is S4's second clause, the simulation's checkUncordon (internal/sim): a
// cordon edgedrain did not make is never removed. An operator's cordon (op-cordon) is the
// operator's when it lands on a schedulable node (on a node already cordoned, kubectl cordon
// changes nothing and the cordon stays whoever's it was); from the moment the harness sees it
// until the operator uncordons the node at the fault's end, a Node seen schedulable is a
// cordon removed by someone else — edgedrain, as no other actor runs — unless an operator
// uncordoned it meanwhile or the Node was deleted (its new object starts uncordoned).
func (h *history) checkOperatorCordons() []Violation {
	var out []Violation
	for i, f := range h.faults {
		if f.What != OpCordon || f.Detail != "start" {
			continue
		}
		node := f.Target
		end, until := h.last(), time.Time{}
		for _, g := range h.faults[i+1:] {
			if g.What != OpCordon || g.Target != node {
				continue
			}
			if g.Detail == "uncordon" && until.IsZero() {
				until = g.At // recorded before the operator's kubectl uncordon runs
			}
			if g.Detail == "end" || strings.HasPrefix(g.Detail, "failed") {
				end = g.At
				break
			}
		}
		if until.IsZero() {
			// A history without the record: the operator's uncordon lands just before the
			// harness records the end, within a round trip of it.
			until = end.Add(-h.cfg.Slack)
		}
		before, ok := at(h.node[node], f.At)
		if !ok || before.Deleted || before.Unschedulable {
			continue
		}
		var since time.Time
		for _, n := range h.node[node] {
			if !n.At.After(f.At) {
				continue
			}
			if !n.At.Before(until) || n.Deleted {
				break
			}
			if since.IsZero() {
				if !n.Unschedulable {
					continue
				}
				if n.Annotated != before.Annotated || h.edgedrainCordoning(node, f.At.Add(-h.cfg.Slack), n.At) {
					// edgedrain cordoned it at the same time (kubectl uncordon leaves edgedrain's
					// record, so its re-cordon may not change the annotation's presence): whose
					// cordon it is the history cannot tell, and a kubectl cordon that lands on it
					// changes nothing.
					break
				}
				since = n.At
				continue
			}
			if n.Unschedulable {
				continue
			}
			// An operator's uncordon (or another op-cordon's end) took it away: its record comes
			// before the change, the informer may show the change before the end's record.
			if h.operatorUncordoned(node, since.Add(-h.cfg.Slack), n.At.Add(h.cfg.Slack)) {
				break
			}
			if h.faultIn(node, since, n.At, func(g Event) bool { return g.What == NodeDelete }) {
				break // deleted and registered again between two looks of the harness
			}
			out = append(out, h.violation("S4", node, n.At, f.At.Add(-30*time.Second), n.At.Add(5*time.Second),
				"the operator's cordon (seen from %s, kept until %s) was removed at %s: a cordon edgedrain did not make",
				h.rel(since), h.rel(end), h.rel(n.At)))
			break
		}
	}
	return out
}
