package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// maint models DESIGN §9's maintenance policy: windows per requester that open and close,
// blockers (a pod matching the selector, a firing alert) that come and go on nodes, the
// coordinator's background check of them (verdicts up to verdictMaxAge old, as the real
// evaluator's), priorities and failure domains. What to hold goes through the real
// coordinator.DecideHolds and nodedrain admission.
type maint struct {
	s   *Sim
	rng *rand.Rand
	// open is each requester's window; nextToggle when it opens or closes next; toggled when
	// it last changed.
	open, toggled, nextToggle map[nodedrain.Requester]time.Time
	// blockedSince is when a blocker appeared on the node (absent: none).
	blockedSince map[string]time.Time
	priority     map[string]int
	domain       map[string]string
}

// verdictEvery is how often a coordinator checks the blockers of waiting drains; a drain is
// admitted on a verdict at most verdictMaxAge old.
const (
	verdictEvery  = 2 * time.Second
	verdictMaxAge = 5 * time.Second
)

func newMaint(s *Sim, seed uint64) *maint {
	m := &maint{s: s, rng: rand.New(rand.NewPCG(seed, 0x9011c7)), open: map[nodedrain.Requester]time.Time{},
		toggled: map[nodedrain.Requester]time.Time{}, nextToggle: map[nodedrain.Requester]time.Time{},
		blockedSince: map[string]time.Time{}, priority: map[string]int{}, domain: map[string]string{}}
	for i, name := range s.cluster.order {
		if s.cfg.Domains > 0 {
			m.domain[name] = fmt.Sprintf("zone-%d", i%s.cfg.Domains)
		}
		if s.cfg.Maintenance {
			m.priority[name] = 5 * m.rng.IntN(2)
		}
	}
	if !s.cfg.Maintenance {
		return m
	}
	for _, r := range []nodedrain.Requester{nodedrain.RequesterDeviceOp, nodedrain.RequesterUpdate} {
		m.open[r] = epoch
		m.toggle(r)
	}
	for _, name := range s.cluster.order {
		m.blockers(name)
	}
	return m
}

func (m *maint) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(m.rng.Int64N(int64(hi-lo)))
}

// toggle schedules the next opening or closing of r's window (none once faults stop: open).
func (m *maint) toggle(r nodedrain.Requester) {
	d := m.between(10*time.Second, 90*time.Second)
	m.nextToggle[r] = m.s.w.now.Add(d)
	m.s.w.after(d, "window", func() {
		if m.s.quiet {
			return
		}
		if _, isOpen := m.open[r]; isOpen {
			delete(m.open, r)
			m.s.w.logf("the %s maintenance window closes", r)
		} else {
			m.open[r] = m.s.w.now
			m.s.w.logf("the %s maintenance window opens", r)
		}
		m.toggled[r] = m.s.w.now
		m.toggle(r)
	})
}

// blockers makes a blocker appear on or go from node now and then.
func (m *maint) blockers(node string) {
	m.s.w.after(m.between(5*time.Second, 60*time.Second), "blocker", func() {
		if m.s.quiet {
			return
		}
		if _, ok := m.blockedSince[node]; ok {
			delete(m.blockedSince, node)
			m.s.w.logf("the blocker on %s is gone", node)
		} else if m.rng.IntN(2) == 0 {
			m.blockedSince[node] = m.s.w.now
			m.s.w.logf("a blocker appears on %s (an alert fires)", node)
		}
		m.blockers(node)
	})
}

// heal opens every window and clears every blocker (faults stop).
func (m *maint) heal() {
	for _, r := range []nodedrain.Requester{nodedrain.RequesterDeviceOp, nodedrain.RequesterUpdate} {
		if _, ok := m.open[r]; !ok && m.s.cfg.Maintenance {
			m.open[r], m.toggled[r] = m.s.w.now, m.s.w.now
		}
	}
	clear(m.blockedSince)
}

// blockersOn is what the policy's Blockers answers for node now.
func (m *maint) blockersOn(node string) []nodedrain.Blocker {
	if _, ok := m.blockedSince[node]; !ok {
		return nil
	}
	return []nodedrain.Blocker{{Kind: "Alert", Name: "SimAlert", Reason: "alert firing for " + node}}
}

