package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// The invariants of DESIGN §8, as code. S1 and S2 are checked where the act happens (a command
// starts, a COMPLETE is written), F1 where an agent's guard takes a status (signed.go); S3–S5
// after every event; L1 at the end of the quiet period. They judge a node's status by what the
// coordinators last wrote under its key (Sim.statusOf), not by what a forger wrote over it.

// freshness is the tolerance of a check-then-act by a live process: a decision judged on what its
// checks saw up to an API or bus round trip earlier. (An agent's confirmation read may be older:
// S1 bounds it by agent.ConfirmMaxAge, as the agent does, for a paused agent handles it late.)
const freshness = time.Second

// strandedFor bounds how long a node may carry edgedrain's cordon with no live request while a
// coordinator leads and the API answers (the time to see the withdrawal and uncordon).
const strandedFor = 90 * time.Second

// checkS1: an agent runs its operation only after a COMPLETE (or NOTSUPPORTED) that the active
// coordinator published for the agent's current request, as its last confirmation read found
// it: that read (a status delivered by the watch confirms nothing) was served at most
// agent.ConfirmMaxAge before the command starts — the agent counts a read asked for within that
// time, and a paused agent handles its reply late — and found, under the node's key, a revision
// a coordinator wrote (a copy of it, or a forgery naming the request, is none) that clears the
// request and does not say its slot was released (a stale holder's: another node may be in
// maintenance in its place), unless it is a decommission's.
func (s *Sim) checkS1(a *agentProc, rid string) {
	ok := false
	for _, st := range s.published[rid] {
		if st.Clears() {
			ok = true
		}
	}
	if !ok {
		s.violate("S1", "the agent of %s runs its operation for request %s, for which no active coordinator published COMPLETE or NOTSUPPORTED (published: %v)",
			a.node.name, rid, s.published[rid])
		return
	}
	rd := a.f.lastRead
	if !rd.ok {
		s.violate("S1", "the agent of %s runs its operation for request %s with no confirmation read served to this process", a.node.name, rid)
		return
	}
	if age := s.w.now.Sub(rd.at); age > agent.ConfirmMaxAge {
		s.violate("S1", "the agent of %s runs its operation for request %s on a confirmation read served %.1fs earlier (now: %s)",
			a.node.name, rid, age.Seconds(), describe(s.bus.value(bucketStatus, a.node.name)))
		return
	}
	st, isStatus := rd.r.val.(nodedrain.NodeDrainStatus)
	switch {
	case !rd.found || !isStatus:
		s.violate("S1", "the agent of %s runs its operation for request %s, but its confirmation read found no status", a.node.name, rid)
	case rd.r.forged:
		s.violate("S1", "the agent of %s runs its operation for request %s on a confirmation read that found a value no coordinator wrote (revision %d, by %s): %s",
			a.node.name, rid, rd.r.seq, rd.r.by, describe(rd.r.val))
	case st.RequestID != rid || !st.Status.Clears():
		s.violate("S1", "the agent of %s runs its operation for request %s, but its confirmation read found %s", a.node.name, rid, describe(st))
	case releasedComplete(st):
		s.violate("S1", "the agent of %s runs its operation for request %s on a COMPLETE whose admission slot was released (%s)", a.node.name, rid, st.Message)
	case st.APIUnreachable && s.cluster.apiUp:
		// (docs/design.md, S2's exception: the outage must be everyone's, the node's too.)
		s.violate("S2", "the agent of %s runs its operation for request %s undrained, on a COMPLETE of the API-unreachable rule, "+
			"though its node reaches the API (the outage is its coordinator's alone)", a.node.name, rid)
	}
}

// releasedComplete reports whether st is a COMPLETE whose admission slot the coordinator
// released (a stale holder's, or a node gone down under a declared shutdown): it gives its node
// no slot. A decommission's COMPLETE carries SlotReleased by design, as its go-ahead.
func releasedComplete(st nodedrain.NodeDrainStatus) bool {
	return st.Status == nodedrain.StatusComplete && st.SlotReleased && !st.Decommission
}

