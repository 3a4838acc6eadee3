package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// Lease timings, as coordinator.DefaultLeaderConfig.
const (
	leaseDuration = 10 * time.Second
	renewDeadline = 7 * time.Second
	retryPeriod   = 2 * time.Second
)

// coord is one coordinator replica: leader election over the model Lease, and while it leads,
// an engine around the real coordinator.Core whose actions it performs against the model.
type coord struct {
	// declaredReadAt is when the engine last read the requests afresh to confirm a declared
	// whole-cluster shutdown (Engine.confirmDeclared).
	declaredReadAt time.Time
	s              *Sim
	name           string
	alive          bool
	conn           *conn
	// leader: this replica believes it holds the Lease; lastRenew is its last successful renewal.
	leader    bool
	lastRenew time.Time
	// inc numbers engine runs: results of an earlier run are dropped.
	inc     int
	running bool
	core    *coordinator.Core
	watch   *watcher
	// pending holds request events that arrived during the watch's snapshot.
	snapshot     map[string]*nodedrain.NodeDrainRequest
	unpublished  map[string]bool
	unlanded     map[string]unlandedComplete // Engine.unlanded
	landed       coordinator.Landed          // Engine.landed
	fence        uint64                      // the revision the last status write was fenced on
	apiDownSince time.Time
	// apiBack is when this run last saw the API answer again after it had not for apiDownFor
	// (its Node counts wait a relist's time after it: relisting).
	apiBack    time.Time
	apiDownFor time.Duration
	opGen      map[string]int
	timerGen   int
	// frozenUntil: the process is paused (a long GC pause or a stalled VM) until then; held
	// are the events that came meanwhile, run in their order when it ends (thaw).
	frozenUntil time.Time
	// views is what the process's node informer shows of each Node's cordon record (nodeview.go).
	views   map[string][]recordView
	held    []heldEvent
	thawing bool
	// outage: the Lease was lost to an API outage and the run goes on in outage mode;
	// lastSeq is the status bucket's revision of this run's last write (its term record first).
	outage  bool
	lastSeq uint64
	// termRev is the revision of this run's term record (its statuses' Term), seq the run's
	// last Seq; statusWatch watches the status bucket for values to repair, and repairs are the
	// keys whose repair is still to be written (repair.go).
	termRev     uint64
	seq         int
	statusWatch *watcher
	repairs     map[string]bool
	// verdicts are the background policy checks of this engine run (see checkPolicy).
	verdicts map[string]coordinator.Verdict
	// pauseMidWrite: the next status write pauses the process this long after its checks
	// (CoordPauseMidWrite).
	pauseMidWrite time.Duration
	pausedAt      time.Time // when the last such pause began
	asked         time.Time // when the write landing now was asked for (publishAsked); zero: now
	// apiCut: this replica's own path to the Kubernetes API is cut while the cluster's is not
	// (CoordAPICut). heldVols and heldNodes are what its informers held when it lost the API,
	// which its gate reads while cut and until caughtUpAt (informerlag.go).
	apiCut     bool
	heldVols   []volumes.Volume
	heldNodes  map[string]volumes.NodeState
	cachesHeld bool // (with InformersBehind: informerlag.go)
	caughtUpAt time.Time
	factsQ     []factsView
	// lostAPI is the checker's record of the last time this replica lost the API (with
	// InformersBehind): when, what the API said then, and whether its informers were still
	// holding an older view (informerlag.go: loseAPI).
	lostAPI apiLoss
	// offset is the error of the replica's clock (CoordClockSkew).
	offset time.Duration
	// startedAt is when the process started (its informers listed then): Core.TermBegins.
	startedAt time.Time
}

func (s *Sim) newCoord(name string) *coord {
	c := &coord{s: s, name: name, alive: true, conn: &conn{b: s.bus, name: name, alive: true}, opGen: map[string]int{}, startedAt: s.w.now}
	s.w.after(s.w.between(0, time.Second), "campaign", c.campaign)
	return c
}

// later schedules f on this process: it does not run while the process is paused, and not at
// all if the process died or (gen >= 0) its engine run changed.
func (c *coord) later(d time.Duration, what string, inc int, f func()) {
	c.s.w.after(d, what, func() { c.run(what, inc, f) })
}