// simWindow is a requester's window as the model has it.
type simWindow struct {
	m *maint
	r nodedrain.Requester
	// off is the error of the asking coordinator's clock: the window toggles in simulated time.
	off time.Duration
}

func (w simWindow) Open(time.Time) (bool, time.Time) {
	_, open := w.m.open[w.r]
	next := w.m.nextToggle[w.r]
	if !next.IsZero() {
		next = next.Add(w.off)
	}
	return open, next
}

func (w simWindow) String() string { return "sim" }

// holds is the coordinator's Maintenance.Admission: the real DecideHolds on the model's windows
// and the coordinator's verdicts.
func (c *coord) holds() coordinator.AdmissionVerdict {
	m := c.s.maint
	if !c.s.cfg.Maintenance {
		return coordinator.AdmissionVerdict{}
	}
	return coordinator.DecideHolds(coordinator.HoldInput{Waiting: c.core.Waiting(), Now: c.now(),
		Window:     func(r nodedrain.Requester) coordinator.Window { return simWindow{m: m, r: r, off: c.offset} },
		NeedsCheck: true, Verdicts: c.verdicts, MaxAge: verdictMaxAge, Preflight: c.s.cfg.Preflight})
}

// checkPolicy is the coordinator's background evaluator: every verdictEvery it checks the
// blockers of each waiting drain (the check itself takes a little time).
func (c *coord) checkPolicy(inc int) {
	s := c.s
	if !s.cfg.Maintenance || c.core == nil {
		return
	}
	for _, w := range c.core.Waiting() {
		node, rid := w.Node, w.Request.RequestID
		c.later(s.w.between(time.Millisecond, 300*time.Millisecond), "policy check", inc, func() {
			v := coordinator.Verdict{RequestID: rid, At: c.now(), Blockers: s.maint.blockersOn(node)}
			if s.cfg.Preflight != coordinator.PreflightOff {
				v.Predicted = s.predict(node) // the volume gate's Predict
			}
			c.verdicts[node] = v
			c.afterEvents()
		})
	}
	c.later(verdictEvery, "policy checks", inc, func() { c.checkPolicy(inc) })
}