// checkO1: an operator's override file (COMPLETE or NOTSUPPORTED) lets one operation run, the one
// it was acted on for: it is consumed, or it would let every later one run without a drain.
func (s *Sim) checkO1(a *agentProc, rid string) {
	id := a.f.clearedBy[rid]
	if id == 0 {
		return // (cleared by an override this model did not follow: none)
	}
	if a.f.overrideOps == nil {
		a.f.overrideOps = map[int]map[string]bool{}
	}
	ops := a.f.overrideOps[id]
	if ops == nil {
		ops = map[string]bool{}
		a.f.overrideOps[id] = ops
	}
	ops[rid] = true
	if len(ops) > 1 {
		s.violate("O1", "the agent of %s runs its operation for request %s on the override file that already let another run (%d operations on one override)",
			a.node.name, rid, len(ops))
	}
}

// checkS5Update: an update runs once per request (S5), as a reboot goes down once (goDown).
func (s *Sim) checkS5Update(a *agentProc, rid string) {
	if a.f.updates == nil {
		a.f.updates = map[string]int{}
	}
	a.f.updates[rid]++
	if a.f.updates[rid] > 1 {
		s.violate("S5", "the update of %s ran a second time for request %s", a.node.name, rid)
	}
}

func describe(v any) string {
	st, ok := v.(nodedrain.NodeDrainStatus)
	if !ok {
		return "nothing"
	}
	return fmt.Sprintf("%s for request %q", st.Status, st.RequestID)
}

// checkS2: COMPLETE only when the node's pods are gone, the node is cordoned and every volume
// with data on the node has a healthy running copy on another Ready node — or the API has been
// unreachable for the timeout and the gate's last view said the volumes were safe.
//
// decided is when the coordinator decided it: a write that left its checks behind (the process
// paused after them) lands later; what changed meanwhile is a known residual of any check
// before an act (docs/design.md), not a decision taken on it.
func (s *Sim) checkS2(c *coord, st nodedrain.NodeDrainStatus, decided time.Time) {
	cl := s.cluster
	n := cl.nodes[st.Node]
	if st.APIUnreachable {
		s.checkAPIRule(c, st)
		return
	}
	if s.checkSameNode(st); s.violation != nil { // N1 (operators.go)
		return
	}
	if n == nil || !n.exists {
		return
	}
	if cl.unsafeSince(st.Node, decided) {
		// The node changed after the last checks (the gate, the cordon), which precede COMPLETE
		// by an API round trip: no check-then-act can see that; S2 is judged on what the checks
		// saw. Only this node's own changes excuse its pods and cordon; a volume's check is
		// excused by a change on a node holding one of its copies (below).
		return
	}
	// (A pod that landed within freshness of the decision, a bind racing the last checks, is
	// one no check-then-act sees: judged as of what the checks saw.)
	var pods []*pod
	for _, p := range cl.podsOn(st.Node) {
		if decided.Sub(p.landedAt) >= freshness {
			pods = append(pods, p)
		}
	}
	if len(pods) > 0 {
		s.violate("S2", "COMPLETE for %s while %d evictable pod(s) are still on it (%s…, landed at t=%.3fs)", st.Node, len(pods), pods[0].name,
			pods[0].landedAt.Sub(epoch).Seconds())
		return
	}
	if !n.unschedulable {
		s.violate("S2", "COMPLETE for %s while it is not cordoned", st.Node)
		return
	}
	for _, v := range cl.vols {
		here, elsewhere, changed := false, false, false
		for _, r := range v.replicas {
			if r.node == st.Node && r.intact {
				here = true
			}
			changed = changed || cl.unsafeSince(r.node, decided)
			o := cl.nodes[r.node]
			if r.node != st.Node && r.intact && r.running && o.exists && o.up && o.ready {
				elsewhere = true
			}
		}
		// A copy the checks saw, which failed and was dropped since (Longhorn replaces a failed
		// replica): its node's change excuses the check as a listed copy's would.
		for node, at := range v.droppedFrom {
			changed = changed || (!at.Before(decided.Add(-freshness)) && cl.unsafeSince(node, decided))
		}
		// In a declared shutdown, copies on nodes down for it are stopped, not lost (the gate's
		// rule); a node whose own request declares it goes down under that rule.
		declared := s.wholeClusterDeclared()
		if r, ok := s.bus.value(bucketRequests, st.Node).(nodedrain.NodeDrainRequest); ok && nodedrain.DeclaresClusterShutdown(r) {
			declared = true
		}
		if here && !elsewhere && !declared && !changed {
			s.violate("S2", "COMPLETE for %s while it holds the last healthy copy of %s", st.Node, v.name)
			return
		}
	}
}