func (c *coord) run(what string, inc int, f func()) {
	if !c.alive || (inc >= 0 && (inc != c.inc || !c.running)) {
		return
	}
	if c.s.w.now.Before(c.frozenUntil) || len(c.held) > 0 {
		// Held in one queue, in the order they came: a pause extended by another one must
		// not run the events of its second part before those of its first (scenario
		// twice-paused-coordinator-runs-held-events-in-order: a withdrawal ran after the
		// request that followed it, which then looked withdrawn).
		c.held = append(c.held, heldEvent{what: what, inc: inc, f: f})
		if !c.thawing {
			c.thawing = true
			c.s.w.at(c.frozenUntil, "thaw", c.thaw)
		}
		return
	}
	f()
}

// heldEvent is an event that came while the process was paused.
type heldEvent struct {
	what string
	inc  int
	f    func()
}

// thaw runs the held events, in order, once the pause is over (later if it was extended).
func (c *coord) thaw() {
	if c.s.w.now.Before(c.frozenUntil) {
		c.s.w.at(c.frozenUntil, "thaw", c.thaw)
		return
	}
	c.thawing = false
	held := c.held
	c.held = nil
	for _, e := range held {
		c.run(e.what, e.inc, e.f)
	}
}

// campaign is leader election's loop: renew while leading, take the Lease when it is free or
// expired, give up leadership when renewal has failed for renewDeadline.
func (c *coord) campaign() {
	c.run("campaign", -1, func() {
		w, cl := c.s.w, c.s.cluster
		switch {
		case c.s.cfg.NoLeaderElection && !c.leader:
			c.leader, c.lastRenew = true, w.now
			w.logf("%s is the active coordinator (leader election off)", c.name)
			c.startEngine()
		case c.s.cfg.NoLeaderElection:
		case c.leader && c.apiUp() && cl.lease.holder == c.name:
			c.lastRenew, cl.lease.renewAt = w.now, w.now
		case c.leader && c.apiUp():
			c.loseLeadership("the Lease is held by " + cl.lease.holder)
		case c.outage && c.apiUp():
			c.leaveOutage("the Kubernetes API answers again")
		case c.leader && w.now.Sub(c.lastRenew) > renewDeadline:
			c.lapsed()
		case !c.leader && c.apiUp() && (cl.lease.holder == "" || cl.lease.holder == c.name || w.now.Sub(cl.lease.renewAt) > leaseDuration):
			cl.lease = lease{holder: c.name, renewAt: w.now}
			c.leader, c.lastRenew = true, w.now
			w.logf("%s becomes the active coordinator", c.name)
			c.startEngine()
		}
		c.s.w.after(retryPeriod, "campaign", c.campaign)
	})
}

func (c *coord) loseLeadership(why string) {
	c.s.w.logf("%s stops leading: %s", c.name, why)
	c.leader = false
	c.stopEngine()
}

func (c *coord) stopEngine() {
	if c.watch != nil {
		c.watch.stop()
		c.watch = nil
	}
	if c.statusWatch != nil {
		c.statusWatch.stop()
		c.statusWatch = nil
	}
	c.inc++
	c.running = false
}

// crash kills the process; the Lease stays until it expires.
func (c *coord) crash() {
	if !c.alive {
		return
	}
	c.s.w.logf("%s crashes", c.name)
	c.stopEngine()
	c.alive, c.leader, c.outage, c.conn.alive = false, false, false, false
	c.views = nil                                                  // (its informer with it)
	c.caughtUpAt, c.factsQ, c.cachesHeld = time.Time{}, nil, false // (a new process lists afresh)
}

func (c *coord) restart() {
	if c.alive {
		return
	}
	c.s.w.logf("%s starts", c.name)
	c.alive, c.conn.alive, c.startedAt = true, true, c.s.w.now
	c.s.w.after(c.s.w.between(0, time.Second), "campaign", c.campaign)
}