// checkPolicyAtPublish checks a published status against the policy (P1–P3) and the return
// gate's and stale release's rules (R1, R2), as of the decision that made it (its UpdatedAt:
// a publication that failed goes out later unchanged).
func (s *Sim) checkPolicyAtPublish(prev, st nodedrain.NodeDrainStatus) {
	at := st.UpdatedAt
	for _, k := range []string{"maintenance window", "of the maintenance policy", "same failure domain", "to clear before COMPLETE"} {
		if strings.Contains(st.Message, k) && st.Message != prev.Message {
			s.policyCount[k]++
		}
	}
	if st.Status == nodedrain.StatusStarting && prev.Status != nodedrain.StatusStarting && s.cfg.Maintenance {
		at = st.StartedAt // the admission
		req, _ := s.bus.value(bucketRequests, st.Node).(nodedrain.NodeDrainRequest)
		if req.RequestID == st.RequestID && s.hist.on("closed/"+req.RequestedBy.String(), at, freshness) {
			s.violate("P1", "%s admitted at t=%.3fs while the %s maintenance window was closed", st.Node, at.Sub(epoch).Seconds(), req.RequestedBy)
			return
		}
		if s.hist.on("blocked/"+st.Node, at, verdictMaxAge+freshness) {
			s.violate("P2", "%s admitted at t=%.3fs while a blocker had long been on it", st.Node, at.Sub(epoch).Seconds())
			return
		}
		if s.cfg.Preflight == coordinator.PreflightHold && s.hist.on("unsafe/"+st.Node, at, verdictMaxAge+freshness) {
			s.violate("P4", "%s admitted at t=%.3fs with --preflight=hold while its volumes had long been predicted to block", st.Node, at.Sub(epoch).Seconds())
			return
		}
	}
	first := st.Status == nodedrain.StatusComplete && (!st.SlotReleased || (st.Decommission && prev.Status != nodedrain.StatusComplete))
	if first && st.Decommission {
		// A decommission's COMPLETE comes after its Node deletion (which was checked as a
		// COMPLETE is: S2).
		// (A Node registered again within an API round trip of the COMPLETE came after the
		// check that found it gone: a check-then-act residual.)
		if n := s.cluster.nodes[st.Node]; n.exists && s.w.now.Sub(n.changedAt) >= freshness {
			s.violate("D1", "COMPLETE of the decommission of %s while its Node object exists", st.Node)
		}
		s.decommissioned[st.Node] = st.RequestID
	}
	if first && s.hist.on("blocked/"+st.Node, at, freshness) && s.cluster.apiUp && !st.APIUnreachable {
		// (The API-unreachable rule's COMPLETE does not wait for the policy: checkAPIRule.)
		s.violate("P3", "COMPLETE for %s while a blocker was on it", st.Node)
		return
	}
	if !prev.ReturningSince.IsZero() && st.ReturningSince.IsZero() && st.Status == nodedrain.StatusNotRequested &&
		prev.RequestID == st.RequestID {
		timedOut := at.Sub(prev.ReturningSince) >= s.cfg.Policy.ReturnTimeout
		if !timedOut && s.hist.on("unhealthy/"+st.Node, at, freshness) {
			s.violate("R1", "the return gate of %s released its slot at t=%.3fs while the node was not healthy", st.Node, at.Sub(epoch).Seconds())
			return
		}
	}
	if st.Status == nodedrain.StatusComplete && !st.SlotReleased {
		if _, ok := s.completeAt[st.RequestID]; !ok {
			s.completeAt[st.RequestID] = at
		}
	}
	if (st.Status == nodedrain.StatusComplete || st.Status == nodedrain.StatusNotSupported) && !st.SlotReleased {
		if _, ok := s.clearedAt[st.RequestID]; !ok {
			s.clearedAt[st.RequestID] = at
		}
	}
	if st.SlotReleased && !prev.SlotReleased && !st.Decommission && s.cluster.apiUp && s.w.now.Sub(s.cluster.apiUpAt) > freshness {
		need := s.cfg.StaleHolderTimeout
		if n := s.cluster.nodes[st.Node]; !n.exists {
			need = min(need, coordinator.DeletedGrace)
		}
		declared := strings.HasPrefix(st.Message, coordinator.ReleasedUnderShutdown)
		down := span{from: s.downSince(st.Node, at), to: at}
		wentDown := !s.hist.on("ready/"+st.Node, at, freshness)
		if declared && !wentDown {
			// Gone down under the declaration and back already: a release decided on a view
			// that had not yet shown it back (informers deliver late) is late, not wrong — as if
			// released while it was down, and its agent withdraws now. Judged by its last time
			// down after its drain let it go (COMPLETE or NOTSUPPORTED), which must have ended
			// within the informers' lag of the decision; one down only before was never down for
			// this drain.
			lag := maxViewLag + freshness
			if at.Before(s.lateInformersUntil) { // (late as of the decision, which may be published later)
				lag = maxCatchUp
			}
			down, wentDown = s.downAfter(st.Node, s.clearedAt[st.RequestID], at)
			wentDown = wentDown && !down.to.Before(at.Add(-lag))
		}
		switch {
		case !wentDown:
			s.violate("R2", "%s released its admission slot as a node that never came back, but it was Ready", st.Node)
		case declared && !s.hist.any("declared-requests", down.from, down.to) && !(at.Equal(s.w.now) && s.wholeClusterDeclared()):
			// Gone down under the declaration: declared at some moment between the node's going
			// down and the decision, which may come later (a release that could not be published
			// goes out later: scenario no-release-in-cluster-shutdown-without-fresh-read; a
			// coordinator frozen meanwhile decides when it wakes: scenario
			// frozen-coordinator-no-release-after-declaration-ended, the declaration had ended by
			// then, the node had gone down under it). One decided now may follow a status
			// published in this same event that made the declaration (scenario
			// release-decided-in-declaring-event), which the history records only after the
			// event. The requests alone are judged: a coordinator frozen while the last declaring
			// request came takes it up only when it wakes, after requests that ended the
			// declaration meanwhile, yet it saw them in the bus's order.
			s.violate("R2", "%s released its admission slot as gone down under a whole-cluster shutdown none declared", st.Node)
		case declared:
			// Gone down under the declaration: released at once, and for good.
		case at.Sub(s.completeAt[st.RequestID]) < need-freshness:
			s.violate("R2", "%s released its admission slot %s after its COMPLETE (stale-holder timeout %s)", st.Node,
				at.Sub(s.completeAt[st.RequestID]), need)
		case !s.hist.on("notready/"+st.Node, at, need-freshness):
			s.violate("R2", "%s released its admission slot before it had been NotReady for %s", st.Node, need)
		}
	}
}

