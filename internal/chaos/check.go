package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The checker: the invariants of docs/design.md ("## Invariants") decided from a history alone.
// It implements a subset, each said where it is judged:
//
//   - S1 (agent side): every command run for a request r had, stored before it, COMPLETE or
//     NOTSUPPORTED for r under its node's key, a value the key still held (not slot-released) at
//     most ConfirmMaxAge before the command started; and the node was cordoned when it started
//     (unless an operator uncordoned it since that COMPLETE).
//   - S2 (in part): a COMPLETE (not a re-publication) is stored only while its node is cordoned,
//     no evictable pod is left on it, and every Longhorn volume with a healthy replica on it has a
//     healthy replica on another node up and Ready; a change made behind edgedrain's back within
//     Slack of the decision excuses it.
//   - S3: at most MaxConcurrent nodes in maintenance for longer than Slack at once, a node in
//     maintenance when its status holds a slot (STARTING, CORDONED, DRAINRETRYING, the return
//     gate), when the bus shows COMPLETE or NOTSUPPORTED for its live request (not released), or
//     from the moment its command ran until it is back and Ready.
//   - S4: a node carrying edgedrain's cordon and record, with no live request and out of its
//     return gate, is uncordoned within 90 s, counting only time while no coordinator, API or
//     NATS fault is under way or ended less than S4Grace before (the design's bound applies only
//     while a leader reaches the API and a healthy bus).
//   - S5 (in part): an operation runs once per request; no published attempt number is past its
//     limit.
//   - L1: at the end of the quiet period no request is left, every status is NOTREQUESTED out of
//     its return gate, no node carries edgedrain's cordon record or a cordon, every agent is
//     idle, and every operation asked for (a sentinel, `agent request`) ran, unless an operator
//     withdrew a request of the node since.
//
// The coordinator's side of S1 is judged by term records (checkFenced), not by the Lease.
// Not judged yet: S5's attempts per drain cycle, L1's volume-gate eviction requests, N1, N2, E1, O1,
// R1-R3.

// Config says what the checker holds the history to.
type Config struct {
	// Seed is the fault schedule's seed, printed with every violation.
	Seed uint64
	// MaxConcurrent is the coordinators' --max-concurrent-drains.
	MaxConcurrent int
	// ConfirmMaxAge is how old the agent's confirmation read may be when its command starts
	// (agent.ConfirmMaxAge).
	ConfirmMaxAge time.Duration
	// CordonAttempts and DrainAttempts are the coordinators' limits (zero: nodedrain's defaults).
	CordonAttempts, DrainAttempts int
	// Slack is how long a condition must have held to count against a decision: an API round
	// trip (design: 1 s), also the lag of the harness's own informers.
	Slack time.Duration
}

// Violation is one broken invariant with the story that shows it.
type Violation struct {
	Invariant string
	At        time.Time
	Node      string
	What      string
	Story     string
	Lost      int // revisions the recorder could not read (the history is incomplete)
}

func (v Violation) String() string { return fmt.Sprintf("%s on %s: %s", v.Invariant, v.Node, v.What) }

// history is a history indexed for the checks.
type history struct {
	cfg      Config
	all      []Event
	start    time.Time
	end      time.Time // the quiet period's end; zero if the run did not get there
	status   map[string][]Event
	request  map[string][]Event
	node     map[string][]Event
	pods     map[string][]Event // by pod
	runs     []Event
	faults   []Event
	terms    []Event
	replicas map[string][]Event  // by volume/replica
	volumes  map[string][]string // volume -> its replicas' keys
	reboots  map[string][]Event
	sentinel map[string][]Event
	agents   map[string]Event // the final reports
	nodes    []string
}