// wholeClusterDeclared reports whether a whole-cluster shutdown is declared by DESIGN's rule
// (nodedrain.AdmitWith): every live request declares it and is taken up by the coordinator, at
// least one does, and every node
// without one is down (not Ready, or no Node object): no agent runs there to ask (scenario
// cluster-shutdown-declared-by-admission-rule: a node taken down by an operator's override file
// made no request).
func (s *Sim) wholeClusterDeclared() bool { return s.declaredBy(true) }

// declaredBy is that rule; with takenUp false, a declaring request counts before the
// coordinator has published a status of it (what the requests alone declare).
func (s *Sim) declaredBy(takenUp bool) bool {
	declaring := 0
	for _, name := range s.cluster.order {
		r, ok := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
		n := s.cluster.nodes[name]
		st, _ := s.statusOf(name).(nodedrain.NodeDrainStatus)
		switch {
		case ok && st.RequestID == r.RequestID && st.Decommission && st.SlotReleased:
			// A decommissioned node's request, left until withdrawn: of no node of the cluster
			// (as admission; scenario decommission-leftover-does-not-hide-cluster-shutdown).
		case ok && nodedrain.DeclaresClusterShutdown(r):
			// and the coordinator has taken it up (REQUESTED or later, for this request,
			// NOTSUPPORTED included)
			st, _ := s.statusOf(name).(nodedrain.NodeDrainStatus)
			if takenUp && (st.RequestID != r.RequestID || !(st.Status.InProgress() || st.Status == nodedrain.StatusComplete || st.Status == nodedrain.StatusNotSupported)) {
				return false
			}
			declaring++
		case ok || (n.exists && n.ready):
			return false
		}
	}
	return declaring > 0
}

