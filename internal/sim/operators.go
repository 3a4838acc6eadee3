package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Operators acting on Node objects behind edgedrain's back:
// kubectl uncordon then kubectl cordon on a node edgedrain cordoned (the cordon is then the
// operator's, though edgedrain's annotation is still there), the keep-cordoned annotation, and
// kubectl delete node, the Node registering again later as a new object.
const (
	// OperatorRecordon: kubectl uncordon, then kubectl cordon, on the target node as soon as it
	// is cordoned, within For.
	OperatorRecordon Kind = "operator-uncordon-then-cordon"
	// RecordonAtGate: the same while the node's drain waits for its volume gate, within For.
	RecordonAtGate Kind = "operator-recordon-during-gate-wait"
	// RecordonLostReply: the reply to edgedrain's next cordon of the node within For is lost,
	// and the operator uncordons and cordons the node before the cordon is retried.
	RecordonLostReply Kind = "operator-recordon-after-lost-cordon-reply"
	// RecordonNoCoordinator: once the node carries edgedrain's cordon, every coordinator stops
	// (an upgrade) for For, and the operator uncordons and cordons the node meanwhile.
	RecordonNoCoordinator Kind = "operator-recordon-while-no-coordinator-runs"
	// KeepCordoned: an operator sets edgedrain.io/keep-cordoned on the node (mostly once it
	// carries edgedrain's cordon); For after edgedrain hands the cordon over, they uncordon it.
	KeepCordoned Kind = "keep-cordoned"
	// NodeDeleted: kubectl delete node, once the node carries edgedrain's cordon if it does
	// within a minute; its kubelet, restarted For later (mostly past NodeGoneAfter), registers
	// it again, a new object, sometimes cordoned from the start.
	NodeDeleted Kind = "node-deleted"
	// NodeDeletedForGood: the same, not registered again by its kubelet until the machine next
	// boots, or until an operator adds it again For later (minutes: For 0, never).
	NodeDeletedForGood Kind = "node-deleted-for-good"
)

// operatorWindow is how long a fault waiting for its moment (the node cordoned by edgedrain)
// waits at most when its For says something else.
const operatorWindow = 2 * time.Minute

// vanishSlack is how much past NodeGoneAfter a drain under way may hold its slot for a Node
// gone while a coordinator leads: an admission pass, a status write.
const vanishSlack = 30 * time.Second

// operators is the state of this file's faults and oracles.
type operators struct {
	// lose: the reply to the next cordon of the node is lost, until then.
	lose map[string]time.Time
	// keepFor: how long after edgedrain hands a kept cordon over the operator uncordons it.
	keepFor map[string]time.Duration
	// cordonUID is the Node object each request's last cordon found; checkedAt when its last
	// check before COMPLETE read the node (present).
	cordonUID map[string]int
	checkedAt map[string]time.Time
	// vanished is since when each node's drain has been under way with its Node gone while
	// the same coordinator run led and could act.
	vanished map[string]vanish
}

type vanish struct {
	run   string
	since time.Time
}

func (s *Sim) opState() *operators {
	if s.ops == nil {
		s.ops = &operators{lose: map[string]time.Time{}, keepFor: map[string]time.Duration{}, cordonUID: map[string]int{},
			checkedAt: map[string]time.Time{}, vanished: map[string]vanish{}}
	}
	return s.ops
}