func index(events []Event, cfg Config) *history {
	h := &history{cfg: cfg, all: events, status: map[string][]Event{}, request: map[string][]Event{}, node: map[string][]Event{},
		pods: map[string][]Event{}, replicas: map[string][]Event{}, volumes: map[string][]string{}, reboots: map[string][]Event{}, sentinel: map[string][]Event{}, agents: map[string]Event{}}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Node != "" && !seen[e.Node] && e.Kind != KindFault && e.Kind != KindReplica {
			seen[e.Node] = true
			h.nodes = append(h.nodes, e.Node)
		}
		switch e.Kind {
		case KindStatus:
			h.status[e.Node] = append(h.status[e.Node], e)
		case KindRequest:
			h.request[e.Node] = append(h.request[e.Node], e)
		case KindNode:
			h.node[e.Node] = append(h.node[e.Node], e)
		case KindPod:
			key := e.UID
			if key == "" {
				key = e.Pod
			}
			h.pods[key] = append(h.pods[key], e)
		case KindTerm:
			h.terms = append(h.terms, e)
		case KindReplica:
			key := e.Volume + "/" + e.Target
			if len(h.replicas[key]) == 0 {
				h.volumes[e.Volume] = append(h.volumes[e.Volume], key)
			}
			h.replicas[key] = append(h.replicas[key], e)
		case KindRun:
			h.runs = append(h.runs, e)
		case KindFault:
			h.faults = append(h.faults, e)
		case KindReboot:
			h.reboots[e.Node] = append(h.reboots[e.Node], e)
		case KindAsk:
			if e.Detail == "" { // not a skipped one
				h.sentinel[e.Node] = append(h.sentinel[e.Node], e)
			}
		case KindAgent:
			h.agents[e.Node] = e
		case KindPhase:
			switch e.What {
			case "start":
				h.start = e.At
			case "end":
				h.end = e.At
			}
		}
	}
	sort.Strings(h.nodes)
	if h.start.IsZero() && len(events) > 0 {
		h.start = events[0].At
	}
	return h
}

// at returns the last event of list at or before t (list in time order).
func at(list []Event, t time.Time) (Event, bool) {
	i := sort.Search(len(list), func(i int) bool { return list[i].At.After(t) })
	if i == 0 {
		return Event{}, false
	}
	return list[i-1], true
}

func cleared(st *nodedrain.NodeDrainStatus) bool {
	return st != nil && (st.Status == nodedrain.StatusComplete || st.Status == nodedrain.StatusNotSupported)
}

// Check judges a history and returns every violation found, each with its story.
func Check(events []Event, cfg Config) []Violation {
	if cfg.ConfirmMaxAge == 0 {
		cfg.ConfirmMaxAge = 10 * time.Second
	}
	if cfg.Slack == 0 {
		cfg.Slack = time.Second
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = 1
	}
	if cfg.CordonAttempts == 0 {
		cfg.CordonAttempts = nodedrain.DefaultPolicy().CordonAttempts
	}
	if cfg.DrainAttempts == 0 {
		cfg.DrainAttempts = nodedrain.DefaultPolicy().DrainAttempts
	}
	h := index(events, cfg)
	var out []Violation
	out = append(out, h.checkS1()...)
	out = append(out, h.checkFenced()...)
	out = append(out, h.checkS2()...)
	out = append(out, h.checkS3()...)
	out = append(out, h.checkS4()...)
	out = append(out, h.checkOnce()...)
	out = append(out, h.checkAttempts()...)
	out = append(out, h.checkL1()...)
	lost := 0
	for _, e := range events {
		if e.Kind == KindPhase && e.What == "lost" {
			lost++
		}
	}
	for i := range out {
		out[i].Lost = lost
	}
	return out
}

// operatorUncordoned reports whether an operator's uncordon of node was injected in [from, to].
func (h *history) operatorUncordoned(node string, from, to time.Time) bool {
	for _, f := range h.faults {
		if f.Target == node && !f.At.Before(from) && !f.At.After(to) &&
			((f.What == "op-uncordon" && f.Detail == "start") || (f.What == "op-cordon" && f.Detail == "end")) {
			return true
		}
	}
	return false
}

func (h *history) violation(inv, node string, t time.Time, from, to time.Time, format string, args ...any) Violation {
	return Violation{Invariant: inv, At: t, Node: node, What: fmt.Sprintf(format, args...), Story: h.story(node, from, to, t)}
}