// check runs after every event: S3, S4 and coverage.
func (s *Sim) check() {
	if s.violation != nil {
		return
	}
	cl := s.cluster
	sinceCheck := s.w.now.Sub(s.lastCheck)
	s.lastCheck = s.w.now
	s.trackHealth()
	// S3: at most MaxConcurrent nodes between admission and release — by their published
	// status (a drain under way, a COMPLETE whose slot was not released as stale, a node back
	// from its operation in the return gate), or because they went down for an operation the
	// bus cleared.
	var holders []string
	for _, name := range cl.order {
		st, _ := s.statusOf(name).(nodedrain.NodeDrainStatus)
		req, live := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
		n := cl.nodes[name]
		a := s.agentOf(name)
		// Asked after every event, whatever the bus shows: a node healthy again while the bus
		// still shows its slot held has ended its return (scenario
		// healthy-node-with-slot-on-bus-has-ended-return: it went down again later, for another
		// reason, and was counted as still returning).
		back := s.backUnhealthy(name, st, req, live)
		switch {
		case !n.up && a.cmdByBus && a.cmdRequest != "" && a.f.ranReleased[a.cmdRequest] && !s.withdrawn[a.cmdRequest] &&
			!(a.cmdDeclared && st.RequestID == a.cmdRequest && strings.HasPrefix(st.Message, coordinator.ReleasedUnderShutdown)):
			// Gone down for a command started on a COMPLETE whose slot was released: the release
			// gave its slot away before, so it holds one again. Not one released under a declared
			// whole-cluster shutdown (its Node object missing counts as down: scenario
			// cluster-shutdown-complete-node-deleted-keeps-slot) that then went down for its
			// declaring request: a node that goes down under the declaration holds no slot (as
			// when its Node was deleted and registered again while its agent was paused before the
			// shutdown command).
			holders = append(holders, name+" (down on a released COMPLETE)")
		case st.HoldsSlot():
			holders = append(holders, name)
		case back:
			// R3: back from the operation a COMPLETE allowed, not healthy again, and within the
			// return gate's time: it holds its slot whether or not the coordinator saw the
			// withdrawal (a restart, a new request over the COMPLETE, a lost reply).
			holders = append(holders, name+" (back from its operation, not healthy yet)")
		case cleared(st) && st.SlotReleased && live && st.RequestID == req.RequestID:
			// released as a node that never came back (R2 checks it was so)
		case (a.cmdDeclared && !n.up) || (live && s.downDeclared[req.RequestID]) ||
			(live && nodedrain.DeclaresClusterShutdown(req) && s.wholeClusterDeclared() && !n.up):
			// A declared whole-cluster shutdown lets nodes go down without a slot: while every
			// request declares it, or for a request whose node went down under it. A node still
			// up counts as any other: the nodes up drain one slot at a time.
		case cleared(st) && live && st.RequestID == req.RequestID:
			// COMPLETE, or NOTSUPPORTED: the node goes down undrained, and in maintenance all the
			// same (a COMPLETE left from an earlier request, not yet replaced, holds nothing)
			holders = append(holders, name)
		case !n.up && a.cmdByBus && a.cmdRequest != "" && !s.withdrawn[a.cmdRequest] &&
			!(st.SlotReleased && st.RequestID == a.cmdRequest):
			holders = append(holders, name+" (down)")
		}
		s.states[simState{st.Status, a.m.State.Phase, live, n.unschedulable, n.up}] = true
	}
	if len(holders) > s.cfg.MaxConcurrent {
		s.violate("S3", "%d nodes in maintenance at once, max-concurrent-drains %d: %v", len(holders), s.cfg.MaxConcurrent, holders)
		return
	}
	// D1: never two nodes of one failure domain in maintenance at once.
	inDomain := map[string]string{}
	for _, h := range holders {
		name, _, _ := strings.Cut(h, " ")
		if d := s.maint.domain[name]; d != "" {
			if other, ok := inDomain[d]; ok {
				s.violate("D1", "%s and %s of failure domain %s in maintenance at once (holders %v)", other, name, d, holders)
				return
			}
			inDomain[d] = name
		}
	}
	// S4: a node carrying edgedrain's cordon has a live request or an uncordon under way: it
	// may not stay stranded while a coordinator can act.
	// (Edgedrain's cordon: its annotation on a cordon it made, node.ours; a leader that reaches
	// the API, as only it can uncordon.)
	leading, leadsWithAPI := false, false
	for _, c := range s.coords {
		// (One that reaches the API and NATS: a leader cut off from either cannot uncordon.)
		withAPI := s.leads(c) && c.running && c.core != nil && c.apiUp()
		leadsWithAPI = leadsWithAPI || withAPI
		leading = leading || (withAPI && c.conn.connected())
	}
	// The bus must be up, its JetStream API creating consumers too: after a quorum loss it
	// refuses them for a while (replicas.go), and the leader's request watch, whose consumer
	// was lost with its server, delivers nothing until it can be made again: no coordinator
	// learns of a withdrawal meanwhile (as N2 excuses a run whose watch cannot be made). Such a
	// bus window pauses the count rather than starting it over: a cordon stranded before it is
	// no less stranded after.
	busOut := !s.bus.up || s.bus.consumersRefused()
	for _, name := range cl.order {
		n := cl.nodes[name]
		_, live := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
		switch {
		case !n.ours() || live:
			delete(s.strandedSince, name)
		case busOut && leadsWithAPI:
			if since := s.strandedSince[name]; !since.IsZero() && s.busOutAtLastCheck {
				s.strandedSince[name] = since.Add(sinceCheck)
			}
		case !leading || busOut:
			delete(s.strandedSince, name)
		case s.strandedSince[name].IsZero():
			s.strandedSince[name] = s.w.now
		default:
			if s.busOutAtLastCheck { // the window ended at this event
				s.strandedSince[name] = s.strandedSince[name].Add(sinceCheck)
			}
			if s.w.now.Sub(s.strandedSince[name]) > strandedFor {
				s.violate("S4", "%s has carried edgedrain's cordon for %s with no live request", name, s.w.now.Sub(s.strandedSince[name]).Round(time.Second))
				return
			}
		}
	}
	s.busOutAtLastCheck = busOut
	// N2: a drain whose Node went frees its slot (operators.go).
	if s.checkVanishedSlots(); s.violation != nil {
		return
	}
	// S5: attempts never exceed the configured numbers (per request, across coordinators; an
	// engine that resumes may redo the attempt that was under way when its predecessor stopped).
	for rid, n := range s.cordons {
		if n > s.cfg.Policy.CordonAttempts+s.resumes {
			s.violate("S5", "%d cordon attempts for request %s (limit %d)", n, rid, s.cfg.Policy.CordonAttempts)
			return
		}
	}
	for rid, n := range s.evicts {
		if n > s.cfg.Policy.DrainAttempts+s.resumes {
			s.violate("S5", "%d eviction attempts for request %s (limit %d)", n, rid, s.cfg.Policy.DrainAttempts)
			return
		}
	}
}