// operatorFaults draws the faults of this file for a random plan (Config.Operators).
func operatorFaults(cfg Config, rng *rand.Rand) Plan {
	kinds := []Kind{OperatorRecordon, RecordonAtGate, RecordonLostReply, RecordonNoCoordinator, KeepCordoned, NodeDeleted, NodeDeletedForGood}
	var p Plan
	for range 1 + rng.IntN(2) {
		k := kinds[rng.IntN(len(kinds))]
		var d time.Duration
		switch k {
		case NodeDeleted: // past NodeGoneAfter, or sometimes not
			d = time.Duration(61+rng.IntN(240)) * time.Second
			if rng.IntN(4) == 0 {
				d = time.Duration(2+rng.IntN(49)) * time.Second
			}
		case NodeDeletedForGood:
			d = time.Duration(3+rng.IntN(8)) * time.Minute
		case RecordonNoCoordinator:
			d = time.Duration(2+rng.IntN(39)) * time.Second
		case KeepCordoned:
			d = time.Duration(5+rng.IntN(116)) * time.Second
		default:
			d = time.Duration(30+rng.IntN(151)) * time.Second
		}
		p = append(p, Fault{At: time.Duration(rng.Int64N(int64(cfg.Active))), Kind: k, Target: rng.IntN(cfg.Nodes), For: d})
	}
	return p
}

// applyOperatorFault makes one of this file's faults happen.
func (s *Sim) applyOperatorFault(f Fault) {
	w, cl, o := s.w, s.cluster, s.opState()
	n := cl.nodes[cl.order[f.Target%len(cl.order)]]
	switch f.Kind {
	case OperatorRecordon:
		s.when(f.For, func() bool { return n.exists && n.unschedulable }, func() { s.recordon(n, "") })
	case RecordonAtGate:
		s.when(f.For, func() bool { return n.ours() && s.gateWaiting(n.name) }, func() { s.recordon(n, "while its drain waits for the volume gate") })
	case RecordonLostReply:
		o.lose[n.name] = w.now.Add(f.For)
	case RecordonNoCoordinator:
		s.when(operatorWindow, n.ours, func() {
			w.logf("every coordinator stops for %s (an upgrade)", f.For)
			for _, c := range s.coords {
				if c.alive {
					c.crash()
					w.after(f.For, "coordinator restart", c.restart)
				}
			}
			w.after(w.between(100*time.Millisecond, f.For), "operator recordon", func() { s.recordon(n, "while no coordinator runs") })
		})
	case KeepCordoned:
		o.keepFor[n.name] = f.For
		cond := n.ours
		if w.chance(0.25) { // set on a node edgedrain has not cordoned (yet): honoured at its next drain's end
			cond = func() bool { return n.exists }
		}
		s.when(operatorWindow, cond, func() {
			w.logf("an operator annotates %s edgedrain.io/keep-cordoned (edgedrainctl keep-cordoned)", n.name)
			n.keep = "sim: keep it out of service"
			n.rv++
		})
	case NodeDeleted, NodeDeletedForGood:
		// (kubectl delete node during a drain, mostly: one deletion waits for edgedrain's cordon
		// for a while.)
		deadline := w.now
		if f.Kind == NodeDeleted {
			deadline = w.now.Add(operatorWindow / 2)
		}
		s.when(operatorWindow, func() bool { return n.exists && (n.ours() || !w.now.Before(deadline)) }, func() {
			how := "its kubelet registers it again when it next starts"
			if f.For > 0 {
				how = fmt.Sprintf("its kubelet registers it again in %s", f.For)
			}
			w.logf("%s's Node object is deleted (kubectl delete node): %s", n.name, how)
			n.exists, n.gone, n.changedAt = false, true, w.now
			n.rv++
			cl.markUnsafe(n.name)
			uid := n.uid
			w.after(podGCDelay, "pod garbage collection", func() { s.orphanGC(n, uid) })
			if f.For > 0 {
				w.after(f.For, "kubelet restarts", func() {
					s.whenAPI(time.Hour, func() bool { return true }, func() { s.nodeRegisters(n, "as its kubelet restarts") })
				})
			}
		})
	}
}

// when runs an operator's act once cond holds and the API answers (kubectl needs it), asked
// every 250 ms within window from now; not once faults have stopped.
func (s *Sim) when(window time.Duration, cond func() bool, act func()) {
	s.poll(window, func() bool { return !s.quiet }, cond, act)
}

