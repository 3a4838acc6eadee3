package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// Config is one simulated cluster and its settings.
type Config struct {
	Nodes        int
	Coordinators int
	// NoLeaderElection runs one coordinator that is always active (--leader-elect=false): the
	// API-unreachable path can only fire then.
	NoLeaderElection bool
	MaxConcurrent    int
	Policy           nodedrain.Limits
	AgentPolicy      agent.Limits
	VolumePolicy     volumes.Policy
	// InformerChanges is the mean time between the change signals the gate's informers give the
	// coordinator (nodedrain.EvChanged, Engine's gate watch); zero: none, the gates are asked again
	// only on their timers. They come at random times: safety must not rest on when they come.
	InformerChanges time.Duration
	// Decommission adds one node decommission to random plans (agent request decommission).
	Decommission bool
	// APIUnreachableTimeout as the coordinator's flag (shortened so runs reach it).
	APIUnreachableTimeout time.Duration
	// Volumes is how many Longhorn volumes there are, each with Replicas replicas.
	Volumes, Replicas int
	// Groups is how many ReplicaSets there are, each with PodsPerGroup pods and a PDB allowing
	// one disruption.
	Groups, PodsPerGroup int
	// CommandFailure is the probability that an operation's command fails.
	CommandFailure float64
	// Active is how long faults and triggers happen; Quiet is the fault-free time after it
	// within which every request must end (L1).
	Active, Quiet time.Duration
	// Maintenance turns the maintenance policy on: windows that open and close, blockers that
	// come and go, node priorities (DESIGN §9).
	Maintenance bool
	// Domains spreads the nodes over this many failure domains (0: none).
	Domains int
	// StaleHolderTimeout as the coordinator's flag (0: never).
	StaleHolderTimeout time.Duration
	// Preflight as the coordinator's flag (with Maintenance): the prediction is the real volume
	// rules' answer before eviction.
	Preflight coordinator.Preflight
	// Forgers adds status forgers to random plans (forger.go).
	Forgers bool
	// UncheckedDeliveries: an agent takes a watch delivery as delivered (its copy flag seen, as
	// if its checked read gave that same revision) instead of what a checked read of the key
	// gives; regressions found before agents read after each delivery keep their schedules.
	UncheckedDeliveries bool
	// NoOutcomeFile runs the agents with --outcome-file off: an agent restarted while its
	// update ran has only the bus to tell it the update succeeded (regressions of that path).
	NoOutcomeFile bool
	// ProcessPauses adds to random plans coordinators paused between the checks that allow a
	// status write and the write (coordfaults.go).
	ProcessPauses bool
	// AgentFaults adds agent faults to random plans (agentfaults.go): pauses, disk faults,
	// NOTSUPPORTED override files, agents cut off or paused while their node is NotReady.
	AgentFaults bool
	// Operators adds to random plans operators acting on Node objects: recordons, the
	// keep-cordoned annotation, deletions (operators.go).
	Operators bool
	// OperatorBus: an operator's bus identity (edgedrainctl's, or a stolen one) puts requests of
	// its own: a made-up one, or a node's earlier request replayed (operatorbus.go).
	OperatorBus bool
	// UnkindPods adds to random plans pods that land on a cordoned node: created with
	// spec.nodeName, bound by a scheduler that decided before the cordon, a DaemonSet's
	// (evictor.go).
	UnkindPods bool
	// LateWrites adds to random plans API writes that time out at the client and land late, and
	// writes whose replies are lost (apiwrites.go).
	LateWrites bool
	// ReplicatedBus adds to random plans the faults of a replicated NATS cluster: followers
	// that lag and answer direct gets, leader elections, quorum losses after which the
	// JetStream API refuses consumers for a while (replicas.go).
	ReplicatedBus bool
	// Clocks adds clock faults to random plans (clocks.go): nodes' and coordinators' clocks off,
	// nodes without a real-time clock, the control plane's clock off.
	Clocks bool
	// Selector adds --node-selector changes to random plans (selector.go): nodes the coordinator
	// does not manage, nodes that stop or start matching mid-drain.
	Selector bool
	// TypedReboots adds to random plans reboots an administrator types on a node
	// (typedreboot.go); CatchShutdown says the agents hold logind's delay lock and catch them,
	// for at most InhibitDelay.
	TypedReboots  bool
	CatchShutdown bool
	InhibitDelay  time.Duration
	// InformerRelist is the coordinators' Config.InformerRelist (zero: its default; negative:
	// the API-unreachable rule never waits for the informers, for regressions found before it did
	// whose caches never lag).
	InformerRelist time.Duration
	// ShutdownJobFailures is the share of shutdowns let through whose job logind cannot start:
	// the machine stays up and logind calls the shutdown off (typedreboot.go).
	ShutdownJobFailures float64
	// InformersBehind adds to random plans informers as late as real ones (informerlag.go):
	// changes delivered late, and a catch-up after the API answers again that takes a
	// reflector's backoff.
	InformersBehind bool
}