func (s *Sim) agentOf(node string) *agentProc {
	for _, a := range s.agents {
		if a.node.name == node {
			return a
		}
	}
	return nil
}

// checkEnd is L1: after the quiet period every request has ended, nothing edgedrain cordoned
// or asked the storage to evict is left so, and every operation still asked for is done.
func (s *Sim) checkEnd() {
	if s.violation != nil {
		return
	}
	cl := s.cluster
	for _, name := range cl.order {
		n := cl.nodes[name]
		a := s.agentOf(name)
		st, _ := s.statusOf(name).(nodedrain.NodeDrainStatus)
		if r, ok := s.bus.latest(bucketStatus, name); ok && r.forged && r.val != nil {
			// The coordinator repairs what it did not write, and tries again every tick until
			// it has (repair.go). (A copied delete marker is no status: it is repaired only
			// under a drain under way, whose status comes back.)
			s.violate("L1", "a value no coordinator wrote is still under the status key of %s after the quiet period (by %s, copied %v): %s",
				name, r.by, r.copied, describe(r.val))
			return
		}
		switch {
		case returning(s.statusOf(name)):
			s.violate("L1", "%s is still in its return gate after the quiet period: %s", name, describe(s.statusOf(name)))
		case a.podGone && n.deleted:
			// Known limit: its Node deleted for a decommission that did not finish (its command
			// failed within the ~40 s its agent's pod outlives the Node, or an operator withdrew it
			// after the deletion), the machine is out of the cluster, with no agent,
			// until its kubelet restarts and registers it again; a request made meanwhile waits.
		case n.gone && !n.exists && !st.HoldsSlot():
			// Its Node deleted by someone else (operators.go) and not registered again: its
			// agent's pod went with it, and a request it made (asked again after its drain
			// ended) waits for the Node to register; what else was asked of it waits too.
		case n.retired && a.twin != nil:
			// Known open: a second agent with the node's name (a misconfiguration) asks again
			// from the shared sentinel, with a state of its own; once the machine is retired
			// its request, for a Node that is gone, waits until withdrawn (edgedrainctl withdraw).
		case n.retired && n.overridden && s.bus.value(bucketRequests, name) != nil:
			// An operator forced the decommission with the override file (S1's explicit
			// override), not through the coordinator: the machine is gone, and a request it
			// could not withdraw first (scenario forced-decommission-leaves-leftovers-to-operator;
			// or its command powered it off before returning) is the operator's to withdraw
			// (edgedrainctl withdraw), as README's override section says; the node stays cordoned
			// for it, and a drain under way for it keeps its slot and waits (scenario
			// forced-decommission-waiting-volumes-leaves-slot-to-operator: for a volume whose other
			// copy failed).
		case s.bus.value(bucketRequests, name) != nil && (!st.HoldsSlot() || st.Status == nodedrain.StatusCordoned) &&
			(s.copiesStranded(name) != "" || s.strandedMachine() != ""):
			// The same known limit, seen from other nodes: a drain that needs the copies of a
			// volume the stranded machine still holds (their Node deleted, they count as lost)
			// waits with it, queued or cordoned and waiting for its volumes, and so may the
			// drains queued behind it, the cluster a node short (as when NATS was unavailable for
			// the ~40 s after the deletion and the agent never had its COMPLETE, or the same under
			// a quorum loss).
		case st.Status == nodedrain.StatusRequested && s.bus.value(bucketRequests, name) != nil && s.retiredHoldsSlot() != "":
			// The known limits of a retired machine's leftover request, seen from other nodes:
			// drained to COMPLETE while its Node was still there (Ready for a while after the
			// power-off), it holds its slot until the operator withdraws it, or until
			// --stale-holder-timeout, when set, releases it; the drains queued behind it wait.
		case s.unmanaged[name] && !(n.exists && n.annotation != "") && !n.evictionRequested && !st.HoldsSlot():
			// Not one the coordinator manages (--node-selector) at the end: its request waits,
			// queued, for a coordinator that manages it, and nothing edgedrain did is left on it.
		case s.bus.value(bucketRequests, name) != nil:
			s.violate("L1", "request of %s still on the bus after the quiet period (%s; agent %s)", name,
				describe(s.statusOf(name)), a.m.State.Phase)
		case n.exists && n.annotation != "":
			s.violate("L1", "%s still carries edgedrain's cordon after the quiet period (unschedulable %v)", name, n.unschedulable)
		case n.evictionRequested:
			s.violate("L1", "the volume gate's eviction request on %s was never released", name)
		case a.twin != nil && a.twin.alive && a.twin.m.State.Phase != agent.PhaseIdle:
			s.violate("L1", "the second agent named %s is still %s for its %s after the quiet period (status %s)", name,
				a.twin.m.State.Phase, a.twin.m.State.Operation, describe(s.statusOf(name)))
		case a.alive && a.m.State.Phase != agent.PhaseIdle:
			s.violate("L1", "the agent of %s is still %s for its %s after the quiet period (status %s)", name,
				a.m.State.Phase, a.m.State.Operation, describe(s.statusOf(name)))
		case s.decommissionStatusLeft(name):
			s.violate("L1", "the status of decommissioned %s is still on the bus after the quiet period: %s", name, describe(s.statusOf(name)))
		case n.retired:
			// Powered off for good: what else was asked of it is moot.
		case a.sentinel[agent.OpUpdate] != 0 && a.sentinel[agent.OpUpdate] == s.cancelled[name+"/"+string(agent.OpUpdate)]:
			// An operator withdrew the request: the operation is cancelled until asked anew.
		case a.sentinel[agent.OpReboot] != 0 && a.sentinel[agent.OpReboot] == s.cancelled[name+"/"+string(agent.OpReboot)]:
		case a.sentinel[agent.OpUpdate] != 0 && s.updatesOK[name].Before(time.Unix(0, a.sentinel[agent.OpUpdate])):
			s.violate("L1", "the update asked for on %s was never done (its sentinel is still there)", name)
		case a.sentinel[agent.OpReboot] != 0:
			s.violate("L1", "the reboot asked for on %s was never done (its sentinel is still there)", name)
		case a.sentinel[agent.OpDecommission] != 0 && !n.retired && a.sentinel[agent.OpDecommission] != s.cancelled[name+"/"+string(agent.OpDecommission)] &&
			a.m.State.Handled[agent.OpDecommission] != a.sentinel[agent.OpDecommission]:
			// (Handled: the agent counts it done, e.g. the machine went down while its command
			// ran and came back.)
			s.violate("L1", "the decommission asked for on %s was never done (the machine still runs; Node deleted %v)", name, n.deleted)
		}
		if s.violation != nil {
			return
		}
	}
}