// whenAPI is when for what goes on once faults have stopped too (an operator's clean-up, a
// kubelet registering its Node).
func (s *Sim) whenAPI(window time.Duration, cond func() bool, act func()) {
	s.poll(window, func() bool { return true }, cond, act)
}

func (s *Sim) poll(window time.Duration, still, cond func() bool, act func()) {
	until := s.w.now.Add(window)
	var poll func()
	poll = func() {
		switch {
		case !still():
		case s.cluster.apiUp && cond():
			act()
		case s.w.now.Before(until):
			s.w.after(250*time.Millisecond, "operator waits", poll)
		}
	}
	poll()
}

// gateWaiting reports whether the leading coordinator's drain of node waits for its volume gate.
func (s *Sim) gateWaiting(node string) bool {
	for _, c := range s.coords {
		if !s.leads(c) || c.core == nil {
			continue
		}
		d, ok := c.core.Drain(node)
		gate := func(op nodedrain.Op) bool { return op == nodedrain.OpGate || op == nodedrain.OpFinalGate }
		if ok && d.Status.Status == nodedrain.StatusCordoned && (gate(d.Waiting) || gate(d.RetryOp)) {
			return true
		}
	}
	return false
}

// recordon is kubectl uncordon, then kubectl cordon a moment later (pods may land between):
// the cordon is the operator's, and edgedrain's annotation, if any, is left on it. Not once
// faults have stopped: a cordon made then would stay (heal has removed the operators' cordons).
func (s *Sim) recordon(n *node, why string) {
	if !n.exists || !n.unschedulable || s.quiet || !s.cluster.apiUp {
		return
	}
	if why != "" {
		why = " " + why
	}
	s.cluster.operatorUncordon(n, "an operator uncordons %s (kubectl uncordon)"+why)
	uid := n.uid
	s.w.after(s.w.between(10*time.Millisecond, 2*time.Second), "operator cordons", func() {
		s.when(operatorWindow, func() bool { return n.exists && n.uid == uid }, func() {
			if !n.unschedulable {
				s.w.logf("an operator cordons %s again (kubectl cordon): the cordon is theirs", n.name)
				n.unschedulable, n.cordonBy = true, cordonByOperator
				n.rv++
			}
		})
	})
}

// loseCordonReply reports whether the reply to edgedrain's cordon of node, which landed, is lost
// (RecordonLostReply); the operator then uncordons and cordons it before the cordon is retried.
func (s *Sim) loseCordonReply(node string) bool {
	o := s.opState()
	until, armed := o.lose[node]
	if !armed || s.quiet || s.w.now.After(until) {
		return false
	}
	delete(o.lose, node)
	s.w.logf("the reply to the cordon of %s is lost", node)
	n := s.cluster.nodes[node]
	s.w.after(s.w.between(100*time.Millisecond, 5*time.Second), "operator recordon", func() {
		s.when(operatorWindow, func() bool { return true }, func() { s.recordon(n, "before edgedrain retries its cordon") })
	})
	return true
}

// handedOver: edgedrain left its cordon of n in place for the keep-cordoned annotation; the
// cordon is the operator's now, who uncordons the node later.
func (s *Sim) handedOver(n *node) {
	n.cordonBy = cordonByOperator
	uid := n.uid
	s.w.after(s.opState().keepFor[n.name], "operator uncordons", func() {
		s.whenAPI(time.Hour, func() bool { return true }, func() {
			if n.exists && n.uid == uid && n.unschedulable && n.cordonBy == cordonByOperator && n.annotation == "" {
				s.cluster.operatorUncordon(n, "the operator uncordons %s (kept cordoned after edgedrain's drain)")
			}
		})
	})
}