// backUnhealthy is R3's view of node: its request was withdrawn or replaced while the bus
// showed COMPLETE for it (not released as stale, no declared shutdown), less than
// ReturnTimeout ago, and the node has not been healthy since.
func (s *Sim) backUnhealthy(node string, st nodedrain.NodeDrainStatus, req nodedrain.NodeDrainRequest, live bool) bool {
	prev, had := s.lastReq[node]
	if live {
		s.lastReq[node] = req
	} else {
		delete(s.lastReq, node)
	}
	if had && (!live || req.RequestID != prev.RequestID) && st.Status == nodedrain.StatusComplete && !st.SlotReleased &&
		st.RequestID == prev.RequestID && !nodedrain.DeclaresClusterShutdown(prev) && s.cfg.Policy.ReturnTimeout > 0 &&
		!s.staleNow(node, prev.RequestID) {
		s.backAt[node] = s.w.now
	}
	at, ok := s.backAt[node]
	if ok && (s.w.now.Sub(at) >= s.cfg.Policy.ReturnTimeout || !s.hist.on("unhealthy/"+node, s.w.now, 0)) {
		delete(s.backAt, node)
		ok = false
	}
	// (Tolerance: the return check's answer is a moment old.)
	return ok && !s.quiet && s.hist.on("unhealthy/"+node, s.w.now, 2*freshness)
}

// staleNow reports whether node, COMPLETE for request rid, may have its slot released as a
// stale holder now (NotReady for the timeout since its COMPLETE): the coordinator may have done
// so without the bus showing it yet (its publication failed and a later status replaced it).
func (s *Sim) staleNow(node, rid string) bool {
	t := s.cfg.StaleHolderTimeout
	at, ok := s.completeAt[rid]
	return t > 0 && ok && s.w.now.Sub(at) >= t-freshness && s.hist.on("notready/"+node, s.w.now, t-freshness)
}

// trackHealth records, after every event, when each node is unhealthy for the return gate
// (missing, not Ready, a replica on it stopped or rebuilding), Ready, not Ready, and able to take
// another node's workloads (U1).
func (s *Sim) trackHealth() {
	cl := s.cluster
	var vols []volumes.Volume // (the facts, built once for every node's prediction)
	var states map[string]volumes.NodeState
	if s.cfg.Maintenance && s.cfg.Preflight == coordinator.PreflightHold {
		vols, states = cl.facts()
	}
	for _, name := range cl.order {
		n := cl.nodes[name]
		healthy := n.exists && n.ready
		for _, v := range cl.vols {
			for _, r := range v.replicas {
				if r.node == name && (r.rebuilding || (r.intact && !r.running)) {
					healthy = false
				}
			}
		}
		k := s.healthKeys(name)
		s.hist.set(k.unhealthy, !healthy, s.w.now)
		s.hist.set(k.ready, n.exists && n.ready, s.w.now)
		s.hist.set(k.notReady, !(n.exists && n.ready), s.w.now)
		// (U1: could take another node's workloads — schedulable, or cordoned by edgedrain alone
		// with no operator asking to keep it.)
		s.hist.set(k.target, n.exists && n.ready && (!n.unschedulable || (n.ours() && n.keep == "")), s.w.now)
		_, blocked := s.maint.blockedSince[name]
		s.hist.set(k.blocked, blocked, s.w.now)
		if states != nil {
			s.hist.set(k.unsafe, len(s.predictOn(vols, states, name)) > 0, s.w.now)
		}
		if !(n.exists && n.ready) {
			if _, ok := s.notReadySince[name]; !ok {
				s.notReadySince[name] = s.w.now
			}
		} else {
			delete(s.notReadySince, name)
		}
	}
	for _, r := range []nodedrain.Requester{nodedrain.RequesterDeviceOp, nodedrain.RequesterUpdate} {
		_, open := s.maint.open[r]
		s.hist.set("closed/"+r.String(), s.cfg.Maintenance && !open, s.w.now)
	}
	s.hist.set("declared-requests", s.declaredBy(false), s.w.now)
}