// checkS1: the agent's side of S1, and that the node was cordoned when the command started.
func (h *history) checkS1() []Violation {
	var out []Violation
	for _, r := range h.runs {
		sts := h.status[r.Node]
		var found, fresh *Event
		for i := range sts {
			c := sts[i]
			if c.At.After(r.At) {
				break
			}
			if !cleared(c.Status) || c.Status.RequestID != r.RequestID {
				continue
			}
			if found == nil {
				found = &sts[i]
			}
			if c.Status.SlotReleased {
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
		from := r.At.Add(-time.Minute)
		switch {
		case found == nil:
			out = append(out, h.violation("S1", r.Node, r.At, from, r.At.Add(5*time.Second),
				"the %s command ran for request %s at %s with no COMPLETE or NOTSUPPORTED for that request stored before it",
				r.Op, r.RequestID, h.rel(r.At)))
			continue
		case fresh == nil:
			out = append(out, h.violation("S1", r.Node, r.At, from, r.At.Add(5*time.Second),
				"the %s command ran for request %s at %s, but no COMPLETE for it that was not slot-released was under the key within %s before",
				r.Op, r.RequestID, h.rel(r.At), h.cfg.ConfirmMaxAge))
			continue
		}
		n, ok := at(h.node[r.Node], r.At)
		if ok && !n.Deleted && !h.cordonedAround(r.Node, r.At) && !fresh.Status.APIUnreachable && !h.operatorUncordoned(r.Node, fresh.At.Add(-h.cfg.Slack), r.At) {
			out = append(out, h.violation("S1", r.Node, r.At, from, r.At.Add(5*time.Second),
				"the %s command ran for request %s at %s on a node not cordoned (last Node change seen at %s), no operator's uncordon since its COMPLETE at %s",
				r.Op, r.RequestID, h.rel(r.At), h.rel(n.At), h.rel(fresh.At)))
		}
	}
	return out
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
			out = append(out, h.violation("S1", node, e.At, e.At.Add(-time.Minute), e.At.Add(5*time.Second),
				"%s stored at %s (rev %d) was written by %s, after %q wrote term record %d at %s",
				e.Status.Status, h.rel(e.At), e.Rev, writer, last.Holder, last.Rev, h.rel(last.At)))
		}
	}
	return out
}

// cordonedAround: the harness saw node cordoned at t, or within Slack after it. Its view lags
// the API by its informers' delay or its poller's period: a drain with no pod to evict went
// from its confirmed cordon to COMPLETE in 120 ms, and the harness saw the cordon 110 ms later
// (seed 21, on a loaded machine just after a kube-apiserver restart).
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
			from := c.At.Add(-time.Minute)
			// Cordoned for Slack before the decision (the informer sees the cordon late, never
			// before the API did).
			if n, ok := at(h.node[node], c.At); ok && !n.Deleted && !h.cordonedAround(node, c.At) &&
				!h.operatorUncordoned(node, c.At.Add(-2*h.cfg.Slack), c.At) {
				out = append(out, h.violation("S2", node, c.At, from, c.At.Add(5*time.Second),
					"COMPLETE for request %s stored at %s while the node was not cordoned", c.Status.RequestID, h.rel(c.At)))
			}
			var left []string
			for _, evs := range h.pods {
				if evs[0].Node != node || !evs[0].Evictable {
					continue
				}
				// Present: bound before the decision by more than Slack, deleted (as the informer
				// saw it) more than Slack after it.
				if evs[0].At.After(c.At.Add(-h.cfg.Slack)) {
					continue
				}
				last, ok := at(evs, c.At.Add(h.cfg.Slack))
				if ok && !last.Deleted && last.Node == node {
					left = append(left, evs[0].Pod)
				}
			}
			if lost := h.lastCopies(node, c.At); len(lost) > 0 {
				out = append(out, h.violation("S2", node, c.At, from, c.At.Add(5*time.Second),
					"COMPLETE for request %s stored at %s while the node held the only intact copy of %s (no healthy replica on another up, Ready node for %s before)",
					c.Status.RequestID, h.rel(c.At), strings.Join(lost, ", "), h.cfg.Slack))
			}
			if len(left) > 0 {
				sort.Strings(left)
				out = append(out, h.violation("S2", node, c.At, from, c.At.Add(5*time.Second),
					"COMPLETE for request %s stored at %s with evictable pods still on the node: %s",
					c.Status.RequestID, h.rel(c.At), strings.Join(left, ", ")))
			}
		}
	}
	return out
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

// holders lists the nodes in maintenance at t (S3's definition, see the file's comment).
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
		case cleared(st) && !st.SlotReleased && live && req == st.RequestID:
			out = append(out, node+" ("+st.Status.String()+" for its live request)")
		case h.downOrBack(node, t):
			out = append(out, node+" (its operation ran, not back and Ready yet)")
		}
	}
	return out
}