// orphanGC is Kubernetes' pod garbage collector for a Node deleted by someone else: once it has
// been gone for podGCDelay (not registered again), its pods are deleted (their ReplicaSets make
// others) and so is its agent's: no agent runs there until the Node registers again.
func (s *Sim) orphanGC(n *node, uid int) {
	cl := s.cluster
	if n.exists || n.uid != uid {
		return
	}
	s.w.logf("the pods of deleted %s are garbage-collected (Longhorn's instance manager's too: its replicas stop)", n.name)
	for _, p := range cl.podsOn(n.name) {
		delete(cl.pods, p.name)
		cl.replace(p)
	}
	cl.replicasStop(n)
	if !n.up {
		return
	}
	a := s.agentOf(n.name)
	a.podDeleted()
}

// nodeRegisters registers a Node deleted by someone else again while its machine runs (a down
// machine's does as it boots: machineUp); its agent's pod is made again.
func (s *Sim) nodeRegisters(n *node, why string) {
	if !n.gone || n.exists || !n.up || n.retired {
		return
	}
	s.cluster.registerAgain(n, why)
	for _, v := range s.cluster.vols { // its instance manager runs again
		for _, r := range v.replicas {
			if r.node == n.name && r.intact {
				r.running = true
			}
		}
	}
	a := s.agentOf(n.name)
	for _, p := range []*agentProc{a, a.twin} {
		if p != nil && p.podGone {
			p.podGone = false
			if !p.alive {
				p.start()
			}
		}
	}
}

// registerAgain is a kubelet registering its deleted Node: a new object (a new UID), without
// edgedrain's annotations, sometimes cordoned from the start (--register-schedulable=false, an
// operator's template: then not edgedrain's cordon), which its operator removes later.
func (c *cluster) registerAgain(n *node, why string) {
	cordoned := c.w.chance(1.0 / 3)
	n.exists, n.gone, n.ready = true, false, false
	n.unschedulable, n.annotation, n.keep, n.cordonBy = cordoned, "", "", ""
	c.newUID(n)
	n.rv++
	what := "schedulable"
	if cordoned {
		n.cordonBy, what = cordonByOperator, "cordoned"
	}
	c.w.logf("%s's Node object registers again %s, a new object (UID %d), %s", n.name, why, n.uid, what)
	c.w.after(c.w.between(500*time.Millisecond, 3*time.Second), "kubelet ready", func() {
		if n.up && n.exists {
			n.ready = true
			n.rv++
			c.reschedule()
		}
	})
	if cordoned {
		uid := n.uid
		var later func()
		later = func() {
			switch {
			case !n.exists || n.uid != uid || !n.unschedulable || n.cordonBy != cordonByOperator:
			case !c.apiUp:
				c.w.after(time.Second, "operator uncordons", later)
			default:
				c.operatorUncordon(n, "an operator uncordons %s, registered cordoned")
			}
		}
		c.w.after(c.w.between(10*time.Second, 90*time.Second), "operator uncordons", later)
	}
}

// nodeUID is the UID a Node object's uid is answered as (empty: none read).
func nodeUID(uid int) string {
	if uid == 0 {
		return ""
	}
	return fmt.Sprintf("uid-%d", uid)
}

// cordonFound records the Node object a cordon of request rid found (its drain's NodeUID).
func (s *Sim) cordonFound(rid string, uid int) { s.opState().cordonUID[rid] = uid }

// cordonChecked records that the check before COMPLETE of request rid read the node, present.
func (s *Sim) cordonChecked(rid string) { s.opState().checkedAt[rid] = s.w.now }

// checkUncordon (S4): edgedrain removes only the cordon it made, and not one an operator asked
// to keep.
func (s *Sim) checkUncordon(c *coord, n *node) {
	switch {
	case n.cordonBy != cordonByEdgedrain:
		s.violate("S4", "%s removed a cordon of %s that it did not make (by %s; edgedrain's annotation was left from before)", c.name, n.name, n.cordonBy)
	case n.keep != "":
		s.violate("S4", "%s removed the cordon of %s that an operator asked to keep (edgedrain.io/keep-cordoned)", c.name, n.name)
	}
}