// healthKey names a node's conditions in the history (built once: trackHealth runs after
// every event).
type healthKey struct{ unhealthy, ready, notReady, blocked, unsafe, target string }

func (s *Sim) healthKeys(name string) healthKey {
	if k, ok := s.healthKey[name]; ok {
		return k
	}
	if s.healthKey == nil {
		s.healthKey = map[string]healthKey{}
	}
	k := healthKey{"unhealthy/" + name, "ready/" + name, "notready/" + name, "blocked/" + name, "unsafe/" + name, "target/" + name}
	s.healthKey[name] = k
	return k
}

// history records when conditions held: spans [from, to) per key, to zero while it holds.
type history map[string][]span

type span struct{ from, to time.Time }

func (h history) set(key string, on bool, now time.Time) {
	sp := h[key]
	holding := len(sp) > 0 && sp[len(sp)-1].to.IsZero()
	switch {
	case on && !holding:
		h[key] = append(sp, span{from: now})
	case !on && holding:
		sp[len(sp)-1].to = now
	}
}

// any reports whether the condition held at some moment in [from, to].
func (h history) any(key string, from, to time.Time) bool {
	for _, sp := range h[key] {
		if !sp.from.After(to) && (sp.to.IsZero() || sp.to.After(from)) {
			return true
		}
	}
	return false
}

// downSince is when node's current time not Ready began (its machine went down, or its Node
// went missing), or at if it is Ready.
func (s *Sim) downSince(node string, at time.Time) time.Time {
	if since, ok := s.notReadySince[node]; ok && since.Before(at) {
		return since
	}
	return at
}

// downAfter returns node's last time down (not Ready) that began in [from, at], ended by at.
func (s *Sim) downAfter(node string, from, at time.Time) (span, bool) {
	var last span
	found := false
	for _, sp := range s.hist["notready/"+node] {
		if !from.IsZero() && !sp.from.Before(from) && !sp.from.After(at) {
			last, found = sp, true
		}
	}
	if found && (last.to.IsZero() || last.to.After(at)) {
		last.to = at
	}
	return last, found
}

// on reports whether the condition held at t and had for at least tol before it.
func (h history) on(key string, t time.Time, tol time.Duration) bool {
	for _, sp := range h[key] {
		if !sp.from.After(t.Add(-tol)) && (sp.to.IsZero() || sp.to.After(t)) {
			return true
		}
	}
	return false
}

// returnBlockers is the return gate's check (the executor's returnCheck with the gate's
// ReturnCheck, whose rule it asks on the gate's view of the volumes): the node Ready, its
// replicas healthy again.
func (s *Sim) returnBlockers(node string) []nodedrain.Blocker {
	var out []nodedrain.Blocker
	n := s.cluster.nodes[node]
	if !n.exists || !n.ready {
		out = append(out, nodedrain.Blocker{Kind: "Node", Name: node, Reason: "not Ready yet"})
	}
	vols, _ := s.cluster.facts()
	return append(out, volumes.ReturnBlockers(vols, node)...)
}

// predict is the volume gate's Predict on the model: the real rules before eviction, what
// blocks and is predicted (volumes.Predicts).
func (s *Sim) predict(node string) []nodedrain.Blocker {
	vols, states := s.cluster.facts()
	return s.predictOn(vols, states, node)
}

// predictOn is predict on facts already read.
func (s *Sim) predictOn(vols []volumes.Volume, states map[string]volumes.NodeState, node string) []nodedrain.Blocker {
	if s.cfg.VolumePolicy == volumes.PolicyAllow {
		return nil
	}
	var out []nodedrain.Blocker
	for _, f := range volumes.Evaluate(vols, &volumes.View{Node: node, Policy: s.cfg.VolumePolicy, Nodes: states}, volumes.DefaultRules()) {
		if f.Decision.Verdict == volumes.Block && volumes.Predicts(f) {
			out = append(out, f.Blocker())
		}
	}
	return out
}