// startEngine starts an engine run (coordinator.Engine.Run): watch the requests, read the
// statuses and the nodes, resume every drain. A run that cannot start is retried in 2 s.
func (c *coord) startEngine() {
	c.inc++
	c.running = true
	inc := c.inc
	if !c.conn.connected() {
		c.retryEngine("the bus is unreachable")
		return
	}
	if c.outage { // Engine.Run restarted in outage mode waits for the mode to end
		return
	}
	if !c.stillLeading() { // Engine.Run: no term record without a Lease still valid (lapsed: the
		return // run waits in outage mode, or has stopped)
	}
	if c.s.bus.writeFails() {
		c.retryEngine("writing its term record: the stream has no leader")
		return
	}
	c.claimTerm()
	if c.s.bus.ackLost() {
		c.retryEngine("writing its term record: its ack was lost")
		return
	}
	c.snapshot = map[string]*nodedrain.NodeDrainRequest{}
	c.watch = c.s.bus.watch(c.conn, bucketRequests, "", func(key string, r revision) {
		c.run("request event", inc, func() { c.requestEvent(key, r) })
	}, func() {
		c.run("request snapshot", inc, c.resume)
	})
}

func (c *coord) retryEngine(why string) {
	c.s.w.logf("%s: engine cannot start (%s); retrying in 2s", c.name, why)
	c.stopEngine()
	c.running = true // KeepRunning goes on while leading
	c.later(2*time.Second, "engine restart", c.inc, func() { c.running = false; c.startEngine() })
}

func (c *coord) requestEvent(key string, r revision) {
	if c.snapshot != nil {
		if r.val == nil {
			delete(c.snapshot, key)
		} else {
			req := r.val.(nodedrain.NodeDrainRequest)
			c.snapshot[key] = &req
		}
		return
	}
	ev := nodedrain.EvRequest{}
	if r.val != nil {
		req := r.val.(nodedrain.NodeDrainRequest)
		ev.Request = &req
	}
	c.act(c.core.Handle(key, ev, c.now()))
	c.afterEvents()
}

func (c *coord) resume() {
	s := c.s
	if !c.conn.connected() {
		c.retryEngine("reading statuses: the bus is unreachable")
		return
	}
	if !c.apiUp() {
		c.retryEngine("node informer cannot sync: the API is unreachable")
		return
	}
	if s.bus.noLeader() { // (statusKeys: the stream's info)
		c.retryEngine("listing the status keys: the stream has no leader")
		return
	}
	in := coordinator.ResumeInput{Requests: c.snapshot, Statuses: map[string]nodedrain.NodeDrainStatus{}, CordonedByUs: map[string]bool{}}
	c.snapshot = nil
	forged := map[string]uint64{}
	for _, key := range slices.Sorted(maps.Keys(s.bus.buckets[bucketStatus].keys)) {
		if key == nodedrain.TermKey {
			continue
		}
		st, ok, rev, read := s.resumeStatus(key)
		if !read {
			c.retryEngine("reading the status of " + key + ": no current replica answered, nor the stream's leader")
			return
		}
		if ok {
			in.Statuses[key] = st
		}
		if rev != 0 {
			forged[key] = rev
		}
	}
	if len(forged) > 0 && s.bus.consumersRefused() { // (lastOwnStatus reads the key's history)
		c.retryEngine("reading a forged key's history: the JetStream API refuses consumers")
		return
	}
	for _, name := range s.cluster.order {
		n := s.cluster.nodes[name]
		if n.exists && n.annotation != "" {
			in.CordonedByUs[n.name] = true
		}
		if n.evictionRequested { // the gate's Held
			in.Held = append(in.Held, n.name)
		}
	}
	c.core = coordinator.NewCore(s.cfg.Policy, s.cfg.MaxConcurrent)
	c.core.SetStaleHolderTimeout(s.cfg.StaleHolderTimeout)
	c.core.SetAllowDecommission(true)
	c.core.SetInformerRelist(s.cfg.InformerRelist)
	c.core.TermBegins(c.now(), c.local(c.startedAt))
	c.verdicts = map[string]coordinator.Verdict{}
	s.resumes++
	c.unpublished, c.apiDownSince, c.opGen, c.repairs = map[string]bool{}, time.Time{}, map[string]int{}, map[string]bool{}
	c.unlanded, c.landed = map[string]unlandedComplete{}, coordinator.Landed{}
	for _, st := range in.Statuses {
		c.landed.Note(st)
	}
	c.apiBack, c.apiDownFor = time.Time{}, 0
	s.w.logf("%s resumes: %d request(s), %d status(es), %d node(s) cordoned by edgedrain", c.name, len(in.Requests), len(in.Statuses), len(in.CordonedByUs))
	c.act(c.core.Resume(in, c.now()))
	for _, key := range slices.Sorted(maps.Keys(forged)) { // repaired once resumed
		c.repair(key, forged[key])
	}
	c.afterEvents()
	inc := c.inc
	var tick func()
	tick = func() {
		c.tick()
		c.later(time.Second, "engine tick", inc, tick)
	}
	c.later(time.Second, "engine tick", inc, tick)
	c.watchStatuses(inc)
	c.checkPolicy(inc)
	c.inform(inc)
}