// checkSameNode (N1): never COMPLETE for a Node missing, or replaced (registered again) since
// the drain's cordon found it, unless that happened after the check before COMPLETE read it
// (no check-then-act can see that). A decommission's Node goes by design; a COMPLETE of the
// API-unreachable rule is judged by its own rule.
func (s *Sim) checkSameNode(st nodedrain.NodeDrainStatus) {
	if st.Decommission || st.APIUnreachable {
		return
	}
	o := s.opState()
	n := s.cluster.nodes[st.Node]
	at, checked := o.checkedAt[st.RequestID]
	uid, cordoned := o.cordonUID[st.RequestID]
	if !checked || n.changedAt.After(at) {
		return
	}
	switch {
	case !n.exists:
		s.violate("N1", "COMPLETE for %s, whose Node object has been missing since %s", st.Node, n.changedAt.Sub(epoch))
	case cordoned && n.uid != uid:
		s.violate("N1", "COMPLETE for %s, whose Node object was replaced (UID %d, registered at %s) since its cordon found UID %d",
			st.Node, n.uid, n.changedAt.Sub(epoch), uid)
	}
}

// relisting: the run saw the API answer again so recently that its informers may not have
// listed again yet (a client-go reflector backs off about as long as it failed, jittered, at
// most a minute): the design's Node counts do not run on that view.
func (c *coord) relisting() bool {
	return !c.apiBack.IsZero() && c.s.w.now.Before(c.apiBack.Add(min(time.Minute, 2*c.apiDownFor)))
}

// checkVanishedSlots (N2): a drain under way whose Node is gone ends, and frees its slot, within
// NodeGoneAfter and some slack while one coordinator run leads and can act (reaches the API and
// NATS, its informers caught up, not paused) and some Node is left.
func (s *Sim) checkVanishedSlots() {
	o := s.opState()
	missing := false // (the leader's view is costly: looked at only when a drain lost its Node)
	for _, name := range s.cluster.order {
		if !s.cluster.nodes[name].exists {
			missing = true
		}
	}
	if !missing {
		clear(o.vanished)
		return
	}
	var leader *coord
	for _, c := range s.coords {
		// Its engine run has resumed (its request watch made, the snapshot read): a run still
		// waiting for its watch's consumer (the JetStream API refuses consumers after a quorum
		// loss) cannot act, and c.core is still the previous run's.
		// Nor can one whose informers are still catching up after an outage: the Node's deletion
		// reaches it only then (as for a Node deleted while they lagged 50 s).
		if s.leads(c) && c.running && c.core != nil && c.watch != nil && c.snapshot == nil && c.apiUp() && !c.relisting() &&
			!c.lagging() && c.conn.connected() && !c.paused() {
			leader = c
		}
	}
	if leader != nil && len(leader.nodeInfos()) == 0 {
		// Every Node gone: an empty view is no evidence to the Core (a failed list looks so).
		leader = nil
	}
	for _, name := range s.cluster.order {
		n := s.cluster.nodes[name]
		st, _ := s.statusOf(name).(nodedrain.NodeDrainStatus)
		underWay := st.Status == nodedrain.StatusStarting || st.Status == nodedrain.StatusCordoned || st.Status == nodedrain.StatusDrainRetrying
		if leader == nil || n.exists || !underWay || st.Decommission {
			delete(o.vanished, name)
			continue
		}
		run := fmt.Sprintf("%s/%d", leader.name, leader.inc)
		v, ok := o.vanished[name]
		switch {
		case !ok || v.run != run:
			o.vanished[name] = vanish{run: run, since: s.w.now}
		case s.w.now.Sub(v.since) > nodedrain.NodeGoneAfter+vanishSlack:
			s.violate("N2", "the drain of %s (%s) has held its slot for %s since its Node object went, while %s led",
				name, st.Status, s.w.now.Sub(v.since).Round(time.Second), leader.name)
			return
		}
	}
}
