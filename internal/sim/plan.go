package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// Kind is a kind of scheduled happening: a trigger, a fault or an operator's action.
type Kind string

// The happenings a plan schedules.
const (
	Reboot          Kind = "reboot-required" // the node's reboot sentinel appears
	Update          Kind = "update-required" // the node's update sentinel appears
	KernelDay       Kind = "kernel-update"   // every node's reboot sentinel appears at once
	CoordCrash      Kind = "coordinator-crash"
	CoordFreeze     Kind = "coordinator-freeze"
	AgentCrash      Kind = "agent-crash"
	AgentCut        Kind = "agent-network-cut"
	BusOutage       Kind = "nats-outage"
	BusLossy        Kind = "nats-lossy"
	WatchLag        Kind = "watch-lag"
	APIOutage       Kind = "api-outage"
	OperatorCordon  Kind = "operator-cordon"
	OperatorUncord  Kind = "operator-uncordon"
	Withdraw        Kind = "edgedrainctl-withdraw"
	Override        Kind = "override-complete"
	KubeletDown     Kind = "kubelet-down"
	NodeReregister  Kind = "node-reregister"
	ReplicaFails    Kind = "replica-fails"
	PowerCycle      Kind = "power-cycle"
	AgentDuplicated Kind = "duplicate-agent"                        // a second agent runs with the node's name
	ForgedStatus    Kind = "status-without-request"                 // a NOTSUPPORTED naming no request appears
	ClusterShutdown Kind = "cluster-shutdown"                       // an operator declares a whole-cluster shutdown
	Decommission    Kind = "decommission"                           // an operator asks for the node's decommission (agent request decommission)
	PDBBlocks       Kind = "pdb-allows-nothing"                     // a PodDisruptionBudget allows no disruption for a while
	StateLost       Kind = "agent-state-lost"                       // the node is reinstalled: it reboots without the agent's state file
	ForgedOverLive  Kind = "status-without-request-over-a-live-one" // regressions only (see ForgedStatus)
)

// Fault is one scheduled happening: At from the start, on node (or coordinator) Target, lasting For.
type Fault struct {
	At     time.Duration
	Kind   Kind
	Target int
	For    time.Duration
}

func (f Fault) String() string {
	return fmt.Sprintf("%s@%.1fs/%d/%s", f.Kind, f.At.Seconds(), f.Target, f.For)
}

// Plan is the happenings of a run; shrinking removes some.
type Plan []Fault

// weightedKind is a kind of fault and its weight in random plans.
type weightedKind struct {
	k Kind
	w int
}

// drawKind draws one of kinds, each as likely as its weight (one draw of rng).
func drawKind(kinds []weightedKind, rng *rand.Rand) Kind {
	total := 0
	for _, k := range kinds {
		total += k.w
	}
	x := rng.IntN(total)
	for _, fk := range kinds {
		if x < fk.w {
			return fk.k
		}
		x -= fk.w
	}
	return kinds[len(kinds)-1].k
}

// weighted kinds of faults for random plans.
var faultKinds = []weightedKind{
	{CoordCrash, 4}, {CoordFreeze, 2}, {AgentCrash, 4}, {AgentCut, 4}, {BusOutage, 3}, {BusLossy, 2}, {WatchLag, 3},
	{APIOutage, 3}, {OperatorCordon, 2}, {OperatorUncord, 2}, {Withdraw, 3}, {Override, 1}, {KubeletDown, 2},
	{NodeReregister, 1}, {ReplicaFails, 3}, {PowerCycle, 2}, {AgentDuplicated, 1}, {ForgedStatus, 1}, {PDBBlocks, 3}, {StateLost, 1},
}