// returning reports whether a bus value is a status in the return gate.
func returning(v any) bool {
	st, ok := v.(nodedrain.NodeDrainStatus)
	return ok && !st.ReturningSince.IsZero()
}

// copiesStranded names a machine that is out of the cluster after a decommission that stopped
// after its Node deletion (its agent's pod gone, the machine still up) and holds an intact copy
// of a volume node also holds; "" if none.
// strandedMachine names a machine that is up though its Node was deleted for its decommission
// and its agent's pod is gone: the decommission stopped after the deletion (docs/design.md).
func (s *Sim) strandedMachine() string {
	for _, name := range s.cluster.order {
		if n := s.cluster.nodes[name]; n.deleted && n.up && !n.retired && s.agentOf(name).podGone {
			return name
		}
	}
	return ""
}

// retiredHoldsSlot returns a retired machine whose request, left for the operator to withdraw (a
// second agent's, or one a decommission forced with the override file left), holds an admission
// slot: COMPLETE or NOTSUPPORTED for it, with no stale-holder timeout to release it, or (forced
// with the override) a drain still under way for it, which the stale-holder timeout does not
// release either (it releases only a COMPLETE holder).
func (s *Sim) retiredHoldsSlot() string {
	for _, name := range s.cluster.order {
		n := s.cluster.nodes[name]
		st, _ := s.statusOf(name).(nodedrain.NodeDrainStatus)
		req, live := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
		if s.cfg.StaleHolderTimeout == 0 && n.retired && (s.agentOf(name).twin != nil || n.overridden) && live && cleared(st) &&
			st.RequestID == req.RequestID && !st.SlotReleased {
			return name
		}
		if n.retired && n.overridden && live && st.HoldsSlot() && st.RequestID == req.RequestID {
			return name // (a drain under way for it, which waits for the operator's withdrawal too)
		}
	}
	return ""
}