// simPolicy is a coordinator policy with DESIGN's attempt counts and short delays.
func simPolicy() nodedrain.Limits {
	return nodedrain.Limits{CordonAttempts: 10, CordonBackoff: time.Second, CordonBackoffMax: 10 * time.Second,
		DrainAttempts: 5, DrainAttemptTimeout: 20 * time.Second, DrainBackoff: 2 * time.Second, DrainBackoffMax: 10 * time.Second,
		GateRecheck: 2 * time.Second, GateReact: 50 * time.Millisecond, UncordonRetry: 2 * time.Second}
}

func simAgentPolicy() agent.Limits {
	return agent.Limits{DrainRetryBackoff: 20 * time.Second, DrainRetryBackoffMax: 2 * time.Minute,
		CommandRetryBackoff: 5 * time.Second, CommandRetryBackoffMax: time.Minute, RebootTimeout: 2 * time.Minute,
		BusRetry: 2 * time.Second}
}

// Violation is a broken invariant.
type Violation struct {
	Invariant string
	Message   string
	At        time.Duration
}

func (v Violation) Error() string {
	return fmt.Sprintf("%s violated at t=%.3fs: %s", v.Invariant, v.At.Seconds(), v.Message)
}

// Sim is one run.
type Sim struct {
	healthKey map[string]healthKey // see healthKeys
	cfg       Config
	w         *world
	bus       *bus
	cluster   *cluster
	coords    []*coord
	agents    []*agentProc
	plan      Plan

	violation *Violation
	reqSeq    int
	// published maps a request ID to the statuses published for it by a coordinator that held
	// the Lease at the time.
	published map[string][]nodedrain.DrainStatus
	// reboots counts machine take-downs per request.
	reboots         map[string]int
	cordons, evicts map[string]int // attempts per request's drain cycle (cycleKey)
	evictions       map[string]map[int]bool
	cycles          map[string]int
	// downDeclared lists the requests whose node went down under a declared shutdown.
	downDeclared map[string]bool
	// decommissioned maps a node whose decommission's COMPLETE was published to its request.
	decommissioned map[string]string
	// resumes counts engine runs that resumed drains (each may redo one attempt under way).
	resumes int
	// term is the last term record written; outages and fenced count outage modes entered and
	// fenced writes refused.
	term            term
	outages, fenced int
	// events is the sequence of statuses announced with an Event, per node.
	events map[string][]nodedrain.DrainStatus
	// moved marks a node whose published status differed from its last Event since that Event:
	// the next Event, even of the same status, is a new transition (the one in between may have
	// gone without an Event: its write's reply was lost and the coordinator stopped).
	moved map[string]bool
	// updatesOK is when each node's update command last succeeded.
	updatesOK map[string]time.Time
	// strandedSince is when a node started to carry edgedrain's cordon without a live request.
	strandedSince map[string]time.Time
	// lastCheck is when check last ran, and busOutAtLastCheck whether the bus was out then (down,
	// or refusing consumers): S4's count pauses between two checks while no coordinator can
	// learn of a withdrawal.
	lastCheck         time.Time
	busOutAtLastCheck bool
	// cancelled records, per "node/operation", the sentinel time of an operation an operator withdrew.
	cancelled map[string]int64
	// withdrawn lists the requests an operator withdrew (their nodes' slots are released).
	withdrawn map[string]bool
	// opRequests numbers the requests an operator's bus identity made up (operatorbus.go).
	opRequests int
	// quiet is set once the active phase is over.
	quiet bool
	// states counts distinct (coordinator status, agent phase) combinations reached.
	states map[simState]bool
	// maint is the maintenance policy's model; hist records when nodes were blocked,
	// unhealthy or Ready and windows closed (for the checks of the decisions taken then);
	// notReadySince is what the node informer says of NotReady nodes.
	maint       *maint
	policyCount map[string]int
	// lastReq and backAt follow each node's request for R3; completeAt is when each request's
	// first COMPLETE was decided.
	lastReq    map[string]nodedrain.NodeDrainRequest
	backAt     map[string]time.Time
	completeAt map[string]time.Time
	// clearedAt is when each request's first COMPLETE or NOTSUPPORTED was decided (R2).
	clearedAt     map[string]time.Time
	hist          history
	notReadySince map[string]time.Time
	// frng draws the forger's choices and the coordinator's status watch lags: a stream of its
	// own, so that runs without forgeries keep the schedules they had before it.
	frng   *rand.Rand
	forger *forger
	// repairs counts values the coordinators repaired; refusals statuses the guards refused;
	// copiesTaken server copies that reached agent.Step through a failed checked read.
	repairs, refusals, copiesTaken int
	// ops is the state of the operators' faults and their oracles (operators.go).
	ops *operators
	// urng draws what evictor.go's and apiwrites.go's faults do (cluster.urng).
	urng *rand.Rand
	// vrng draws the delays of the coordinators' node views (nodeview.go): a stream of its own,
	// so that the other schedules stay as they were.
	vrng *rand.Rand
	// lrng draws when the coordinators' informers catch up with the API (informerlag.go).
	lrng *rand.Rand
	// jrng draws which shutdowns logind calls off after their release (typedreboot.go).
	jrng *rand.Rand
	// lateInformersUntil ends InformersBehind.
	lateInformersUntil time.Time
	// clocks are the nodes' wall clocks, cpOffset the node lifecycle controller's error, truth
	// the true times of the times coordinators wrote (clocks.go).
	clocks   map[string]*nodeClock
	cpOffset time.Duration
	truth    map[int64]time.Time
	// unmanaged lists the nodes not matching --node-selector now (selector.go).
	unmanaged map[string]bool
}