// inform delivers the gate's change signals (Engine's gate watch) at random times, as long as
// the engine run lasts.
func (c *coord) inform(inc int) {
	mean := c.s.cfg.InformerChanges
	if mean <= 0 {
		return
	}
	c.later(c.s.w.between(0, 2*mean), "volume change seen", inc, func() {
		actions, _ := c.core.Changed(c.now())
		c.act(actions)
		c.afterEvents()
		c.inform(inc)
	})
}

// nodeInfos is admission's view of the nodes (the informer's cache; frozen while the API is down).
func (c *coord) nodeInfos() []nodedrain.NodeInfo {
	_, states := c.facts()
	var out []nodedrain.NodeInfo
	for _, name := range c.s.cluster.order {
		if st, ok := states[name]; ok && st.Exists {
			info := nodedrain.NodeInfo{Name: name, Ready: st.Ready, Schedulable: !st.Cordoned,
				Priority: c.s.maint.priority[name], Domain: c.s.maint.domain[name], Unmanaged: c.s.unmanaged[name]}
			if c.apiUp() {
				info.CordonRecord, info.CordonOurs, info.ResourceVersion = c.recordSeen(c.s.cluster.nodes[name])
			}
			if !st.Ready {
				info.NotReadySince = c.s.notReadySinceOf(name)
			}
			out = append(out, info)
		}
	}
	return out
}

func (c *coord) afterEvents() {
	pol := c.holds()
	if c.s.cfg.VolumePolicy == volumes.PolicyWait { // the volume gate's Peers
		pol.Peers = func(node string) []nodedrain.VolumePeers {
			vols, nodes := c.s.cluster.facts()
			return volumes.Peers(vols, node, func(n string) bool { return nodes[n].Exists })
		}
	}
	actions, ev := c.core.Admit(c.nodeInfos(), pol, c.now())
	if ev.ConfirmDeclared {
		c.confirmDeclared()
	}
	if ev.Changed {
		c.s.w.logf("%s: whole-cluster shutdown = %v", c.name, ev.WholeCluster)
	}
	c.act(actions)
	if next := c.core.NextTimer(); !next.IsZero() {
		c.timerGen++
		gen := c.timerGen
		c.later(next.Sub(c.now()), "engine timer", c.inc, func() {
			if gen == c.timerGen {
				c.act(c.core.Timers(c.now()))
				c.afterEvents()
			}
		})
	}
}

func (c *coord) tick() {
	s := c.s
	for _, node := range slices.Sorted(maps.Keys(c.unpublished)) {
		if d, ok := c.core.Drain(node); ok {
			c.publishOne(d.Status)
		}
	}
	c.retryRepairs()
	switch {
	case c.apiUp():
		if !c.apiDownSince.IsZero() {
			c.apiBack, c.apiDownFor = s.w.now, s.w.now.Sub(c.apiDownSince)
			c.core.APIAnswered(c.local(s.w.now))
		}
		c.apiDownSince = time.Time{}
	case c.apiDownSince.IsZero():
		c.apiDownSince = s.w.now
	}
	c.core.SetAPIUnreachable(c.local(c.apiDownSince))
	if t := s.cfg.APIUnreachableTimeout; t > 0 && !c.apiDownSince.IsZero() && s.w.now.Sub(c.apiDownSince) >= t {
		view := func(node string, after bool) (coordinator.GateResult, error) {
			return c.gateFor(node, coordinator.GateOptions{WholeCluster: c.core.WholeCluster()}), nil
		}
		cordon := func(node string) (found, cordoned bool, uid string) { // the node informer's last view
			_, states := c.facts()
			st, ok := states[node]
			return ok && st.Exists, st.Cordoned, ""
		}
		c.act(c.core.APIUnreachable(s.w.now.Sub(c.apiDownSince), view, cordon, c.now()))
	}
	c.act(c.core.Timers(c.now()))
	c.afterEvents()
}