// RandomPlan draws a plan for cfg from rng: triggers (sometimes everyone at once) and faults.
func RandomPlan(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	at := func() time.Duration { return time.Duration(rng.Int64N(int64(cfg.Active))) }
	switch rng.IntN(10) {
	case 0, 1, 2:
		p = append(p, Fault{At: at() / 2, Kind: KernelDay})
	case 3:
		p = append(p, Fault{At: at() / 2, Kind: ClusterShutdown})
	}
	for n := range cfg.Nodes {
		switch rng.IntN(4) {
		case 0, 1:
			p = append(p, Fault{At: at(), Kind: Reboot, Target: n})
		case 2:
			p = append(p, Fault{At: at(), Kind: Update, Target: n})
		}
	}
	for range rng.IntN(9) {
		k := drawKind(faultKinds, rng)
		d := time.Duration(1+rng.IntN(40)) * time.Second
		if (k == APIOutage || k == PDBBlocks) && rng.IntN(2) == 0 {
			d = time.Duration(60+rng.IntN(240)) * time.Second
		}
		p = append(p, Fault{At: at(), Kind: k, Target: rng.IntN(max(cfg.Nodes, cfg.Coordinators)), For: d})
	}
	if cfg.Decommission { // drawn last: the plans of runs without one stay what they were
		p = append(p, Fault{At: at(), Kind: Decommission, Target: rng.IntN(cfg.Nodes)})
	}
	if cfg.Forgers { // after it, for the same reason
		for range 1 + rng.IntN(3) {
			d := time.Duration(5+rng.IntN(60)) * time.Second
			if rng.IntN(3) == 0 {
				d = time.Duration(60+rng.IntN(240)) * time.Second
			}
			p = append(p, Fault{At: at(), Kind: StatusForger, Target: rng.IntN(cfg.Nodes), For: d})
		}
	}
	if cfg.ProcessPauses { // after them, for the same reason
		p = append(p, coordFaults(cfg, rng)...)
	}
	p = appendAgentFaults(p, cfg, rng, at) // after them, for the same reason
	if cfg.Operators {                     // after them, for the same reason
		p = append(p, operatorFaults(cfg, rng)...)
	}
	if cfg.UnkindPods { // after them, for the same reason
		p = append(p, evictorFaults(cfg, rng)...)
	}
	if cfg.LateWrites { // after them, for the same reason
		p = append(p, apiWriteFaults(cfg, rng)...)
	}
	if cfg.OperatorBus { // after them, for the same reason
		p = append(p, operatorBusFaults(cfg, rng)...)
	}
	if cfg.ReplicatedBus { // after them, for the same reason
		p = append(p, replicaFaults(cfg, rng)...)
	}
	if cfg.Clocks { // after them, for the same reason
		p = append(p, clockFaults(cfg, rng, at)...)
	}
	if cfg.Selector { // after them, for the same reason
		p = append(p, selectorFaults(cfg, rng, at)...)
	}
	if cfg.TypedReboots { // after them, for the same reason
		p = append(p, typedRebootFaults(cfg, rng, at)...)
	}
	if cfg.InformersBehind {
		p = append(p, informerFaults(cfg)...)
	}
	return p
}