// downOrBack reports whether node's reboot (or shutdown) command ran for a request whose slot was not released and
// the node has not been seen back and Ready since.
func (h *history) downOrBack(node string, t time.Time) bool {
	var run *Event
	for i := range h.runs {
		r := h.runs[i]
		// An update's node does not go down: it is in maintenance while the bus shows its
		// COMPLETE for the live request, then in the return gate.
		if r.Node == node && !r.At.After(t) && (r.Op == "reboot" || r.Op == "shutdown") {
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
		switch e.Kind {
		case KindStatus, KindRequest, KindRun, KindReboot, KindNode:
			most = max(most, len(h.holders(e.At)))
		}
	}
	return most
}

// checkS3 sweeps the history's change points and reports every stretch longer than Slack with
// more than MaxConcurrent nodes in maintenance.
func (h *history) checkS3() []Violation {
	var out []Violation
	var overSince time.Time
	var overHolders []string
	reported := false
	for _, e := range h.all {
		switch e.Kind {
		case KindStatus, KindRequest, KindRun, KindReboot, KindNode:
		default:
			continue
		}
		hs := h.holders(e.At)
		if len(hs) <= h.cfg.MaxConcurrent {
			overSince, reported = time.Time{}, false
			continue
		}
		if overSince.IsZero() {
			overSince, overHolders = e.At, hs
		}
		if !reported && e.At.Sub(overSince) >= h.cfg.Slack {
			reported = true
			node := strings.Fields(overHolders[len(overHolders)-1])[0]
			out = append(out, h.violation("S3", node, overSince, overSince.Add(-time.Minute), e.At.Add(5*time.Second),
				"%d nodes in maintenance at once from %s (still at %s), max-concurrent-drains %d: %s",
				len(hs), h.rel(overSince), h.rel(e.At), h.cfg.MaxConcurrent, strings.Join(hs, ", ")))
		}
	}
	return out
}

// S4Bound is S4's 90 s; S4Grace how long after a coordinator, API or NATS fault ends the bound
// starts counting again (a Lease taken over, a bus consumer made again).
const (
	S4Bound = 90 * time.Second
	S4Grace = 30 * time.Second
)

// disrupted reports whether a fault that suspends S4's bound is under way at t, or ended less
// than S4Grace before.
func (h *history) disrupted(t time.Time) bool {
	open := map[string]time.Time{}
	for _, f := range h.faults {
		if f.At.After(t) {
			break
		}
		switch f.What {
		case CoordKill, CoordPause, APICut, APIRestart, NATSKill, NATSPause, "crash":
		case LinkStall, LinkCut:
			if !strings.HasPrefix(f.Target, "coordinator-") {
				continue // an agent's link: the coordinators still reach the bus
			}
		default:
			continue
		}
		key := f.What + "/" + f.Target
		switch f.Detail {
		case "start":
			open[key] = f.At
		case "end":
			delete(open, key)
			if t.Sub(f.At) < S4Grace {
				return true
			}
		default:
			if f.What == "crash" && t.Sub(f.At) < S4Grace {
				return true
			}
		}
	}
	return len(open) > 0
}

// checkS4 measures, for each node, how long it stays cordoned by edgedrain with nothing to hold
// the cordon, counting only undisturbed time.
func (h *history) checkS4() []Violation {
	var out []Violation
	var points []time.Time
	for _, f := range h.faults {
		points = append(points, f.At, f.At.Add(S4Grace))
	}
	for _, node := range h.nodes {
		ps := append([]time.Time(nil), points...)
		for _, list := range [][]Event{h.node[node], h.request[node], h.status[node]} {
			for _, e := range list {
				ps = append(ps, e.At)
			}
		}
		end := h.end
		if end.IsZero() && len(h.all) > 0 {
			end = h.all[len(h.all)-1].At
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
				out = append(out, h.violation("S5", node, e.At, e.At.Add(-time.Minute), e.At.Add(5*time.Second),
					"%s published with attempt %d at %s, past the limit of %d", e.Status.Status, e.Status.Attempt, h.rel(e.At), limit))
				break
			}
		}
	}
	return out
}

// checkOnce: the machine goes down at most once for a given request.
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
			ran := false
			for _, r := range h.runs {
				if r.Node == node && r.At.After(s.At) {
					ran = true
					break
				}
			}
			for _, f := range h.faults {
				if f.What == OpWithdraw && f.Target == node && f.Detail == "start" && f.At.After(s.At) {
					ran = true // an operator's withdrawal cancels it
				}
			}
			if !ran {
				add(node, "the %s asked for at %s never ran", s.Op, h.rel(s.At))
			}
		}
	}
	return out
}

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