func (c *coord) act(actions []coordinator.NodeAction) {
	for i, na := range actions {
		if c.paused() { // the rest waits for the end of a pause that began among them
			rest := actions[i:]
			c.hold("actions", func() { c.act(rest) })
			return
		}
		if !c.stillLeading() && !c.outage { // Engine.mayAct
			return
		}
		if na.Release {
			c.release(na.Node)
			continue
		}
		switch a := na.Action.(type) {
		case nodedrain.Publish:
			c.publish(a.Status)
		case nodedrain.Start:
			c.start(na.Node, na.RequestID, a)
		case nodedrain.Cancel:
			c.opGen[na.Node]++
		case nodedrain.Outcome:
		case nodedrain.ReturnEnded:
			c.s.w.logf("%s: the return gate of %s ended (%s) after %s", c.name, na.Node, a.Result, a.Waited)
			c.s.policyCount["return gate "+a.Result]++
		case nodedrain.SlotReleased:
			c.s.w.logf("%s: %s releases its slot: %s", c.name, na.Node, a.Reason)
			c.s.policyCount["stale release"]++
		}
	}
}

// onReply runs f as this process's handling of an API reply: not while it is paused, not
// after its engine run ended.
func (c *coord) onReply(inc int, f func(error)) func(error) {
	return func(err error) { c.run("api reply", inc, func() { f(err) }) }
}

// stillLeading is the engine's lease guard (Config.StillLeading): an engine whose last renewal
// is older than the renew deadline acts no more and stops; another replica may hold the Lease.
func (c *coord) stillLeading() bool {
	if c.leaseValid() {
		return true
	}
	if c.running && c.leader {
		c.lapsed()
	}
	return false
}

// leaseValid is the lease check alone (coordinator's stillLeading): the last renewal is within
// the renew deadline, or leader election is off.
func (c *coord) leaseValid() bool {
	return c.s.cfg.NoLeaderElection || (c.leader && c.s.w.now.Sub(c.lastRenew) < renewDeadline)
}

// publish writes a status (the engine's loop waits for the reply: here it is immediate), after
// any that failed to publish, as the engine does.
func (c *coord) publish(st nodedrain.NodeDrainStatus) {
	for _, node := range slices.Sorted(maps.Keys(c.unpublished)) {
		if d, ok := c.core.Drain(node); ok && node != st.Node {
			c.publishOne(d.Status)
		}
	}
	c.publishOne(st)
}

func (c *coord) publishOne(st nodedrain.NodeDrainStatus) { c.publishAsked(st, c.s.w.now) }

// publishAsked is publishOne of a write asked for at asked: one held by a pause was decided
// before it, on checks made before it, and S2 judges it as of then (as a write paused after its
// checks, publishLate: what changed meanwhile is the residual of any check before an act).
func (c *coord) publishAsked(st nodedrain.NodeDrainStatus, asked time.Time) {
	s := c.s
	if c.paused() { // (a write asked for by what ran on after a pause began: it waits too)
		c.hold("publish", func() { c.publishAsked(st, asked) })
		return
	}
	leading := c.stillLeading()
	if !leading && !c.outage {
		return
	}
	if !c.conn.connected() || (s.bus.lossy && s.w.chance(0.1)) || s.bus.writeFails() {
		c.failedWrite(st.Node)
		if st.Status == nodedrain.StatusComplete { // as the engine: check again first
			c.noteUnlanded(st, c.lastSeq)
			c.act(c.core.Handle(st.Node, nodedrain.EvPublishFailed{}, c.now()))
		}
		return
	}
	st = c.sign(st)
	if d := c.pauseMidWrite; d > 0 {
		c.pauseMidWrite = 0
		c.publishLate(st, d)
		return
	}
	c.asked = asked
	seq, refused := c.land(st, c.lastSeq, false)
	c.asked = time.Time{}
	c.written(st, seq, refused)
}