// simState is one combination Sim.check counts, a struct rather than a formatted string: it is
// recorded for every node after every event.
type simState struct {
	status                 nodedrain.DrainStatus
	phase                  agent.Phase
	live, cordoned, nodeUp bool
}

func (k simState) String() string {
	return fmt.Sprintf("%d/%s/%v/%v/%v", k.status, k.phase, k.live, k.cordoned, k.nodeUp)
}

// newSim builds the cluster: nodes with agents, coordinators, ReplicaSets and volumes.
func newSim(cfg Config, seed uint64, plan Plan) *Sim {
	w := &world{now: epoch, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	s := &Sim{cfg: cfg, w: w, bus: newBus(w), cluster: newCluster(w, cfg.Nodes), plan: plan,
		published: map[string][]nodedrain.DrainStatus{}, reboots: map[string]int{},
		cordons: map[string]int{}, evicts: map[string]int{},
		evictions: map[string]map[int]bool{}, cycles: map[string]int{}, events: map[string][]nodedrain.DrainStatus{}, moved: map[string]bool{},
		updatesOK: map[string]time.Time{}, strandedSince: map[string]time.Time{}, states: map[simState]bool{}, cancelled: map[string]int64{}, withdrawn: map[string]bool{}, downDeclared: map[string]bool{},
		decommissioned: map[string]string{}}
	s.hist, s.notReadySince, s.policyCount = history{}, map[string]time.Time{}, map[string]int{}
	s.lastReq, s.backAt, s.completeAt = map[string]nodedrain.NodeDrainRequest{}, map[string]time.Time{}, map[string]time.Time{}
	s.clearedAt = map[string]time.Time{}
	s.frng, s.forger = rand.New(rand.NewPCG(seed, 0xf0a9e)), newForger(s)
	s.cluster.urng = rand.New(rand.NewPCG(seed, 0x0b1d))
	s.urng = s.cluster.urng
	s.vrng = rand.New(rand.NewPCG(seed, 0x71e3))
	s.lrng = rand.New(rand.NewPCG(seed, 0x1a9))
	s.jrng = rand.New(rand.NewPCG(seed, 0x10b))
	s.bus.onWrite = s.forger.observe
	s.bus.rep.rng = rand.New(rand.NewPCG(seed, 0x4e91cb))
	cl := s.cluster
	for g := range cfg.Groups {
		grp := &group{name: fmt.Sprintf("app%d", g), replicas: cfg.PodsPerGroup, minAvailable: cfg.PodsPerGroup - 1}
		cl.groups = append(cl.groups, grp)
		for range cfg.PodsPerGroup {
			cl.place(grp)
		}
	}
	for v := range cfg.Volumes {
		vol := &volume{name: fmt.Sprintf("vol%d", v), desired: cfg.Replicas}
		for i := range cfg.Replicas {
			n := cl.order[(v+i)%len(cl.order)]
			vol.nextID++
			vol.replicas = append(vol.replicas, &replica{name: fmt.Sprintf("%s-r%d", vol.name, vol.nextID), node: n, intact: true, running: true, progress: 100})
		}
		cl.vols = append(cl.vols, vol)
	}
	s.maint = newMaint(s, seed)
	for i := range cfg.Coordinators {
		s.coords = append(s.coords, s.newCoord(fmt.Sprintf("coordinator-%d", i)))
	}
	for _, name := range cl.order {
		s.agents = append(s.agents, s.newAgent(cl.nodes[name]))
	}
	var longhorn func()
	longhorn = func() {
		cl.longhorn()
		w.after(time.Second, "longhorn", longhorn)
	}
	w.after(time.Second, "longhorn", longhorn)
	for _, f := range plan {
		w.at(epoch.Add(f.At), f.String(), func() { s.apply(f) })
	}
	w.at(epoch.Add(cfg.Active), "quiet", func() { s.heal() })
	return s
}

func (s *Sim) newRequestID(node string) string {
	s.reqSeq++
	return fmt.Sprintf("%s-req%d", node, s.reqSeq)
}

func (s *Sim) violate(inv, format string, args ...any) {
	if s.violation != nil {
		return
	}
	v := Violation{Invariant: inv, Message: fmt.Sprintf(format, args...), At: s.w.now.Sub(epoch)}
	s.violation = &v
	s.w.logf("VIOLATION %s: %s", inv, v.Message)
	s.w.stopped = true
}

// gate asks the real volume rules about node, on the facts the gate's caches hold.
func (s *Sim) gate(node string, whole bool) coordinator.GateResult {
	return s.gateFor(node, coordinator.GateOptions{WholeCluster: whole})
}

// gateFor is gate for a drain with opts: a decommission evicts whatever the policy.
func (s *Sim) gateFor(node string, opts coordinator.GateOptions) coordinator.GateResult {
	vols, states := s.cluster.facts()
	return s.gateOn(vols, states, node, opts)
}

// gateOn is gateFor on the facts a gate's informers hold.
func (s *Sim) gateOn(vols []volumes.Volume, states map[string]volumes.NodeState, node string, opts coordinator.GateOptions) coordinator.GateResult {
	whole, policy := opts.WholeCluster, s.volumePolicy(opts)
	view := &volumes.View{Node: node, WholeCluster: whole, Policy: policy, Nodes: states}
	var r coordinator.GateResult
	findings := volumes.Evaluate(vols, view, volumes.DefaultRules())
	for _, f := range findings {
		r.Blockers = append(r.Blockers, f.Blocker())
	}
	r.Safe = !volumes.Blocks(findings) || policy == volumes.PolicyAllow
	return r
}

// volumePolicy is the gate's policy for a drain with opts (volumes.Gate's policyFor).
func (s *Sim) volumePolicy(opts coordinator.GateOptions) volumes.Policy {
	if opts.Decommission {
		return volumes.PolicyEvict
	}
	return s.cfg.VolumePolicy
}

func (s *Sim) hasReplicas(node string) bool {
	for _, v := range s.cluster.vols {
		for _, r := range v.replicas {
			if r.node == node {
				return true
			}
		}
	}
	return false
}

func (s *Sim) leads(c *coord) bool {
	if s.cfg.NoLeaderElection {
		return c.alive && c.leader
	}
	if c.alive && c.outage {
		// In outage mode: only while its term is the last one written.
		return s.term == term{coord: c.name, inc: c.inc}
	}
	return c.alive && c.leader && s.cluster.lease.holder == c.name && s.w.now.Sub(s.cluster.lease.renewAt) <= leaseDuration
}

// goDown takes a node's machine down for the agent's command, and brings it back later.
func (s *Sim) goDown(a *agentProc, rid string, byBus bool) {
	n := a.node
	s.reboots[rid]++
	s.w.logf("%s goes down for request %s", n.name, rid)
	if r, ok := s.bus.value(bucketRequests, n.name).(nodedrain.NodeDrainRequest); ok && r.RequestID == rid {
		a.cmdDeclared = nodedrain.DeclaresClusterShutdown(r)
		s.downDeclared[rid] = a.cmdDeclared
	}
	if s.reboots[rid] > 1 {
		s.violate("S5", "%s went down a second time for request %s", n.name, rid)
	}
	s.powerCycle(a, s.w.between(5*time.Second, 40*time.Second))
}

// powerCycle takes the machine down now and up after d.
func (s *Sim) powerCycle(a *agentProc, d time.Duration) {
	n := a.node
	if !n.up {
		return
	}
	// Under a declared whole-cluster shutdown a node that is down holds no slot, whatever took
	// it down (admission's rule): as for one its command took down, the slot stays free until
	// it withdraws, even if the declaration ends meanwhile (a power cut: scenario
	// power-loss-in-cluster-shutdown-keeps-slot-free; a reinstall: scenario
	// reinstalled-node-in-cluster-shutdown-holds-no-slot).
	if r, ok := s.bus.value(bucketRequests, n.name).(nodedrain.NodeDrainRequest); ok &&
		nodedrain.DeclaresClusterShutdown(r) && s.wholeClusterDeclared() {
		s.downDeclared[r.RequestID] = true
	}
	a.crash("machine down")
	a.outcome = "" // (in memory, as /var/run)
	if a.twin != nil {
		a.twin.crash("machine down")
		a.twin.outcome = ""
	}
	s.cluster.machineDown(n)
	delete(a.sentinel, agent.OpReboot) // /var/run is a tmpfs
	delete(a.sentinel, agent.OpShutdown)
	s.w.after(d, "machine up", func() {
		if n.retired {
			return
		}
		a.cmdRequest, a.cmdDeclared, a.podGone = "", false, false
		s.cluster.machineUp(n)
		s.w.logf("%s is up again (boot %d)", n.name, n.bootID)
		a.start()
		if a.twin != nil {
			a.twin.start()
		}
	})
}

// duplicate starts a second agent with a's node name, on the same machine and files.
func (s *Sim) duplicate(a *agentProc) {
	if a.twin != nil {
		return
	}
	t := &agentProc{s: s, node: a.node, conn: &conn{b: s.bus, name: "agent2/" + a.node.name}, sentinel: a.sentinel,
		persisted: agent.State{Phase: agent.PhaseIdle}, noState: true}
	a.twin, t.twin = t, a
	if a.node.up && !a.podGone {
		t.start()
	}
}

func (s *Sim) updateDone(node string) {
	s.updatesOK[node] = s.w.now
}

// onStatusPublished records a status written by coordinator c (replacing prev) and checks S2
// and the maintenance policy's rules.
func (s *Sim) onStatusPublished(c *coord, prev, st nodedrain.NodeDrainStatus, late bool) {
	leads, decided := s.leads(c), s.w.now
	if !c.asked.IsZero() {
		decided = c.asked // (a write held by a pause: decided before it)
	}
	prev, st = s.trueTimes(prev), s.noteClock(c, st) // (the checks judge in simulated time)
	if late {
		decided = c.pausedAt
		// A write that left its checks behind (the process paused between them and the write)
		// may land after the Lease lapsed, not after another coordinator took over.
		leads = c.alive && s.term == term{coord: c.name, inc: c.inc}
	}
	// The same status published again (its own put back over a forgery, signed anew) is the
	// decision already judged: only who publishes it is checked anew.
	again := sameStatus(prev, st)
	s.w.logf("%s publishes %s %s for request %q: %s", c.name, st.Node, st.Status, st.RequestID, st.Message)
	if evs := s.events[st.Node]; len(evs) > 0 && evs[len(evs)-1] != st.Status {
		s.moved[st.Node] = true
	}
	if !leads {
		s.violate("S1", "%s published %s for %s while it did not hold the Lease (nor, in outage mode, the last term)", c.name, st.Status, st.Node)
		return
	}
	if st.RequestID != "" {
		prev := s.published[st.RequestID]
		if st.Status == nodedrain.StatusStarting && (len(prev) == 0 || prev[len(prev)-1] != nodedrain.StatusStarting) {
			s.cycles[st.RequestID]++
			s.checkAdmittedWithAPI(c, st)
		}
		s.published[st.RequestID] = append(prev, st.Status)
	}
	limit := s.cfg.Policy.CordonAttempts // STARTING, FAILEDCORDON, and CORDONED right after the cordon
	if st.Status == nodedrain.StatusDrainRetrying || st.Status == nodedrain.StatusFailedDrain {
		limit = s.cfg.Policy.DrainAttempts
	}
	if st.Attempt > limit {
		s.violate("S5", "%s published %s attempt %d for %s (limit %d)", c.name, st.Status, st.Attempt, st.Node, limit)
	}
	if again {
		return
	}
	if st.Status == nodedrain.StatusComplete && !st.SlotReleased {
		// (A COMPLETE re-published to release a stale slot decides nothing: the first did.)
		s.checkS2(c, st, decided)
	}
	s.checkPolicyAtPublish(prev, st)
	s.checkLastNodeUp(prev, st)
}

func (s *Sim) onEvent(c *coord, st nodedrain.NodeDrainStatus) {
	evs := s.events[st.Node]
	if len(evs) > 0 && evs[len(evs)-1] == st.Status && !s.moved[st.Node] {
		s.violate("E1", "%s emitted a second Event %s for %s (the transition was announced already)", c.name, st.Status, st.Node)
	}
	s.events[st.Node] = append(evs, st.Status)
	s.moved[st.Node] = false
}

// countCordon counts a cordon attempt of a request's drain cycle (see cycleKey).
func (s *Sim) countCordon(rid string) {
	s.cordons[s.cycleKey(rid)]++
}

// countEviction counts an eviction attempt of a request's drain cycle: attempt n redone after
// the API went away in the middle of it is the same attempt.
func (s *Sim) countEviction(rid string, n int) {
	k := s.cycleKey(rid)
	if s.evictions[k] == nil {
		s.evictions[k] = map[int]bool{}
	}
	s.evictions[k][n] = true
	s.evicts[k] = len(s.evictions[k])
}

// cycleKey names a request's current drain cycle: an admission, or a cordon again after someone
// uncordoned the node during the drain, starts one with a full budget of attempts (STARTING).
func (s *Sim) cycleKey(rid string) string {
	return fmt.Sprintf("%s (cycle %d)", rid, s.cycles[rid])
}