func (s *Sim) copiesStranded(node string) string {
	for _, v := range s.cluster.vols {
		if !slices.ContainsFunc(v.replicas, func(r *replica) bool { return r.node == node }) {
			continue
		}
		for _, r := range v.replicas {
			if n := s.cluster.nodes[r.node]; n != nil && r.intact && n.deleted && n.up && s.agentOf(n.name).podGone {
				return n.name
			}
		}
	}
	return ""
}

// decommissionStatusLeft reports whether a status of a decommission that reached COMPLETE is
// still on the bus. (A status forged afterwards, as in scenario
// forged-status-over-removed-key-left-alone, or a coordinator's answer to it, names no such
// request; a decommission withdrawn before its COMPLETE ends as any withdrawn drain, though its
// Node deletion landed.)
//
// What the key holds is judged, if a coordinator wrote it: a copied delete marker empties the
// key as well as the coordinator's removal (scenario copied-delete-marker-holds-no-status); a
// forged value left is judged above.
//
// A machine whose Node registered again (its decommission withdrawn before the power-off) is a
// node of the cluster again: its idle status stays, as any node's does.
func (s *Sim) decommissionStatusLeft(node string) bool {
	rid, done := s.decommissioned[node]
	r, _ := s.bus.latest(bucketStatus, node)
	st, ok := r.val.(nodedrain.NodeDrainStatus)
	back := s.cluster.nodes[node] != nil && s.cluster.nodes[node].exists && st.Status == nodedrain.StatusNotRequested
	return done && ok && !r.forged && st.RequestID == rid && !back
}