// land is a status write reaching the bus: fenced as every status write (Engine.publishOne,
// PublishIfLast), it is refused unless the bucket still ends at last. late: the writer paused
// after its checks (S1 then asks only that no other coordinator took over meanwhile).
func (c *coord) land(st nodedrain.NodeDrainStatus, last uint64, late bool) (seq uint64, refused bool) {
	s := c.s
	c.fence = last
	if s.bus.buckets[bucketStatus].last != last {
		return 0, true
	}
	prev, _ := s.statusOf(st.Node).(nodedrain.NodeDrainStatus)
	seq = s.bus.write(bucketStatus, st.Node, st, c.name)
	s.onStatusPublished(c, prev, st, late)
	return seq, false
}

// written is a status write's reply reaching the engine.
func (c *coord) written(st nodedrain.NodeDrainStatus, seq uint64, refused bool) {
	s := c.s
	if refused {
		c.refused(st)
		return
	}
	if s.bus.lossy && s.w.chance(0.1) || s.bus.ackLost() {
		c.failedWrite(st.Node)                     // written, but the reply was lost: written again
		if st.Status == nodedrain.StatusComplete { // as the engine, which sees an error
			c.noteUnlanded(st, c.fence)
			c.act(c.core.Handle(st.Node, nodedrain.EvPublishFailed{}, c.now()))
		}
		return
	}
	c.lastSeq = max(c.lastSeq, seq)
	delete(c.unpublished, st.Node)
	c.landed.Note(st)
	c.act(c.core.Handle(st.Node, nodedrain.EvPublished{Status: st.Status, Holds: st.HoldsSlot()}, c.now()))
	c.completesNotLanded(st, c.fence)
	if (c.stillLeading() || c.outage) && c.core.Announce(st) { // Engine.announce
		s.onEvent(c, st)
	}
}

// refused is Engine.fenceRefused: another coordinator's term record since this run's stops the
// run; a write no coordinator made (a forger's) is stepped over, the status published again.
func (c *coord) refused(st nodedrain.NodeDrainStatus) {
	s := c.s
	// Engine.fenceRefused: LastRevision (the stream's info) failed, or answered behind the
	// revision the refusal names: written again at the next try.
	if last, ok := s.bus.streamInfo(bucketStatus); !ok || last < s.bus.buckets[bucketStatus].last {
		c.failedWrite(st.Node)
		if st.Status == nodedrain.StatusComplete {
			c.noteUnlanded(st, c.fence)
			c.act(c.core.Handle(st.Node, nodedrain.EvPublishFailed{}, s.w.now))
		}
		return
	}
	over, read := c.termTakenOver()
	if !read { // Engine.fenceRefused: the term record could not be read
		c.failedWrite(st.Node)
		if st.Status == nodedrain.StatusComplete {
			c.noteUnlanded(st, c.fence)
			c.act(c.core.Handle(st.Node, nodedrain.EvPublishFailed{}, s.w.now))
		}
		return
	}
	if over {
		c.fenced(st)
		return
	}
	stale := !c.landed.MayRewrite(st, c.now())
	then := "writing again after it"
	if stale {
		then = "not written again: the COMPLETE rests on checks a pause made old"
	}
	s.w.logf("%s: %s %s refused, a value no coordinator wrote landed since its last write; %s", c.name, st.Node, st.Status, then)
	c.lastSeq = s.bus.buckets[bucketStatus].last
	if !c.stillLeading() && !c.outage { // Engine.mayAct: the refusal came late, the Lease lapsed
		return
	}
	// Once more at once (Engine.publishOne), signed anew, unless it is a COMPLETE on checks a
	// pause made old (the drain checks again first); a second refusal waits for the tick.
	if !stale {
		if seq, again := c.land(c.sign(st), c.lastSeq, false); !again {
			c.written(st, seq, false)
			return
		}
	}
	c.failedWrite(st.Node)
	if st.Status == nodedrain.StatusComplete {
		c.noteUnlanded(st, c.fence)
		c.act(c.core.Handle(st.Node, nodedrain.EvPublishFailed{}, c.now()))
	}
}