// apply makes a happening happen.
func (s *Sim) apply(f Fault) {
	w, cl := s.w, s.cluster
	nodeAt := func(i int) *node { return cl.nodes[cl.order[i%len(cl.order)]] }
	ag := func(i int) *agentProc { return s.agents[i%len(s.agents)] }
	back := func(what string, fn func()) { w.after(f.For, what, fn) }
	switch f.Kind {
	case Reboot, Update:
		a := ag(f.Target)
		op := agent.OpReboot
		if f.Kind == Update {
			op = agent.OpUpdate
		}
		w.logf("%s: /var/run/%s-required appears", a.node.name, op)
		a.sentinel[op] = w.now.UnixNano()
	case Decommission:
		a := ag(f.Target)
		w.logf("%s: an operator asks for its decommission (agent request decommission)", a.node.name)
		a.sentinel[agent.OpDecommission] = w.now.UnixNano()
	case KernelDay:
		w.logf("every node gets /var/run/reboot-required")
		for _, a := range s.agents {
			a.sentinel[agent.OpReboot] = w.now.UnixNano()
		}
	case CoordCrash:
		c := s.coords[f.Target%len(s.coords)]
		c.crash()
		back("coordinator restart", c.restart)
	case CoordFreeze:
		c := s.coords[f.Target%len(s.coords)]
		w.logf("%s freezes for %s", c.name, f.For)
		// A pause within a pause does not end the first one early: events held for the first
		// would otherwise run after later ones, a reordering no process sees (scenario
		// pause-within-pause-keeps-watch-order).
		if until := w.now.Add(f.For); until.After(c.frozenUntil) {
			c.frozenUntil = until
		}
	case AgentCrash:
		a := ag(f.Target)
		a.crash("crash")
		back("agent restart", func() {
			if a.node.up && !a.alive && !a.podGone {
				w.logf("agent of %s restarts", a.node.name)
				a.start()
			}
		})
	case AgentCut:
		a := ag(f.Target)
		w.logf("the network of the agent of %s is cut for %s", a.node.name, f.For)
		a.conn.cut = true
		back("agent network back", func() { a.conn.cut = false; s.bus.reconnected() })
	case BusOutage:
		w.logf("NATS is down for %s", f.For)
		s.bus.up = false
		back("nats back", func() { w.logf("NATS is back"); s.bus.up = true; s.bus.reconnected() })
	case BusLossy:
		w.logf("NATS loses replies for %s", f.For)
		s.bus.lossy = true
		back("nats whole", func() { s.bus.lossy = false })
	case WatchLag:
		a := ag(f.Target)
		w.logf("the status watch of the agent of %s lags by seconds for %s", a.node.name, f.For)
		for _, wt := range s.bus.watchers {
			if wt.c == a.conn {
				wt.slow = true
				back("watch catches up", func() { wt.slow = false })
			}
		}
	case APIOutage:
		w.logf("the Kubernetes API is unreachable for %s", f.For)
		s.apiDown()
		back("api back", func() { w.logf("the Kubernetes API is back"); s.apiBack() })
	case OperatorCordon:
		// kubectl cordon of a schedulable node, edgedrain's annotation left on it or not (kubectl
		// uncordon leaves it): the cordon is the operator's. (kubectl needs the API.)
		if n := nodeAt(f.Target); n.exists && !n.unschedulable && cl.apiUp {
			w.logf("an operator cordons %s", n.name)
			n.unschedulable, n.cordonBy = true, cordonByOperator
			n.rv++
			uid := n.uid
			back("operator uncordons", func() {
				if n.exists && n.uid == uid && n.unschedulable && n.cordonBy == cordonByOperator && cl.apiUp {
					cl.operatorUncordon(n, "the operator uncordons %s again")
				}
			})
		}
	case OperatorUncord:
		if n := nodeAt(f.Target); n.exists && n.unschedulable && cl.apiUp {
			cl.operatorUncordon(n, "an operator uncordons %s (kubectl uncordon)")
		}
	case Withdraw:
		n := nodeAt(f.Target)
		if s.bus.up && s.bus.value(bucketRequests, n.name) != nil {
			w.logf("edgedrainctl withdraw %s", n.name)
			s.operatorWrites(n.name, nil)
		}
	case Override:
		a := ag(f.Target)
		w.logf("an operator writes the override file on %s: COMPLETE", a.node.name)
		o := nodedrain.StatusOverride{Status: nodedrain.StatusComplete}
		a.override = &o
		a.later(w.between(0, 250*time.Millisecond), "override poll", func() { a.step(agent.EvOverride{Override: &o}) })
	case KubeletDown:
		n := nodeAt(f.Target)
		w.logf("the kubelet of %s stops reporting for %s", n.name, f.For)
		n.ready = false
		cl.markUnsafe(n.name)
		back("kubelet back", func() {
			if n.up && n.exists {
				n.ready = true
				cl.reschedule()
			}
		})
	case NodeReregister:
		n := nodeAt(f.Target)
		if n.exists && cl.apiUp { // (deleting a Node, and registering it, needs the API)
			w.logf("%s's Node object is deleted and registered again", n.name)
			n.exists = false
			// Its copies stop counting as healthy elsewhere (S2), as when its kubelet stops
			// reporting: a COMPLETE decided just before is judged on what its checks saw (scenario
			// node-deleted-after-gate-check-judged-as-of-check: the Node went 2 ms before a
			// COMPLETE for another node).
			cl.markUnsafe(n.name)
			n.changedAt = w.now
			w.after(w.between(time.Second, 10*time.Second), "node registers", func() {
				n.exists, n.unschedulable, n.annotation, n.keep, n.cordonBy, n.ready = true, false, "", "", "", n.up
				cl.newUID(n)
				n.rv++
				cl.reschedule()
			})
		}
	case ReplicaFails:
		if len(cl.vols) == 0 {
			return
		}
		v := cl.vols[f.Target%len(cl.vols)]
		for _, r := range v.replicas {
			if r.intact {
				w.logf("replica %s of %s on %s fails", r.name, v.name, r.node)
				r.intact, r.running = false, false
				cl.markUnsafe(r.node)
				break
			}
		}
	case AgentDuplicated:
		a := ag(f.Target)
		w.logf("a second agent starts with the name %s (misconfigured)", a.node.name)
		s.duplicate(a)
	case StateLost:
		// Known open: a state file lost without a reboot leaves the agent unable to tell its own
		// request (made since the boot) from a live agent's; it waits and says to withdraw it.
		a := ag(f.Target)
		w.logf("%s is reinstalled: it reboots without the agent's state file", a.node.name)
		a.persisted, a.noState = agent.State{Phase: agent.PhaseIdle}, true
		a.cmdRequest = ""
		s.powerCycle(a, f.For)
	case ForgedStatus, ForgedOverLive:
		// An unsigned value from an old tool: agents refuse it and the coordinator repairs it
		// (signed.go). Random plans put it on a node with no live request, as before statuses
		// were signed (StatusForger strikes live drains).
		n := nodeAt(f.Target)
		if s.bus.up && (f.Kind == ForgedOverLive || s.bus.value(bucketRequests, n.name) == nil) {
			w.logf("a status NOTSUPPORTED naming no request appears for %s (not from the coordinator)", n.name)
			s.bus.put(bucketStatus, n.name, revision{val: nodedrain.NodeDrainStatus{Node: n.name, Status: nodedrain.StatusNotSupported,
				Message: "forged"}, by: "somebody", forged: true})
			s.events[n.name] = append(s.events[n.name], nodedrain.StatusNotSupported) // a change, though no Event
		}
	case ClusterShutdown:
		w.logf("an operator declares a whole-cluster shutdown on every node")
		for _, a := range s.agents {
			a.shutdown = true
			a.sentinel[agent.OpShutdown] = w.now.UnixNano()
		}
	case PDBBlocks:
		if len(cl.groups) == 0 {
			return
		}
		g := cl.groups[f.Target%len(cl.groups)]
		w.logf("the PodDisruptionBudget of %s allows no disruption for %s", g.name, f.For)
		g.blocked++ // faults may overlap: the budget is relaxed when the last one ends
		back("pdb relaxed", func() { g.blocked-- })
	case StatusForger:
		s.forger.start(nodeAt(f.Target).name, f.For)
	case CoordPauseMidWrite, CoordAPICut, CoordBusCut:
		s.applyCoordFault(f)
	case AgentPause, AgentPauseAtRead, DiskFull, DiskReadOnly, OverrideUnsupported, AgentCutNotReady, AgentPausedNotReady:
		s.applyAgentFault(f)
	case OperatorRecordon, RecordonAtGate, RecordonLostReply, RecordonNoCoordinator, KeepCordoned, NodeDeleted, NodeDeletedForGood:
		s.applyOperatorFault(f)
	case OperatorPutsRequest, OperatorReplaysRequest:
		s.applyOperatorBusFault(f)
	case PodPinned, BindRace, DaemonSetPods:
		s.applyEvictorFault(f)
	case WritesLate, WriteRepliesLost:
		s.applyAPIWriteFault(f)
	case InformersBehind:
		s.applyInformerFault(f)
	case FollowerLags, StreamElection, QuorumLoss:
		s.applyReplicaFault(f)
	case ClockStep, NoRTC, NoRTCFarPast, CoordClockSkew, ControlPlaneSkew:
		s.applyClockFault(f)
	case SelectorLeave, SelectorLeaveForGood, SelectorJoinLate, Unmanaged:
		s.applySelectorFault(f)
	case TypedReboot:
		s.applyTypedReboot(ag(f.Target))
	case PowerCycle:
		a := ag(f.Target)
		w.logf("%s loses power (not edgedrain's doing)", a.node.name)
		a.cmdRequest = ""
		s.powerCycle(a, f.For)
	}
}

// heal ends the active phase: every fault is over, every process runs.
func (s *Sim) heal() {
	s.quiet = true
	s.w.logf("faults stop: quiet period of %s", s.cfg.Quiet)
	s.forger.heal()
	s.bus.up, s.bus.lossy = true, false
	s.cluster.setAPI(true)
	for _, c := range s.coords {
		c.apiCut, c.conn.cut = false, false
		// A pause runs out by itself: ending it early would run the events held for its end
		// after newer ones (a delete after the put that followed it).
		c.restart()
	}
	for _, a := range s.agents {
		a.conn.cut = false
		if a.node.up && !a.alive && !a.podGone {
			a.start()
		}
	}
	for _, wt := range s.bus.watchers {
		wt.slow = false
	}
	for _, g := range s.cluster.groups {
		g.blocked = 0
	}
	s.maint.heal()
	for _, n := range s.cluster.nodes {
		if n.cordonBy == cordonByOperator { // (a drain's last checks may have read it still there)
			n.unschedulable, n.cordonBy, n.uncordonedAt = false, "", s.w.now
			n.rv++
			s.cluster.markUnsafe(n.name)
		}
		if n.up && n.exists {
			n.ready = true
		}
	}
	s.healAgentFaults()
	s.bus.reconnected()
}