// checkAdmittedWithAPI: no drain is admitted while its coordinator knows the API unreachable
// (docs/design.md, S2's exception): it could be neither cordoned nor evicted. What the coordinator
// knows is the model's (its probe, at each tick), not the code's; an admission decided before it
// knew (StartedAt) and published later (after a pause, or a bus outage) is not one.
func (s *Sim) checkAdmittedWithAPI(c *coord, st nodedrain.NodeDrainStatus) {
	if !c.apiDownSince.IsZero() && st.StartedAt.After(c.apiDownSince) {
		s.violate("S2", "%s admitted (STARTING) at t=%.3fs by %s, which had seen the Kubernetes API unreachable since t=%.3fs",
			st.Node, st.StartedAt.Sub(epoch).Seconds(), c.name, c.apiDownSince.Sub(epoch).Seconds())
	}
}

// checkAPIRule: the API-unreachable exception (docs/design.md, S2) lets a COMPLETE out only for
// a drain admitted before its coordinator saw the API unreachable, cordoned, once that lasted
// the timeout, and if the gate's last view (the coordinator's informers) calls its volumes safe.
// Whether the outage is everyone's is the agent's to check (checkS1).
func (s *Sim) checkAPIRule(c *coord, st nodedrain.NodeDrainStatus) {
	n := s.cluster.nodes[st.Node]
	// (When its cycle was admitted: StartedAt, decided then; its STARTING may never have
	// reached the bus, superseded while the bus was down.)
	admitted, ok := st.StartedAt, !st.StartedAt.IsZero()
	whole := coordinator.GateOptions{WholeCluster: true}
	switch {
	case c.apiDownSince.IsZero() || s.w.now.Sub(c.apiDownSince) < s.cfg.APIUnreachableTimeout:
		s.violate("S2", "COMPLETE of the API-unreachable rule for %s, though %s had not seen the API unreachable for %s", st.Node, c.name,
			s.cfg.APIUnreachableTimeout)
	case !ok || !admitted.Before(c.apiDownSince):
		s.violate("S2", "COMPLETE for %s during an API outage for a drain admitted after %s saw the API unreachable", st.Node, c.name)
	case !s.cluster.apiUp && (n == nil || (!n.unschedulable && !n.uncordonedAt.After(admitted))):
		// (Cut off alone, the coordinator may not see an operator's uncordon: the agent, whose
		// node reaches the API, does not act on this COMPLETE then; checkS1. An operator who
		// uncordoned the node during its drain, before the outage, made it so: the rule asks for
		// a cordon the API confirmed, not one still there.)
		s.violate("S2", "COMPLETE for %s during an API outage although the node was never cordoned", st.Node)
	case !c.gateFor(st.Node, coordinator.GateOptions{}).Safe && !c.gateFor(st.Node, whole).Safe:
		s.violate("S2", "COMPLETE for %s during an API outage although the gate's last view says its volumes are not safe", st.Node)
	case c.lostAPI.behind && !s.gateOn(c.lostAPI.vols, c.lostAPI.nodes, st.Node, coordinator.GateOptions{}).Safe &&
		!s.gateOn(c.lostAPI.vols, c.lostAPI.nodes, st.Node, whole).Safe:
		// "The last view" is the one the informers had when the API went: caches still behind
		// after an earlier outage hold an older one, which may miss a copy lost in between.
		s.violate("S2", "COMPLETE for %s during an API outage on informers still behind after an earlier one: when %s lost the API "+
			"(t=%.3fs) it said the volumes were not safe", st.Node, c.name, c.lostAPI.at.Sub(epoch).Seconds())
	}
}

// cleared reports whether a status lets its agent run the operation: COMPLETE or NOTSUPPORTED.
func cleared(st nodedrain.NodeDrainStatus) bool {
	return st.Status == nodedrain.StatusComplete || st.Status == nodedrain.StatusNotSupported
}