// release asks the gate to undo its work for node (withdraw the Longhorn eviction request).
// A failed release is retried (as the executor does) until it succeeds or the run ends.
func (c *coord) release(node string) {
	s := c.s
	inc := c.inc
	if !c.stillLeading() { // as the executor: no write without the Lease (outage mode); later
		c.later(2*time.Second, "release retry", inc, func() { c.release(node) })
		return
	}
	c.apiOp("release "+node, true, func() error {
		if n, ok := s.cluster.nodes[node]; ok {
			n.evictionRequested = false
		}
		return nil
	}, func(err error) {
		c.run("release reply", inc, func() {
			if err != nil {
				s.w.logf("%s: releasing the volume gate's work on %s failed: %v; retrying", c.name, node, err)
				c.later(2*time.Second, "release retry", inc, func() { c.release(node) })
			}
		})
	})
}

// confirmDeclared is Engine.confirmDeclared: every node's request read afresh (one read after
// another, each a round trip) must match the Core's before admission acts on a declared
// whole-cluster shutdown; then admission runs again.
func (c *coord) confirmDeclared() {
	s := c.s
	if s.w.now.Sub(c.declaredReadAt) < 2*time.Second {
		return
	}
	c.declaredReadAt = s.w.now
	keys := c.core.Nodes()
	for _, name := range s.cluster.order {
		if n := s.cluster.nodes[name]; n.exists && !slices.Contains(keys, name) {
			keys = append(keys, name)
		}
	}
	// (A fixed round trip: a draw would change every later draw of the run.)
	c.later(5*time.Millisecond, "confirm declared", c.inc, func() {
		if !c.conn.connected() || s.bus.lossy {
			return
		}
		for _, key := range keys {
			id := ""
			if r, ok := s.bus.value(bucketRequests, key).(nodedrain.NodeDrainRequest); ok {
				id = r.RequestID
			}
			if d, _ := c.core.Drain(key); (d.Request == nil && id != "") || (d.Request != nil && d.Request.RequestID != id) {
				return
			}
		}
		c.core.ConfirmDeclared()
		c.afterEvents()
	})
}

// unlandedComplete is a COMPLETE whose publication failed (Engine's).
type unlandedComplete struct {
	requestID string
	fence     uint64
}

// noteUnlanded is the engine's noteUnlanded: a failed COMPLETE is recorded only while it is the
// only one of its request that may have landed.
func (c *coord) noteUnlanded(st nodedrain.NodeDrainStatus, fence uint64) {
	d, _ := c.core.Drain(st.Node)
	u, tracked := c.unlanded[st.Node]
	switch {
	case !d.Status.CompleteSent:
		c.unlanded[st.Node] = unlandedComplete{requestID: st.RequestID, fence: fence}
	case tracked && u.requestID == st.RequestID && u.fence == fence:
	default:
		delete(c.unlanded, st.Node)
	}
}

// completesNotLanded is Engine.completesNotLanded: after a status write that landed fenced on
// fence, a failed COMPLETE fenced on the same revision never landed.
func (c *coord) completesNotLanded(written nodedrain.NodeDrainStatus, fence uint64) {
	if written.Status == nodedrain.StatusComplete {
		delete(c.unlanded, written.Node)
	}
	for _, node := range slices.Sorted(maps.Keys(c.unlanded)) {
		u := c.unlanded[node]
		delete(c.unlanded, node)
		if u.fence == fence {
			c.act(c.core.Handle(node, nodedrain.EvCompleteNotLanded{RequestID: u.requestID}, c.now()))
		}
	}
}

// failedWrite is the engine's failed status write of node's key: published again later, and its
// COMPLETE unknown on the bus (Landed.Forget).
func (c *coord) failedWrite(node string) {
	c.unpublished[node] = true
	c.landed.Forget(node)
}
