package sim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/volumes"
)

var (
	seeds  = flag.Int("sim.seeds", 1500, "how many seeds TestSimulation runs from -sim.base")
	base   = flag.Uint64("sim.base", 1, "the first seed TestSimulation runs")
	random = flag.Int("sim.random", 3, "how many random seeds TestSimulation runs besides (printed)")
)

// TestSimulation runs the whole protocol for many seeds and fails with the shrunk story of the
// first violation. `make sim SEEDS=N` runs more.
func TestSimulation(t *testing.T) {
	n := *seeds
	if testing.Short() {
		n = min(n, 200)
	}
	list := make([]uint64, 0, n+*random)
	for i := range n {
		list = append(list, *base+uint64(i))
	}
	for range *random {
		s := rand.Uint64()
		t.Logf("random seed %d (replay: make sim SEEDS=1 BASE=%d)", s, s)
		list = append(list, s)
	}
	start := time.Now()
	events, outages, fenced := 0, 0, 0
	forgedRuns, forged, refused, repairs, copies := 0, 0, 0, 0, 0
	policy := map[string]int{}
	states := map[string]bool{}
	agentFaultRuns := map[Kind]int{}
	for _, seed := range list {
		r := Run(seed)
		for _, k := range shareKinds {
			if slices.ContainsFunc(r.Plan, func(f Fault) bool { return f.Kind == k.k }) {
				agentFaultRuns[k.k]++
			}
		}
		events += r.Events
		if r.Outages > 0 {
			outages++
		}
		fenced += r.Fenced
		if slices.ContainsFunc(r.Plan, func(f Fault) bool { return f.Kind == StatusForger }) {
			forgedRuns++
		}
		forged, refused, repairs, copies = forged+r.Forged, refused+r.Refused, repairs+r.Repairs, copies+r.CopiesTaken
		for k, v := range r.Policy {
			policy[k] += v
		}
		for k := range r.States {
			states[k] = true
		}
		if r.Violation != nil {
			t.Fatalf("%s", Shrink(r).Report())
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds in %s (%.0f seeds/s), %.0f events per seed, %d distinct states; %d runs with a leader in API-outage mode, %d fenced writes",
		len(list), el.Round(time.Millisecond), float64(len(list))/el.Seconds(), float64(events)/float64(len(list)), len(states), outages, fenced)
	t.Logf("maintenance policy: %v", policy)
	t.Logf("status forgers in %d runs (%.1f%%): %d forged writes, %d statuses refused by agents' guards, %d values repaired by coordinators; "+
		"%d server copies reached agent.Step through a failed checked read", forgedRuns, 100*float64(forgedRuns)/float64(len(list)), forged, refused, repairs, copies)
	var shares []string
	for _, k := range shareKinds {
		shares = append(shares, fmt.Sprintf("%s %.1f%%", k.k, 100*float64(agentFaultRuns[k.k])/float64(len(list))))
	}
	t.Logf("agent, pod, API-write, operator-bus and replicated-bus faults, share of runs drawing each: %s", strings.Join(shares, ", "))
}

// shareKinds are the fault kinds whose share of runs TestSimulation reports.
var shareKinds = slices.Concat(agentFaultKinds, evictorKinds, apiWriteKinds,
	[]weightedKind{{k: OperatorPutsRequest}, {k: OperatorReplaysRequest}, {k: FollowerLags}, {k: StreamElection}, {k: QuorumLoss},
		{k: TypedReboot}, {k: InformersBehind}})

// three is the cluster of most regressions: 3 nodes, one coordinator, max-concurrent 1.
func three(vols int, policy volumes.Policy) Config {
	cfg := noChanges(configOneSlotWithWait(1))
	cfg.Nodes, cfg.Coordinators, cfg.MaxConcurrent, cfg.Volumes, cfg.Groups, cfg.VolumePolicy = 3, 1, 1, vols, 1, policy
	cfg.CommandFailure, cfg.Active = 0, 3*time.Minute
	return cfg
}

// Each regression holds the plan of a violation the simulation found before its fix (the
// closing note of issue 9 has the stories); it must run clean now, and the story must show that
// its scenario happened (happens: lines in that order, each holding every part).
func TestRegressions(t *testing.T) {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	noLE := func(c Config) Config { c.Coordinators, c.NoLeaderElection = 1, true; return c }
	cases := []struct {
		name    string
		seed    uint64
		cfg     Config
		plan    Plan
		happens [][]string
	}{
		{"a reboot typed while an update waits for its drain is held back until COMPLETE, then goes ahead in the update's " +
			"place; the update is not taken for done and runs once the node is back (L1, simulator)", 1, caught(three(1, volumes.PolicyWait)),
			Plan{{At: sec(2), Kind: PDBBlocks, For: 60 * time.Second}, {At: sec(5), Kind: Update, Target: 1}, {At: sec(40), Kind: TypedReboot, Target: 1}},
			[][]string{{"an administrator reboots node-1.edge"}, {"logind holds the shutdown of node-1.edge"}, {"caught while the update was deferred"},
				{"node-1.edge COMPLETE"}, {"lets the shutdown proceed for request node-1.edge-req1", "drained true"},
				{"node-1.edge goes down for request node-1.edge-req1"}, {"took the place of the update"}, {"runs the update command"}}},
		{"a reboot typed while the agent's disk is read-only is not let through by an override COMPLETE whose file cannot be " +
			"removed (left, it would let the next operation run without a drain); the agent crashing on its failing disk " +
			"meanwhile lets logind go on, and the node goes down undrained, as in a power cut (O1, simulator)", 1, caught(three(1, volumes.PolicyWait)),
			Plan{{At: sec(2), Kind: PDBBlocks, For: 60 * time.Second}, {At: sec(5), Kind: Reboot, Target: 1},
				{At: sec(30), Kind: DiskReadOnly, Target: 1, For: 40 * time.Second}, {At: sec(35), Kind: TypedReboot, Target: 1},
				{At: sec(40), Kind: Override, Target: 1}},
			[][]string{{"an administrator reboots node-1.edge"}, {"override COMPLETE for request node-1.edge-req1"},
				{"the reboot for request node-1.edge-req1 was not started"}, {"agent of node-1.edge stops (crash while its disk fails)"},
				{"logind goes on"}, {"node-1.edge goes down undrained"}, {"node-1.edge is up again"}}},
		{"an update whose command succeeds after a reboot typed meanwhile was let through keeps its request until the node " +
			"is back: withdrawn at once, its slot went to another node while it went down (S3, seed 5302669)", 5302669, func() Config {
			c := ConfigFor(5302669)
			c.ShutdownJobFailures = 0
			return c
		}(),
			Plan{{At: sec(18.2), Kind: KernelDay}, {At: sec(71.1), Kind: Update, Target: 1}, {At: sec(75), Kind: Update, Target: 2},
				{At: sec(70.4), Kind: BusOutage, For: 17 * time.Second}, {At: sec(63.6), Kind: ClockStep, Target: 1, For: 323 * time.Second},
				{At: sec(131.1), Kind: TypedReboot, Target: 2}},
			[][]string{{"agent of node-2.edge runs the update command"}, {"an administrator reboots node-2.edge"},
				{"agent of node-2.edge lets the shutdown proceed", "whose command ran"},
				{"agent of node-2.edge: update command succeeded; the node is going down"}, {"node-2.edge goes down for request"},
				{"node-2.edge is up again"}, {"node-1.edge STARTING"}}},
		{"an update whose command succeeds after a reboot typed meanwhile was let through, which logind called off while the " +
			"command ran, is done once it returns: not run again, nor kept until the reboot timeout (S5)", 5302669, func() Config {
			c := ConfigFor(5302669)
			c.ShutdownJobFailures = 1
			return c
		}(), Plan{{At: sec(18.2), Kind: KernelDay}, {At: sec(71.1), Kind: Update, Target: 1}, {At: sec(75), Kind: Update, Target: 2},
			{At: sec(70.4), Kind: BusOutage, For: 17 * time.Second}, {At: sec(63.6), Kind: ClockStep, Target: 1, For: 323 * time.Second},
			{At: sec(131.1), Kind: TypedReboot, Target: 2}},
			[][]string{{"agent of node-2.edge runs the update command"}, {"an administrator reboots node-2.edge"},
				{"agent of node-2.edge lets the shutdown proceed", "whose command ran"},
				{"node-2.edge stays up: logind could not start its shutdown's job"},
				{"agent of node-2.edge: update command succeeded; the node is going down"},
				{"agent of node-2.edge: update command succeeded, and the shutdown let through meanwhile was called off by logind: withdrawing"}}},
		{"a drain is not decided on informers still behind the API after its outage: the Node holding the volume's other " +
			"copy, deleted as the API came back, still exists in them; decided again on a read of the API, the drain waits " +
			"for a new copy (S2, chaos run seed 77)", 1, three(1, volumes.PolicyWait),
			Plan{{Kind: InformersBehind, For: 3 * time.Minute}, {At: sec(5), Kind: Reboot, Target: 1}, {At: sec(6), Kind: APIOutage, For: 3 * time.Second},
				{At: sec(9.5), Kind: NodeDeletedForGood, Target: 0, For: 3 * time.Minute}},
			[][]string{{"the Kubernetes API is back"}, {"coordinator-0's informers catch up with the API in"},
				{"node-0.edge's Node object is deleted"},
				{"caches said the volumes of node-1.edge are safe, a read from the API says not"},
				{"node-1.edge COMPLETE"}}},
		{"the API-unreachable rule does not decide on informers still behind after an earlier outage: the Node holding the " +
			"volume's other copy, deleted between the two, still exists in them (S2)", 1, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Active = 6 * time.Minute
			return c
		}(), Plan{{Kind: InformersBehind, For: 6 * time.Minute}, {Kind: PDBBlocks, For: time.Minute}, {At: sec(1), Kind: Reboot, Target: 1},
			{At: sec(20), Kind: APIOutage, For: 3 * time.Second}, {At: sec(23.5), Kind: NodeDeletedForGood, Target: 0, For: 5 * time.Minute},
			{At: sec(30), Kind: APIOutage, For: 3 * time.Minute}},
			[][]string{{"the Kubernetes API is back"}, {"coordinator-0's informers catch up with the API in"},
				{"node-0.edge's Node object is deleted"}, {"node-1.edge CORDONED", "not proceeding: it went away soon after an earlier outage"},
				{"the Kubernetes API is back"}, {"node-1.edge COMPLETE"}}},
		{"a coordinator that takes over after an outage does not decide the API-unreachable rule on its informers, which may " +
			"still be listing again: the Node holding the volume's other copy, deleted after the first outage, still exists in " +
			"them (S2, review)", 3, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Active, c.Coordinators = 6*time.Minute, 2
			return c
		}(), Plan{{Kind: InformersBehind, For: 6 * time.Minute}, {Kind: PDBBlocks, For: time.Minute}, {At: sec(1), Kind: Reboot, Target: 1},
			{At: sec(20), Kind: APIOutage, For: 3 * time.Second}, {At: sec(23.5), Kind: NodeDeletedForGood, Target: 0, For: 5 * time.Minute},
			{At: sec(23.6), Kind: CoordCrash, Target: 0, For: 5 * time.Minute}, {At: sec(40), Kind: APIOutage, For: 3 * time.Minute}},
			[][]string{{"coordinator-0 crashes"}, {"coordinator-1 resumes"}, {"the Kubernetes API is unreachable for 3m0s"},
				{"node-1.edge", "not proceeding: it went away soon after an earlier outage"}, {"node-1.edge COMPLETE"}}},
		{"kernel-update day is not a whole-cluster shutdown (S3, seed 2)", 2, three(2, volumes.PolicyWait),
			Plan{{At: sec(76.7), Kind: KernelDay}},
			[][]string{{"every node gets /var/run/reboot-required"}, {"node-0.edge goes down"}, {"node-1.edge goes down"}, {"node-2.edge goes down"}}},
		{"resume releases the gate's eviction request of a drain withdrawn meanwhile (L1, seed 55)", 55, three(1, volumes.PolicyEvict),
			Plan{{At: sec(13.7), Kind: Reboot, Target: 1}, {At: sec(44.3), Kind: CoordCrash, Target: 2, For: 38 * time.Second}},
			[][]string{{"asks Longhorn to evict the replicas of node-1.edge"}, {"coordinator-0 crashes"}, {"withdrawing request"}, {"coordinator-0 resumes"}}},
		{"a restarted coordinator does not repeat an Event (E1, seed 64)", 64, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Coordinators = 2
			return c
		}(), Plan{{At: sec(148), Kind: Update}, {At: sec(92.4), Kind: AgentCrash, Target: 2, For: 15 * time.Second},
			{At: sec(86), Kind: CoordCrash, Target: 2, For: 24 * time.Second}, {At: sec(155.8), Kind: APIOutage, For: 111 * time.Second}},
			[][]string{{"node-0.edge CORDONED"}, {"lost the Lease to the API outage"}, {"resumes: 1 request"}, {"node-0.edge COMPLETE"}}},
		{"a paused ex-leader does not publish after a takeover (S1, seed 234)", 234, func() Config {
			c := three(0, volumes.PolicyWait)
			c.Nodes, c.Coordinators, c.MaxConcurrent, c.Groups, c.Active = 4, 2, 2, 2, 5*time.Minute
			return c
		}(), Plan{{At: sec(100.1), Kind: Reboot, Target: 2}, {At: sec(263.6), Kind: Reboot, Target: 3},
			{At: sec(292.2), Kind: CoordFreeze, Target: 2, For: 40 * time.Second}, {At: sec(10.6), Kind: CoordCrash, Target: 3, For: 31 * time.Second}},
			[][]string{{"coordinator-0 freezes"}, {"coordinator-1 becomes the active coordinator"}, {"coordinator-0 stops leading"}}},
		{"an operation withdrawn while no coordinator ran is asked for again (L1, seed 76)", 76, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Coordinators, c.Active = 2, 5*time.Minute
			c.APIUnreachableTimeout = 0 // no outage mode: nobody acts during the outage
			return c
		}(), Plan{{At: sec(138.9), Kind: Update, Target: 2}, {At: sec(108.6), Kind: APIOutage, Target: 2, For: 189 * time.Second},
			{At: sec(176.2), Kind: Withdraw, Target: 2, For: 31 * time.Second}},
			[][]string{{"stops leading"}, {"edgedrainctl withdraw node-2.edge"}, {"node-2.edge COMPLETE"}, {"runs the update command"}}},
		{"an API outage with leader election on: the leader goes on in outage mode and the API-unreachable rule applies to the drain under way", 76,
			func() Config {
				c := three(1, volumes.PolicyWait)
				c.Coordinators, c.Active = 2, 5*time.Minute
				return c
			}(), Plan{{At: sec(85), Kind: PDBBlocks, For: 300 * time.Second}, {At: sec(85), Kind: Update, Target: 1},
				{At: sec(108.6), Kind: APIOutage, For: 189 * time.Second}, {At: sec(130), Kind: Reboot, Target: 2}},
			[][]string{{"node-1.edge DRAINRETRYING"}, {"lost the Lease to the API outage: outage mode"},
				{"node-2.edge REQUESTED", "no drain is admitted until it does"}, {"node-1.edge COMPLETE", "Kubernetes API unreachable for"},
				{"runs the update command"}, {"leaves outage mode: the Kubernetes API answers again"}, {"becomes the active coordinator"},
				{"node-2.edge STARTING"}, {"node-2.edge COMPLETE", "node drained"}}},
		{"a request made during an API outage is not admitted until the API answers, and never runs undrained (S2, seed 20)", 20, configOneSlotWithWait(20),
			Plan{{At: sec(195.7), Kind: Update, Target: 2}, {At: sec(206.5), Kind: APIOutage, Target: 3, For: 81 * time.Second}},
			[][]string{{"the Kubernetes API is unreachable"}, {"node-2.edge REQUESTED", "no drain is admitted until it does"},
				{"the Kubernetes API is back"}, {"node-2.edge STARTING"}, {"node-2.edge COMPLETE", "node drained"}, {"runs the update command"}}},
		{"a paused ex-leader in outage mode is fenced by the term of the coordinator that took over (S1)", 21, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Coordinators = 2
			c.InformerRelist = -1 // (its caches never lag: the rule applies soon after the takeover)
			return c
		}(), Plan{{At: 0, Kind: PDBBlocks, For: 300 * time.Second}, {At: sec(1), Kind: Reboot, Target: 1},
			{At: sec(3), Kind: CoordFreeze, Target: 0, For: 20 * time.Second}, {At: sec(17), Kind: APIOutage, For: 150 * time.Second}},
			[][]string{{"coordinator-0 freezes"}, {"coordinator-1 becomes the active coordinator"}, {"coordinator-1 writes its term record"},
				{"node-1.edge CORDONED"}, {"coordinator-0 lost the Lease to the API outage"}, {"coordinator-0", "fenced"},
				{"node-1.edge COMPLETE", "unreachable"}}},
		{"a node re-registering does not make a two-node cluster a single-node one (S3, seed 4140)", 4140, beforePolicy(configOneSlotWithWait(4140)),
			Plan{{At: sec(75.6), Kind: Reboot, Target: 0}, {At: sec(80.4), Kind: Update, Target: 1},
				{At: sec(49.7), Kind: APIOutage, Target: 1, For: 24 * time.Second}, {At: sec(79.9), Kind: NodeReregister, Target: 1, For: 31 * time.Second},
				{At: sec(75.5), Kind: WatchLag, For: 24 * time.Second}},
			[][]string{{"node-1.edge's Node object is deleted"}, {"node-0.edge REQUESTED"}, {"node-0.edge goes down"}, {"agent of node-1.edge runs the update command"}}},
		{"a reboot rerun after an operator's COMPLETE and a later withdrawal is cancelled, not left reading in a loop (L1, seed 17841)", 17841, beforePolicy(configOneSlotWithWait(17841)),
			Plan{{At: sec(46.5), Kind: KernelDay}, {At: sec(28.9), Kind: Update, Target: 2}, {At: sec(83.1), Kind: Override, Target: 2, For: 33 * time.Second},
				{At: sec(54.9), Kind: AgentCrash, Target: 2, For: 8 * time.Second}, {At: sec(139.3), Kind: Withdraw, Target: 2, For: 17 * time.Second}},
			[][]string{{"agent of node-2.edge stops (crash)"}, {"override file on node-2.edge: COMPLETE"}, {"edgedrainctl withdraw node-2.edge"},
				{"agent of node-2.edge: reboot command failed"}, {"agent of node-2.edge", "was withdrawn by someone else"}}},
		{"a failed drain whose FAILEDDRAIN did not reach the bus keeps its slot until it does (S3, seed 101553)", 101553, beforePolicy(configOneSlotWithWait(101553)),
			Plan{{At: sec(38.4), Kind: Update, Target: 0}, {At: sec(66.8), Kind: Update, Target: 1}, {At: sec(81.7), Kind: Reboot, Target: 2},
				{At: sec(28.4), Kind: PDBBlocks, Target: 2, For: 272 * time.Second}, {At: sec(140.7), Kind: BusLossy, For: 36 * time.Second},
				{At: sec(63.5), Kind: AgentCut, Target: 0, For: 36 * time.Second}, {At: sec(20.9), Kind: CoordCrash, Target: 0, For: 33 * time.Second}},
			[][]string{{"node-1.edge REQUESTED", "waiting: node-0.edge in maintenance"}, {"NATS loses replies"}, {"node-0.edge FAILEDDRAIN"},
				{"node-1.edge STARTING"}}},
		{"a request made during an API outage under a declared whole-cluster shutdown waits for the API (S2, seed 109542: " +
			"it once went COMPLETE through the API-unreachable rule without a cordon)", 109542, beforePolicy(configOneSlotWithWait(109542)),
			Plan{{At: sec(48.7), Kind: ClusterShutdown}, {At: sec(4.7), Kind: Reboot, Target: 2}, {At: sec(54.5), Kind: BusOutage, For: 25 * time.Second},
				{At: sec(79.7), Kind: BusLossy, For: 35 * time.Second}, {At: sec(4.7), Kind: APIOutage, For: 135 * time.Second},
				{At: sec(20.2), Kind: StateLost, Target: 2, For: 10 * time.Second}, {At: sec(48.4), Kind: PowerCycle, Target: 1, For: 30 * time.Second}},
			[][]string{{"node-0.edge REQUESTED", "no drain is admitted until it does"}, {"faults stop"},
				{"node-0.edge STARTING"}, {"node-0.edge CORDONED", "all pods evicted"}, {"node-0.edge COMPLETE"}}},
		{"a coordinator paused after its last cordon check checks again before COMPLETE (S2, seed 109751)", 109751, beforePolicy(configOneSlotWithWait(109751)),
			Plan{{At: sec(33.0), Kind: KernelDay}, {At: sec(37.726), Kind: CoordFreeze, Target: 1, For: 29 * time.Second},
				{At: sec(33.965), Kind: OperatorCordon, Target: 1, For: 11 * time.Second}},
			[][]string{{"an operator cordons node-1.edge"}, {"node-1.edge CORDONED", "cordoned by someone else"}, {"coordinator-0 freezes"},
				{"the operator uncordons node-1.edge"}, {"node-1.edge", "answered too long ago"}, {"node-1.edge STARTING", "cordoning it again"}}},
		{"a node that lost power during a whole-cluster shutdown keeps its slot free after the declaration ends (S3 check, seed 119738)", 119738, beforePolicy(configOneSlotWithWait(119738)),
			Plan{{At: sec(17.2), Kind: ClusterShutdown}, {At: sec(25.787), Kind: PowerCycle, Target: 1, For: 18 * time.Second},
				{At: sec(19.1), Kind: BusLossy, Target: 2, For: 12 * time.Second}},
			[][]string{{"node-1.edge loses power"}, {"node-1.edge COMPLETE"}, {"node-3.edge STARTING"}, {"node-2.edge is up again"}}},
		{"a COMPLETE re-published to release a stale slot is not taken back when that publication fails (R2, seed 1168)", 1168, noChanges(configOneSlotWithWait(1168)),
			Plan{{At: sec(119.9), Kind: Reboot, Target: 1}, {At: sec(146.0), Kind: Reboot, Target: 2}, {At: sec(182.4), Kind: BusOutage, Target: 1, For: 20 * time.Second}},
			[][]string{{"node-2.edge COMPLETE"}, {"node-2.edge goes down"}, {"node-2.edge releases its slot"}, {"node-2.edge is up again"},
				{"node-2.edge NOTREQUESTED", "request withdrawn"}}},
		{"a node NotReady before its COMPLETE keeps its slot for the stale-holder timeout after it (R2, review)", 5, func() Config {
			c := three(1, volumes.PolicyEvict)
			c.StaleHolderTimeout, c.Policy.ReturnTimeout = 20*time.Second, 120*time.Second
			return c
		}(), Plan{{At: sec(0.5), Kind: KubeletDown, Target: 0, For: 100 * time.Second}, {At: sec(25), Kind: Reboot, Target: 0}, {At: sec(40), Kind: Reboot, Target: 1}},
			[][]string{{"the kubelet of node-0.edge stops reporting"}, {"node-0.edge COMPLETE"}, {"node-0.edge goes down"}, {"node-0.edge releases its slot"},
				{"node-1.edge STARTING"}}},
		{"a new request during the return gate waits for it (R3, review, seed 7)", 7, noChanges(configOneSlotWithWait(7)),
			Plan{{At: sec(27.6), Kind: KernelDay}, {At: sec(73.2), Kind: Reboot, Target: 1}, {At: sec(51.1), Kind: Update, Target: 2}},
			[][]string{{"node-2.edge REQUESTED", "new request; back from its last operation"}, {"the return gate of node-2.edge ended (healthy)"},
				{"node-1.edge STARTING"}}},
		{"a coordinator resuming after a withdrawal it did not see runs the return gate (R3, review, seed 439)", 439, noChanges(configOneSlotWithWait(439)),
			Plan{{At: sec(6.8), Kind: KernelDay}, {At: sec(29.9), Kind: CoordCrash, Target: 0, For: 11 * time.Second}},
			[][]string{{"coordinator-1 resumes"}, {"the return gate of node-2.edge ended"}, {"node-0.edge STARTING"}}},
		{"a stale release keeps the slot on the bus until it is published (S3, review, seed 49)", 49, lossy(49, func(c *Config) {
			c.StaleHolderTimeout, c.Policy.ReturnTimeout = 20*time.Second, 150*time.Second
		}), lossyPlan(49, func(c *Config) { c.StaleHolderTimeout, c.Policy.ReturnTimeout = 20*time.Second, 150*time.Second }),
			[][]string{{"releases its slot"}}},
		{"a cordon check that failed sends the drain back to the final gate, blockers included (P3, review, seed 64)", 64, lossy(64, func(c *Config) {
			c.Maintenance, c.Policy.ReturnTimeout = true, 150*time.Second
		}), lossyPlan(64, func(c *Config) { c.Maintenance, c.Policy.ReturnTimeout = true, 150*time.Second }),
			[][]string{{"a blocker appears on node-0.edge"}, {"node-0.edge COMPLETE"}}},
		{"--preflight=hold does not predict the evict policy's replacements, which only the drain asks for (L1, seed 55)", 55, noChanges(configOneSlotWithWait(55)),
			Plan{{At: sec(13.7), Kind: Reboot, Target: 1}},
			[][]string{{"node-1.edge REQUESTED", "checking the maintenance policy"}, {"node-1.edge STARTING"}, {"node-1.edge COMPLETE"}}},
		{"a coordinator restarted while a holder's Node object is gone does not forget its failure domain (D1, review 2, seed 120)", 120, func() Config {
			c := three(0, volumes.PolicyWait)
			c.Nodes, c.MaxConcurrent, c.Maintenance, c.Domains, c.Policy.ReturnTimeout = 4, 2, true, 2, 150*time.Second
			return c
		}(), Plan{{At: sec(1), Kind: Reboot, Target: 0}, {At: sec(12), Kind: NodeReregister, Target: 0},
			{At: sec(12.3), Kind: CoordCrash, Target: 0, For: 500 * time.Millisecond}, {At: sec(12.2), Kind: Reboot, Target: 2}},
			[][]string{{"node-0.edge's Node object is deleted"}, {"coordinator-0 crashes"}, {"coordinator-0 resumes"}, {"node-2.edge STARTING"}}},
		{"a node healthy again while the bus still shows its slot held has ended its return, though it goes down later (R3 check, seed 5555)", 5555, configOneSlotWithWait(5555),
			Plan{{At: sec(5.3), Kind: Reboot, Target: 0}, {At: sec(5.5), Kind: Reboot, Target: 2}, {At: sec(1.9), Kind: BusOutage, Target: 2, For: 18 * time.Second},
				{At: sec(88.3), Kind: StateLost, Target: 2, For: 31 * time.Second}, {At: sec(55.7), Kind: BusOutage, For: 35 * time.Second},
				{At: sec(29.5), Kind: PowerCycle, Target: 1, For: 22 * time.Second}},
			[][]string{{"return gate of node-2.edge ended (healthy)"}, {"node-2.edge is reinstalled"}, {"node-0.edge STARTING"}}},
		{"a coordinator paused within a pause sees its watch events in order (S4, simulator, seed 404719)", 404719, configOneSlotWithWait(404719),
			Plan{{At: sec(157.6), Kind: Update, Target: 2}, {At: sec(160.3), Kind: CoordFreeze, Target: 0, For: 40 * time.Second},
				{At: sec(190), Kind: PowerCycle, Target: 1, For: 17 * time.Second}, {At: sec(181.1), Kind: CoordFreeze, Target: 1, For: 6 * time.Second}},
			[][]string{{"coordinator-0 freezes for 40s"}, {"coordinator-0 freezes for 6s"}, {"node-2.edge COMPLETE"}, {"runs the update command"}}},
		{"a whole-cluster shutdown is declared by admission's rule: a node down without a request need not declare it (S3 check, simulator, seed 600445)", 600445, configOneSlotWithWait(600445),
			Plan{{At: sec(77), Kind: ClusterShutdown}, {At: sec(86.5), Kind: StateLost, Target: 1, For: 33 * time.Second},
				{At: sec(65.2), Kind: Override, Target: 0, For: 26 * time.Second}},
			[][]string{{"override file on node-0.edge"}, {"node-0.edge goes down"}, {"whole-cluster shutdown = true"}, {"node-3.edge STARTING"}}},
		{"a node reinstalled under a declared shutdown holds no slot until it withdraws, though the declaration ends (S3 check, simulator, seed 600445)", 600445, configOneSlotWithWait(600445),
			Plan{{At: sec(77), Kind: ClusterShutdown}, {At: sec(86.5), Kind: StateLost, Target: 1, For: 33 * time.Second},
				{At: sec(96.1), Kind: BusOutage, Target: 1, For: 29 * time.Second}},
			[][]string{{"whole-cluster shutdown = true"}, {"node-1.edge is reinstalled"}, {"node-1.edge COMPLETE"}, {"node-2.edge STARTING"},
				{"node-1.edge is up again"}, {"whole-cluster shutdown = false"}}},
		{"a COMPLETE delivered late after edgedrainctl withdraw is not run (S1)", 11, beforeReads(three(1, volumes.PolicyWait)),
			Plan{{At: sec(1), Kind: Reboot, Target: 0}, {At: sec(3), Kind: WatchLag, Target: 0, For: 90 * time.Second},
				{At: sec(20), Kind: Withdraw, Target: 0}},
			[][]string{{"publishes node-0.edge COMPLETE"}, {"edgedrainctl withdraw node-0.edge"}, {"agent of node-0.edge: COMPLETE for request", "running the reboot"},
				{"was withdrawn by someone else"}}},
		{"a NOTSUPPORTED naming no request does not clear a deferred operation (S1)", 12, noLE(three(1, volumes.PolicyWait)),
			Plan{{At: sec(1), Kind: Reboot, Target: 0}, {At: sec(1), Kind: APIOutage, For: 60 * time.Second},
				{At: sec(20), Kind: ForgedOverLive, Target: 0}},
			[][]string{{"publishing drain request node-0.edge"}, {"NOTSUPPORTED naming no request appears for node-0.edge"}, {"cleared by COMPLETE"}}},
		{"two agents with one node name do not withdraw each other's requests (L1)", 13, three(1, volumes.PolicyWait),
			Plan{{At: sec(0.1), Kind: Reboot, Target: 0}, {At: sec(0.2), Kind: AgentDuplicated, Target: 0}},
			[][]string{{"a second agent starts"}, {"which this agent did not make"}, {"node-0.edge goes down"}}},
		{"a decommission evicts the node's replicas whatever the policy, deletes the Node, then COMPLETE; the keys go (issue 12)", 15, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Policy.DecommissionLinger = time.Minute
			return c
		}(),
			Plan{{At: sec(5), Kind: Decommission, Target: 0}, {At: sec(90), Kind: Reboot, Target: 1}},
			[][]string{{"asks for its decommission"}, {"the volume gate asks Longhorn to evict the replicas of node-0.edge"},
				{"deletes the Node object of node-0.edge"}, {"node-0.edge COMPLETE", "Node object deleted"},
				{"agent of node-0.edge runs the decommission command"}, {"node-0.edge NOTREQUESTED", "decommissioned"},
				{"removes the keys of decommissioned node-0.edge"}, {"node-1.edge COMPLETE"}}},
		{"a decommissioned machine that boots again registers a new Node, which the decommission asked again drains and deletes (L1, seed 700308)", 700308, configOneSlotWithWait(700308),
			Plan{{At: sec(173.5), Kind: PowerCycle, Target: 2, For: time.Second}, {At: sec(163.8), Kind: Decommission, Target: 2}},
			[][]string{{"deletes the Node object of node-2.edge"}, {"decommission command failed"}, {"node-2.edge loses power"},
				{"node-2.edge's kubelet registers its Node object again"}, {"deletes the Node object of node-2.edge"},
				{"agent of node-2.edge runs the decommission command"}}},
		{"a status forged over a decommissioned node's removed key is not the coordinator's to remove (L1 check, simulator, seed 800470)", 800470, func() Config {
			c := configOneSlotWithWait(800470)
			c.Policy.DecommissionLinger = 30 * time.Second // (the keys are gone when the status is forged)
			return c
		}(),
			Plan{{At: sec(69), Kind: ForgedStatus, Target: 1, For: 23 * time.Second}, {At: sec(22.8), Kind: Decommission, Target: 1}},
			[][]string{{"removes the keys of decommissioned node-1.edge"}, {"NOTSUPPORTED naming no request appears for node-1.edge"}}},
		{"a decommission's statuses lost in a bus outage are removed with its keys, whatever they say (L1, seed 706050)", 706050, configOneSlotWithWait(706050),
			Plan{{At: sec(13.5), Kind: Reboot, Target: 0}, {At: sec(109.6), Kind: Update, Target: 1}, {At: sec(70.1), Kind: AgentDuplicated, Target: 0, For: 21 * time.Second},
				{At: sec(119.8), Kind: Override, Target: 2, For: 19 * time.Second}, {At: sec(49.7), Kind: CoordFreeze, Target: 0, For: 31 * time.Second},
				{At: sec(104.4), Kind: BusOutage, Target: 0, For: 19 * time.Second}, {At: sec(57.4), Kind: Decommission, Target: 2}},
			[][]string{{"deletes the Node object of node-2.edge"}, {"override COMPLETE for request node-2.edge-req2"}, {"removes the keys of decommissioned node-2.edge"}}},
		{"a resumed coordinator releases the gate's work of a decommission withdrawn meanwhile (L1, seed 804142)", 804142, configOneSlotWithWait(804142),
			Plan{{At: sec(62.3), Kind: KernelDay}, {At: sec(20.1), Kind: Reboot, Target: 1}, {At: sec(187.4), Kind: APIOutage, Target: 2, For: 34 * time.Second},
				{At: sec(200.3), Kind: Withdraw, Target: 0, For: 24 * time.Second}, {At: sec(46.8), Kind: Decommission, Target: 0}},
			[][]string{{"deletes the Node object of node-0.edge"}, {"edgedrainctl withdraw node-0.edge"}, {"removes the keys of decommissioned node-0.edge"}}},
		{"an agent restarted after an operator withdrew its decommission learns it was withdrawn: NOTREQUESTED names it before the keys go (L1, seed 731412)", 731412, configOneSlotWithWait(731412),
			Plan{{At: sec(26.1), Kind: AgentCrash, Target: 1, For: 35 * time.Second}, {At: sec(41.4), Kind: Withdraw, Target: 1, For: 25 * time.Second},
				{At: sec(22.1), Kind: Decommission, Target: 1}},
			[][]string{{"deletes the Node object of node-1.edge"}, {"edgedrainctl withdraw node-1.edge"}, {"node-1.edge NOTREQUESTED", "decommissioned"},
				{"agent of node-1.edge restarts"}, {"agent of node-1.edge", "was withdrawn by someone else"}, {"removes the keys of decommissioned node-1.edge"}}},
		{"a decommission command powers the machine off though the agent crashed meanwhile (simulator, seed 721206)", 721206, configOneSlotWithWait(721206),
			Plan{{At: sec(103.3), Kind: Reboot, Target: 3}, {At: sec(150), Kind: AgentCrash, Target: 2, For: 30 * time.Second},
				{At: sec(105.8), Kind: Decommission, Target: 2}},
			[][]string{{"decommission command succeeded"}, {"agent of node-2.edge stops (crash)"}, {"node-2.edge is powered off for good"}}},
		{"a coordinator paused twice over runs the events held in the first pause before those of the second (L1, simulator, seed 754076)", 754076, configOneSlotWithWait(754076),
			Plan{{At: sec(18.9), Kind: KernelDay}, {At: sec(90.3), Kind: Reboot, Target: 0}, {At: sec(28.3), Kind: Reboot, Target: 1},
				{At: sec(76.2), Kind: PowerCycle, Target: 0, For: 9 * time.Second}, {At: sec(82.1), Kind: CoordFreeze, Target: 2, For: 17 * time.Second},
				{At: sec(92.9), Kind: CoordFreeze, Target: 2, For: 13 * time.Second}},
			[][]string{{"coordinator-0 freezes for 17s"}, {"withdrawing request node-0.edge-req3"}, {"coordinator-0 freezes for 13s"},
				{"publishing drain request node-0.edge-req5"}, {"agent of node-0.edge runs the reboot command for request node-0.edge-req5"}}},
		{"an agent restarted during its start-up clean-up still withdraws the stale request (L1, seed 740080)", 740080, configOneSlotWithWait(740080),
			Plan{{At: sec(63.4), Kind: Update, Target: 0}, {At: sec(98.4), Kind: StateLost, Target: 0, For: time.Second},
				{At: sec(75.6), Kind: BusOutage, Target: 0, For: 39 * time.Second}, {At: sec(52.5), Kind: AgentDuplicated, Target: 1, For: 38 * time.Second},
				{At: sec(113.3), Kind: AgentCrash, Target: 0, For: 5 * time.Second}},
			[][]string{{"node-0.edge is reinstalled"}, {"cannot withdraw the drain request"}, {"agent of node-0.edge stops (crash)"},
				{"agent of node-0.edge restarts"}, {"agent of node-0.edge runs the update command for request node-0.edge-req"}}},
		{"a COMPLETE of the API-unreachable rule that could not be published evicts the pods before the next COMPLETE (S2, seed 771705)", 771705, configOneSlotWithWait(771705),
			Plan{{At: sec(47.2), Kind: KernelDay}, {At: sec(55.6), Kind: APIOutage, Target: 2, For: 96 * time.Second},
				{At: sec(104.2), Kind: BusOutage, Target: 1, For: 25 * time.Second}, {At: sec(12.8), Kind: PDBBlocks, Target: 0, For: 263 * time.Second},
				{At: sec(101), Kind: APIOutage, Target: 1, For: 19 * time.Second}},
			[][]string{{"node-1.edge CORDONED", "cannot reach the Kubernetes API to evict"}, {"the Kubernetes API is back"},
				{"node-1.edge CORDONED", "evicting pods"}, {"node-1.edge COMPLETE", "node drained"}}},
		{"a decommission whose Node another deleted waits for it to register again, then drains it again (D1, seed 772961)", 772961, configOneSlotWithWait(772961),
			Plan{{At: sec(32.6), Kind: NodeReregister, Target: 1, For: 14 * time.Second}, {At: sec(16.8), Kind: Decommission, Target: 1}},
			[][]string{{"node-1.edge's Node object is deleted and registered again"}, {"node-1.edge CORDONED", "missing (registering again?)"},
				{"node-1.edge STARTING", "registered again): draining the new one"}, {"deletes the Node object of node-1.edge"},
				{"node-1.edge COMPLETE", "decommissioned"}}},
		{"a paused coordinator whose Lease lapsed writes no term record when its engine retry fires (S1 check, simulator, seed 871214)", 871214, configOneSlotWithWait(871214),
			Plan{{At: sec(12.5), Kind: Reboot, Target: 1}, {At: sec(86.2), Kind: APIOutage, Target: 0, For: 15 * time.Second},
				{At: sec(61.9), Kind: CoordFreeze, Target: 2, For: 26 * time.Second}, {At: sec(52.8), Kind: PowerCycle, Target: 1, For: 34 * time.Second},
				{At: sec(45.6), Kind: KubeletDown, Target: 2, For: 32 * time.Second}, {At: sec(18.2), Kind: APIOutage, Target: 0, For: 28 * time.Second},
				{At: sec(40.3), Kind: BusOutage, Target: 1, For: 25 * time.Second}},
			[][]string{{"coordinator-0 freezes for 26s"}, {"coordinator-1 becomes the active coordinator"}, {"coordinator-0 lost the Lease to the API outage"},
				{"coordinator-1 lost the Lease to the API outage"}, {"the Kubernetes API is back"}, {"coordinator-1", "node-1.edge NOTREQUESTED"}}},
		{"a decommission an operator forced with the override file leaves the machine's leftovers to the operator (L1 check, simulator, seed 871613)", 871613, beforeReads(configOneSlotWithWait(871613)),
			Plan{{At: sec(6.8), Kind: KernelDay}, {At: sec(47.6), Kind: Override, Target: 1, For: 18 * time.Second},
				{At: sec(60), Kind: AgentCut, Target: 1, For: 27 * time.Second}, {At: sec(6.2), Kind: Decommission, Target: 1}},
			[][]string{{"an operator writes the override file on node-1.edge: COMPLETE"}, {"cannot withdraw the drain request"},
				{"runs the decommission command", "cleared by override COMPLETE"}, {"node-1.edge is powered off for good"}}},
		{"a declared whole-cluster shutdown outlasts the NOTSUPPORTED to the last node up: the nodes gone down hold no slot, and " +
			"the last ones up go down in turn, each NOTSUPPORTED taking the slot (S3, seeds 873019, 1130707)", 873019, configOneSlotWithWait(873019),
			Plan{{At: sec(18.4), Kind: ClusterShutdown}, {At: sec(3.1), Kind: Update, Target: 2}, {At: sec(22.2), Kind: AgentCrash, Target: 2, For: 21 * time.Second},
				{At: sec(0.6), Kind: KubeletDown, Target: 0, For: 40 * time.Second}, {At: sec(39.8), Kind: KubeletDown, Target: 2, For: 39 * time.Second}},
			[][]string{{"declares a whole-cluster shutdown"}, {"the kubelet of node-2.edge stops reporting"},
				{"node-1.edge NOTSUPPORTED", "declared whole-cluster shutdown"}, {"node-0.edge REQUESTED", "node-1.edge in maintenance"},
				{"node-1.edge goes down"}, {"node-1.edge releases its slot"}, {"node-0.edge NOTSUPPORTED", "declared whole-cluster shutdown"}}},
		{"a decommissioned node's leftover request does not keep the simulator from seeing a declared whole-cluster shutdown (R2 check, simulator, seed 920084)", 920084, configOneSlotWithWait(920084),
			Plan{{At: sec(54.3), Kind: ClusterShutdown}, {At: sec(46.5), Kind: Decommission, Target: 2}},
			[][]string{{"node-2.edge COMPLETE", "decommissioned"}, {"whole-cluster shutdown = true"},
				{"node-1.edge COMPLETE", "went down under the declared whole-cluster shutdown"}, {"node-0.edge NOTSUPPORTED"}}},
		{"a coordinator that cannot read the requests afresh (NATS down) releases no slot under a declared whole-cluster " +
			"shutdown; the declaration ended meanwhile (the nodes that went down are back), and the last node is drained as any other (R2, " +
			"simulator, seed 931624)", 931624,
			configOneSlotWithWait(931624),
			Plan{{At: sec(68.3), Kind: ClusterShutdown}, {At: sec(116.2), Kind: BusOutage, Target: 2, For: 39 * time.Second}},
			[][]string{{"NATS is down"}, {"whole-cluster shutdown = false"}, {"NATS is back"},
				{"node-0.edge STARTING"}, {"node-0.edge COMPLETE", "node drained"}}},
		{"a release under a declared whole-cluster shutdown decided in the event that made the declaration (R2 check, simulator, seed 931687)", 931687, configOneSlotWithWait(931687),
			Plan{{At: sec(96.6), Kind: ClusterShutdown}},
			[][]string{{"node-1.edge goes down"}, {"whole-cluster shutdown = true"}, {"node-1.edge COMPLETE", "went down under the declared whole-cluster shutdown"},
				{"node-0.edge STARTING"}}},
		{"a coordinator frozen while a node went down under a declared whole-cluster shutdown does not release its slot when it " +
			"wakes after the declaration ended: the next drain waits for the node to be back (R2, simulator, seed 993922)", 993922,
			configOneSlotWithWait(993922),
			Plan{{At: sec(105.687), Kind: ClusterShutdown}, {At: sec(45.541), Kind: AgentCrash, Target: 1, For: 5 * time.Second},
				{At: sec(151.627), Kind: CoordFreeze, Target: 1, For: 25 * time.Second}, {At: sec(60), Kind: APIOutage, Target: 2, For: 28 * time.Second}},
			[][]string{{"coordinator-0 freezes"}, {"node-1.edge goes down"}, {"whole-cluster shutdown = false"},
				{"node-1.edge is up again"}, {"node-2.edge STARTING"}}},
		{"a Node deleted right after the gate's last check of another node's COMPLETE is judged as of the check (S2 check, simulator, seed 2007040)", 2007040, configOneSlotWithWait(2007040),
			Plan{{At: 44120997688, Kind: KernelDay}, {At: 83074174170, Kind: NodeReregister, Target: 0, For: 27 * time.Second}},
			[][]string{{"node-1.edge CORDONED", "all pods evicted"}, {"node-0.edge's Node object is deleted and registered again"},
				{"node-1.edge COMPLETE"}, {"agent of node-1.edge runs the reboot command"}}},
		{"a decommissioned node's key emptied by a copied delete marker holds no status of it (L1 check, simulator, seed 2020252)", 2020252, configOneSlotWithWait(2020252),
			Plan{{At: sec(10), Kind: Decommission, Target: 1}, {At: sec(100), Kind: StatusForger, Target: 1, For: 4 * time.Minute}},
			[][]string{{"node-1.edge COMPLETE", "node decommissioned"}, {"node-1.edge is powered off for good"},
				{"a forger writes a server copy into the status key of node-1.edge: nothing"}, {"faults stop"}}},
		{"an outage-mode ex-leader leaves a forged status to the coordinator that leads: a repair conditional on the key alone would un-fence it (S1, seed 2046528)", 2046528, configOneSlotWithWait(2046528),
			Plan{{At: sec(37.5), Kind: APIOutage, For: 17 * time.Second}, {At: sec(11.8), Kind: AgentCrash, Target: 2, For: 36 * time.Second},
				{At: sec(14.4), Kind: Decommission, Target: 0}, {At: sec(36.6), Kind: StatusForger, Target: 2, For: 226 * time.Second}},
			[][]string{{"coordinator-1 lost the Lease to the API outage: outage mode"}, {"coordinator-1 does not hold the Lease: the forged status of node-2.edge waits"},
				{"coordinator-0 becomes the active coordinator"}, {"coordinator-0 repairs node-2.edge"}, {"coordinator-1", "fenced"}}},
		{"a coordinator resuming over a forged status resumes from the newest status a coordinator wrote there: a decommission's keys still go (L1, seed 532)", 532, configOneSlotWithWait(532),
			Plan{{At: sec(228.4), Kind: APIOutage, Target: 2, For: 37 * time.Second}, {At: sec(23.5), Kind: Decommission, Target: 0},
				{At: sec(227.0), Kind: StatusForger, Target: 0, For: 19 * time.Second}, {At: sec(240), Kind: CoordCrash, Target: 0, For: 5 * time.Second}},
			[][]string{{"deletes the Node object of node-0.edge"}, {"node-0.edge NOTREQUESTED", "decommissioned"}, {"a forger writes", "node-0.edge"},
				{"coordinator-0 crashes"}, {"coordinator-0 resumes", "1 status(es)"}, {"removes the keys of decommissioned node-0.edge"}}},
		{"a coordinator frozen while the last declaring request came, and requests after it ended the declaration, takes them " +
			"before it releases any slot: the nodes are drained in turn (R2, simulator, seed 3005903)", 3005903, configOneSlotWithWait(3005903),
			Plan{{At: sec(19.5), Kind: ClusterShutdown}, {At: sec(28.7), Kind: Reboot, Target: 2}, {At: sec(27.5), Kind: AgentCut, Target: 0, For: 13 * time.Second},
				{At: sec(33.9), Kind: CoordFreeze, Target: 0, For: 13 * time.Second}},
			[][]string{{"node-2.edge goes down"}, {"coordinator-0 freezes"}, {"node-2.edge NOTREQUESTED", "request withdrawn"},
				{"node-1.edge STARTING"}, {"node-1.edge is up again"}, {"node-0.edge STARTING"}}},
		{"a coordinator resuming over a copied delete marker resumes from the newest status a coordinator wrote there: a node in its return gate keeps its slot (S3, seed 3001817)", 3001817, configOneSlotWithWait(3001817),
			Plan{{At: sec(142.0), Kind: KernelDay, Target: 0}, {At: sec(89.7), Kind: Reboot, Target: 1}, {At: sec(34.7), Kind: Reboot, Target: 2},
				{At: sec(163.7), Kind: APIOutage, Target: 0, For: 192 * time.Second}, {At: sec(277.1), Kind: StatusForger, Target: 2, For: 296 * time.Second},
				{At: sec(47.4), Kind: StatusForger, Target: 0, For: 54 * time.Second}, {At: sec(300), Kind: CoordCrash, Target: 1, For: 5 * time.Second}},
			[][]string{{"a forger", "node-2.edge"}, {"coordinator-1 crashes"}, {"resumes", "3 status(es)"}}},
		{"a decommissioned node's keys go though a copied delete marker was its status key's value when they were due: a later repair puts nothing back (L1, seed 3030372)", 3030372, configOneSlotWithWait(3030372),
			Plan{{At: sec(7.0), Kind: Decommission, Target: 2}, {At: sec(201.0), Kind: StatusForger, Target: 2, For: 233 * time.Second},
				{At: sec(8.6), Kind: StatusForger, Target: 2, For: 36 * time.Second}},
			[][]string{{"node-2.edge COMPLETE", "decommissioned"}, {"removes the keys of decommissioned node-2.edge"}}},
		{"a leader paused between its checks and a status write is fenced by the term of the coordinator that took over (S1, seed 8)", 8, configOneSlotWithWait(8),
			Plan{{At: sec(109.3), Kind: Update, Target: 2}, {At: sec(101.2), Kind: CoordPauseMidWrite, Target: 1, For: 20 * time.Second}},
			[][]string{{"coordinator-1 pauses for 20s between its checks and its write of node-2.edge REQUESTED"},
				{"coordinator-0 writes its term record"}, {"node-2.edge COMPLETE"}, {"coordinator-1: node-2.edge REQUESTED not published", "fenced"}}},
		{"a coordinator alone cut off from the API: the agent, whose node reaches it, does not run on the API-unreachable rule's COMPLETE (S2; seed 218 found it)", 218,
			func() Config { c := three(1, volumes.PolicyWait); c.Active = 5 * time.Minute; return c }(),
			Plan{{At: sec(85), Kind: PDBBlocks, For: 120 * time.Second}, {At: sec(85), Kind: Reboot, Target: 1},
				{At: sec(100), Kind: CoordAPICut, For: 150 * time.Second}},
			[][]string{{"coordinator-0's path to the Kubernetes API is cut"}, {"node-1.edge COMPLETE", "Kubernetes API unreachable for"},
				{"agent of node-1.edge", "comes from the API-unreachable rule", "this node reaches the Kubernetes API"},
				{"coordinator-0 reaches the API again"}, {"node-1.edge COMPLETE", "node drained"}, {"agent of node-1.edge runs the reboot command"}}},
		{"an agent without its state file whose clean-up withdrawal failed replaces the request from before the boot when it publishes its own (L1, seed 4731)", 4731, configOneSlotWithWait(4731),
			Plan{{At: 4948231767, Kind: KernelDay}, {At: 62677399038, Kind: Reboot, Target: 3}, {At: 59421814676, Kind: BusOutage, For: 29 * time.Second},
				{At: 49104948007, Kind: StateLost, Target: 3, For: 39 * time.Second}, {At: 70412604448, Kind: StatusForger, Target: 3, For: 221 * time.Second}},
			[][]string{{"node-3.edge is reinstalled"}, {"agent of node-3.edge: cannot withdraw the drain request"},
				{"agent of node-3.edge: publishing drain request"}, {"agent of node-3.edge runs the reboot command"}}},
		{"a declared whole-cluster shutdown ends without deadlock", 14, three(2, volumes.PolicyWait),
			Plan{{At: sec(5), Kind: ClusterShutdown}},
			[][]string{{"declares a whole-cluster shutdown"}, {"NOTSUPPORTED", "declared whole-cluster shutdown"}}},
		// Agent faults (agentfaults.go): each found its defect on the code before its fix.
		{"a paused agent whose slot was released as a stale holder's does not run on that COMPLETE (S1, agent faults, seed 4002775)", 4002775, configOneSlotWithWait(4002775),
			Plan{{At: 79188258981, Kind: Reboot, Target: 1}, {At: 107205176883, Kind: AgentPausedNotReady, Target: 1, For: 61 * time.Second}},
			[][]string{{"node-1.edge COMPLETE", "node drained"}, {"the agent of node-1.edge is paused"}, {"node-1.edge releases its slot"},
				{"agent of node-1.edge: COMPLETE for request", "says its admission slot was released"}}},
		{"a paused agent reads its status again when its confirmation read is older than ConfirmMaxAge (S1, agent faults, seed 4000294)", 4000294, configOneSlotWithWait(4000294),
			Plan{{At: 212259529593, Kind: Update, Target: 1}, {At: 102509126954, Kind: AgentPausedNotReady, Target: 1, For: 6 * time.Second}},
			[][]string{{"node-1.edge COMPLETE", "node drained"}, {"the agent of node-1.edge is paused"}, {"node-1.edge releases its slot"},
				{"agent of node-1.edge resumes"}, {"agent of node-1.edge: the status read that confirmed", "reading it again"}}},
		{"a NOTSUPPORTED override file lets one operation run (O1, agent faults, seed 4000430)", 4000430, configOneSlotWithWait(4000430),
			Plan{{At: 50655239603, Kind: KernelDay}, {At: 115681560300, Kind: Reboot, Target: 0}, {At: 103854759327, Kind: OverrideUnsupported, Target: 0, For: 39 * time.Second}},
			[][]string{{"writes the override file on node-0.edge: NOTSUPPORTED"}, {"agent of node-0.edge runs the reboot command", "cleared by override NOTSUPPORTED"},
				{"node-0.edge goes down"}, {"node-0.edge: /var/run/reboot-required appears"}, {"agent of node-0.edge runs the reboot command", "cleared by COMPLETE"}}},
		{"an update whose start the state file cannot record is not started: a crash does not run it twice (S5, agent faults, seed 4000546)", 4000546, configOneSlotWithWait(4000546),
			Plan{{At: 34836452956, Kind: KernelDay}, {At: 13867329483, Kind: Update, Target: 1}, {At: 170487616714, Kind: OperatorUncord, Target: 0, For: 35 * time.Second},
				{At: 53616676037, Kind: CoordCrash, Target: 1, For: 33 * time.Second}, {At: 15758230027, Kind: PDBBlocks, Target: 1, For: 169 * time.Second},
				{At: 183569194892, Kind: DiskReadOnly, Target: 1, For: 62 * time.Second}},
			[][]string{{"the disk of node-1.edge refuses writes"}, {"agent of node-1.edge: the update for request", "was not started", "could not be recorded"},
				{"agent of node-1.edge stops", "disk"}, {"agent of node-1.edge restarts"}, {"agent of node-1.edge runs the update command"}, {"agent of node-1.edge: update command succeeded"}}},
		{"a request the state file cannot record is not published: a crash leaves no request its agent takes for another's (L1, agent faults, seed 4000021)", 4000021, configOneSlotWithWait(4000021),
			Plan{{At: 119924917895, Kind: Reboot, Target: 0}, {At: 161395432943, Kind: Reboot, Target: 1}, {At: 163834087562, Kind: DiskReadOnly, Target: 1, For: 7 * time.Second}},
			[][]string{{"agent of node-1.edge cannot save its state"}, {"agent of node-1.edge: cannot publish the drain request: not published while the state file cannot record it"},
				{"agent of node-1.edge stops", "disk"}, {"agent of node-1.edge restarts"}, {"node-1.edge goes down"}}},
		{"no command starts while the override file acted on cannot be removed: a restart does not let it run a second operation (O1, agent faults, a plan made for it)", 7, func() Config {
			c := configOneSlotWithWait(7)
			c.Nodes = 3
			return c
		}(), Plan{{At: sec(20), Kind: DiskReadOnly, Target: 0, For: time.Minute}, {At: sec(25), Kind: OverrideUnsupported, Target: 0},
			{At: sec(30), Kind: Reboot, Target: 0}, {At: sec(150), Kind: Update, Target: 0}},
			[][]string{{"agent of node-0.edge cannot remove the override file"}, {"was not started: the override file that was acted on could not be removed"},
				{"agent of node-0.edge runs the reboot command", "cleared by override NOTSUPPORTED"}, {"node-0.edge goes down"},
				{"agent of node-0.edge runs the update command", "cleared by COMPLETE"}}},
		// (Run with seed 4007114 since the stale-holder timeout counts from the coordinator's own sight of
		// the node NotReady: with 4006851's draws the slot is released a tick later and the update's
		// command no longer fails first.)
		{"an agent's own withdrawal does not cancel the operation an override then let run (L1, agent faults, seed 4006851)", 4007114, configOneSlotWithWait(4006851),
			Plan{{At: 28864591735, Kind: Update, Target: 1}, {At: 36801651312, Kind: ReplicaFails, Target: 1, For: 20 * time.Second},
				{At: 4446175041, Kind: CoordCrash, Target: 1, For: 27 * time.Second}, {At: 76350474841, Kind: StatusForger, Target: 1, For: 30 * time.Second},
				{At: 100960631699, Kind: StatusForger, Target: 1, For: 43 * time.Second}, {At: 16420127125, Kind: StatusForger, Target: 0, For: 36 * time.Second},
				{At: 44899227363, Kind: AgentPausedNotReady, Target: 1, For: 52 * time.Second}, {At: 108830515969, Kind: OverrideUnsupported, Target: 1, For: 20 * time.Second}},
			[][]string{{"node-1.edge releases its slot"}, {"writes the override file on node-1.edge: NOTSUPPORTED"}, {"agent of node-1.edge resumes"},
				{"agent of node-1.edge runs the update command", "cleared by override NOTSUPPORTED"}, {"agent of node-1.edge: update command failed"},
				{"agent of node-1.edge runs the update command", "cleared by override NOTSUPPORTED"}}},
		{"kubectl uncordon then kubectl cordon during the drain makes the cordon the operator's: the drain starts over under it and " +
			"the withdrawal leaves it (S4, issue 23 defect 4, seed 5000063)", 5000063, configOneSlotWithWait(5000063),
			Plan{{At: 61028869419, Kind: Reboot, Target: 2}, {At: 88428344919, Kind: OperatorRecordon, Target: 2, For: 62 * time.Second}},
			[][]string{{"an operator uncordons node-2.edge (kubectl uncordon)"}, {"an operator cordons node-2.edge again"},
				{"node-2.edge STARTING", "cordoned again by someone else during the drain"}, {"removes its stale cordon record from node-2.edge"},
				{"node-2.edge COMPLETE"}, {"node-2.edge goes down"}, {"node-2.edge NOTREQUESTED", "request withdrawn"}}},
		{"edgedrain.io/keep-cordoned set during the drain keeps the node cordoned after it, the operator's from then on " +
			"(S4, issue 23 defect 4c, seed 5000348)", 5000348, configOneSlotWithWait(5000348),
			Plan{{At: 92286624107, Kind: Update, Target: 3}, {At: 10344424448, Kind: KeepCordoned, Target: 3, For: 92 * time.Second}},
			[][]string{{"an operator annotates node-3.edge edgedrain.io/keep-cordoned"}, {"node-3.edge COMPLETE"},
				{"removes its cordon record from node-3.edge and leaves it cordoned", "asked to keep it cordoned"},
				{"node-3.edge NOTREQUESTED", "node left cordoned"}, {"the operator uncordons node-3.edge (kept cordoned"}}},
		{"a drain whose Node is deleted ends after a minute and frees its slot; the Node registered again is drained anew " +
			"(N2, issue 23 defect 4b, seed 5003172)", 5003172, configOneSlotWithWait(5003172),
			Plan{{At: 84960962582, Kind: Reboot, Target: 1}, {At: 117062463914, Kind: NodeDeletedForGood, Target: 1, For: 10 * time.Minute}},
			[][]string{{"node-1.edge's Node object is deleted"}, {"node-1.edge CORDONED", "the Node object is missing"},
				{"node-1.edge FAILEDDRAIN", "the Node object has been gone for 1m0s"}, {"node-1.edge's Node object registers again"},
				{"node-1.edge STARTING", "node-1.edge-req2"}, {"node-1.edge COMPLETE", "node-1.edge-req2"}}},
		{"a Node deleted during the drain and registered again cordoned is drained anew, not taken for the drained one " +
			"(N1, issue 23 defect 4b, seed 5000927)", 5000927, configOneSlotWithWait(5000927),
			Plan{{At: 20084959872, Kind: Update, Target: 1}, {At: 17214519505, Kind: NodeDeleted, Target: 1, For: 3 * time.Second}},
			[][]string{{"node-1.edge's Node object is deleted"}, {"node-1.edge's Node object registers again", "cordoned"},
				{"node-1.edge STARTING", "the Node object was replaced during the drain"},
				{"node-1.edge CORDONED", "already cordoned by someone else"}, {"node-1.edge COMPLETE"}}},
		{"a node COMPLETE for a declared whole-cluster shutdown whose Node is deleted before it goes down keeps its slot (or releases " +
			"it on the bus) before another drain is admitted in its place (S3, seed 5006715)", 5006715, configOneSlotWithWait(5006715),
			Plan{{At: 62388061566, Kind: ClusterShutdown}, {At: 61154579541, Kind: Reboot, Target: 0},
				{At: 28934930190, Kind: StatusForger, Target: 0, For: 31 * time.Second}, {At: 8145738905, Kind: StatusForger, Target: 2, For: 18 * time.Second},
				{At: 59455684834, Kind: NodeDeleted, Target: 3, For: 229 * time.Second}},
			// (Its slot is released on the bus only if the declaration, read afresh, still holds;
			// here it ends first, and the node holds its slot until it is back.)
			[][]string{{"node-3.edge COMPLETE", "node drained"}, {"node-3.edge's Node object is deleted"},
				{"node-3.edge goes down"}, {"node-3.edge is up again"}, {"node-1.edge STARTING"}}},
		{"a new request waits for the uncordon in flight of the withdrawn one, which would remove its cordon (S2, seed 5008849)", 5008849,
			configOneSlotWithWait(5008849), Plan{{At: 30275002312, Kind: KernelDay}, {At: 39351704551, Kind: Update, Target: 0}, {At: 88501934526, Kind: Reboot, Target: 1}},
			[][]string{{"node-0.edge NOTREQUESTED", "request withdrawn; uncordoning the node"},
				{"node-0.edge REQUESTED", "new request replaces the previous one"}, {"coordinator-0 uncordons node-0.edge"},
				{"node-0.edge STARTING"}, {"coordinator-0 cordons node-0.edge"}, {"node-0.edge COMPLETE", "node drained"},
				{"agent of node-0.edge runs the update command"}}},
		{"a node that went NOTSUPPORTED as the last one of the cluster is in maintenance until it is back: a Node registering " +
			"again meanwhile waits for it (S3, seed 6001898)", 6001898, configOneSlotWithWait(6001898),
			Plan{{At: 60577596428, Kind: KernelDay}, {At: 13731593710, Kind: NodeDeletedForGood, Target: 0, For: 10 * time.Minute}},
			[][]string{{"node-1.edge NOTSUPPORTED", "single-node cluster"}, {"node-0.edge's Node object registers again"},
				{"node-0.edge REQUESTED", "node-1.edge in maintenance"}, {"node-1.edge goes down"}, {"node-1.edge is up again"},
				{"node-0.edge STARTING"}, {"node-0.edge COMPLETE"}}},
		{"two slots and the wait policy: the two nodes holding a volume's only copies are not in maintenance together, " +
			"which would have each drain wait for the other's copy (L1, issue 23 defect 5, seed 88)", 88, ConfigFor(88),
			Plan{{At: 78020173287, Kind: KernelDay}},
			[][]string{{"every node gets /var/run/reboot-required"}, {"STARTING"}, {"REQUESTED", "the other copies of volume", "in maintenance"},
				{"COMPLETE"}, {"COMPLETE"}, {"COMPLETE"}}},
		{"a drain whose Node object went missing does not go COMPLETE by the API-unreachable rule: the name registered again " +
			"schedulable before the outage (S2, seed 2065)", 2065, ConfigFor(2065),
			Plan{{At: 36844658126, Kind: Update, Target: 1}, {At: 97303255304, Kind: APIOutage, Target: 1, For: 175 * time.Second},
				{At: 42880069756, Kind: NodeDeleted, Target: 1, For: 49 * time.Second}},
			[][]string{{"node-1.edge CORDONED", "the Node object is missing"}, {"node-1.edge's Node object registers again", "schedulable"},
				{"the Kubernetes API is unreachable"}, {"node-1.edge CORDONED", "Node object was missing at the last check"},
				{"node-1.edge STARTING", "the Node object was replaced"}, {"node-1.edge COMPLETE", "node drained"}}},
		{"a coordinator waking from a pause acts on a declared whole-cluster shutdown only once the requests read afresh " +
			"confirm it: the declaration had ended while it was paused (R2, seed 3833)", 3833, configOneSlotWithWait(3833),
			Plan{{At: 37782066654, Kind: ClusterShutdown}, {At: 72608837079, Kind: CoordFreeze, Target: 1, For: 30 * time.Second},
				{At: 55104560861, Kind: AgentCrash, Target: 0, For: 38 * time.Second}},
			[][]string{{"coordinator-0 freezes"}, {"agent of node-2.edge: the node is back"}, {"node-0.edge goes down"},
				{"node-2.edge NOTREQUESTED", "request withdrawn"}, {"node-1.edge STARTING"}, {"node-1.edge COMPLETE"}}},
		{"an agent whose failed drain's withdrawal cannot be recorded keeps the request: restarted after a crash it would take " +
			"its own withdrawal for an operator's and cancel the reboot for good (L1, seed 3182)", 3182, ConfigFor(3182),
			Plan{{At: 103410546346, Kind: Reboot, Target: 0}, {At: 98735445886, Kind: PDBBlocks, Target: 1, For: 236 * time.Second},
				{At: 228998881591, Kind: DiskReadOnly, Target: 0, For: 71 * time.Second},
				{At: 10757298520, Kind: AgentPausedNotReady, Target: 1, For: 49 * time.Second}},
			[][]string{{"the disk of node-0.edge refuses writes"}, {"node-0.edge FAILEDDRAIN"},
				{"agent of node-0.edge", "not withdrawn while the state file cannot record it"}, {"agent of node-0.edge stops (crash"},
				{"agent of node-0.edge restarts"}, {"node-0.edge COMPLETE"}, {"agent of node-0.edge runs the reboot command"}}},
		{"an agent restarted while its update ran, whose request is withdrawn on the bus, does not run the update again: it had " +
			"succeeded and been withdrawn before a failing disk let the agent record it (S5, seed 26150)", 26150, noOutcomeFile(ConfigFor(26150)),
			Plan{{At: 48029143901, Kind: Update, Target: 0}, {At: 49257198293, Kind: Reboot, Target: 2},
				{At: 25332551556, Kind: ForgedStatus, Target: 2, For: 2 * time.Second}, {At: 192713612, Kind: Override, Target: 2, For: 4 * time.Second},
				{At: 42070967946, Kind: CoordCrash, Target: 1, For: 27 * time.Second},
				{At: 5966117094, Kind: CoordPauseMidWrite, Target: 0, For: 11 * time.Second},
				{At: 90411897497, Kind: DiskFull, Target: 0, For: 5 * time.Second},
				{At: 88902692415, Kind: OverrideUnsupported, Target: 0, For: time.Second}},
			[][]string{{"agent of node-0.edge runs the update command", "cleared by override NOTSUPPORTED"},
				{"agent of node-0.edge cannot save its state"}, {"agent of node-0.edge: update command succeeded"},
				{"agent of node-0.edge stops (crash"}, {"agent of node-0.edge restarts"},
				{"agent of node-0.edge", "is withdrawn on the bus", "it does not run again"}}},
		{"an agent restarted after an override let its operation run, before the override's file could be removed, removes it " +
			"before the command: left, it let the next operation run without a drain (O1, seed 900632)", 900632, ConfigFor(900632),
			Plan{{At: 119198319226, Kind: KernelDay}, {At: 198984814873, Kind: Update, Target: 0},
				{At: 140879971532, Kind: AgentCrash, Target: 0, For: 27 * time.Second},
				{At: 33090019456, Kind: OverrideUnsupported, Target: 0, For: 8 * time.Second},
				{At: 81224342538, Kind: DiskReadOnly, Target: 0, For: 49 * time.Second},
				{At: 69552983509, Kind: NodeDeleted, Target: 1, For: 24 * time.Second}},
			[][]string{{"agent of node-0.edge cannot remove the override file"}, {"agent of node-0.edge stops (crash)"},
				{"agent of node-0.edge restarts"}, {"agent of node-0.edge removes the override file acted on"},
				{"agent of node-0.edge runs the reboot command", "cleared by override NOTSUPPORTED"},
				{"agent of node-0.edge: publishing drain request"}, {"agent of node-0.edge runs the update command", "cleared by COMPLETE"}}},
		{"a coordinator cut from the API releases no COMPLETE holder as a Node gone on its frozen view: the Node had registered " +
			"again, unseen (R2, seed 926487)", 926487, ConfigFor(926487),
			Plan{{At: 79918004332, Kind: NodeReregister, Target: 1, For: 16 * time.Second},
				{At: 83939332769, Kind: CoordAPICut, Target: 0, For: 197 * time.Second},
				{At: 41451970971, Kind: OperatorPutsRequest, Target: 1, For: 102 * time.Second}},
			[][]string{{"node-1.edge COMPLETE", "node drained"}, {"node-1.edge's Node object is deleted and registered again"},
				{"coordinator-0's path to the Kubernetes API is cut"}, {"coordinator-0 lost the Lease to the API outage"},
				{"the operator withdraws request node-1.edge-operator1"}, {"node-1.edge NOTREQUESTED", "back from its operation"},
				{"coordinator-0 leaves outage mode"}, {"node-1.edge NOTREQUESTED", "idle; node uncordoned"}}},
		{"a COMPLETE decided before a coordinator's pause and written after it, held behind the paused write, is judged as of " +
			"its decision: a pod that landed during the pause is the residual of any check before an act (S2 check, seed 1123563)",
			1123563, ConfigFor(1123563),
			Plan{{At: 137560538047, Kind: Reboot, Target: 0}, {At: 135813684643, Kind: Reboot, Target: 3},
				{At: 157964465660, Kind: CoordPauseMidWrite, Target: 0, For: 8 * time.Second},
				{At: 185907869586, Kind: CoordBusCut, Target: 0, For: 9 * time.Second},
				{At: 183316467022, Kind: CoordPauseMidWrite, Target: 0, For: 27 * time.Second},
				{At: 47640614838, Kind: NodeDeleted, Target: 2, For: 128 * time.Second},
				{At: 161617650420, Kind: PodPinned, Target: 3}},
			[][]string{{"coordinator-0 cordons node-3.edge"}, {"coordinator-0 pauses for 27s"},
				{"a pod created with spec.nodeName node-3.edge"}, {"node-3.edge COMPLETE"}}},
		{"the last node up told NOTSUPPORTED in a declared whole-cluster shutdown takes its slot in that admission pass: a node " +
			"down by power loss whose request still waited is not admitted beside it (S3, seed 1130707)", 1130707, ConfigFor(1130707),
			Plan{{At: 55320478358, Kind: ClusterShutdown}, {At: 27435037178, Kind: Reboot, Target: 1},
				{At: 3404818989, Kind: ReplicaFails, Target: 2, For: 13 * time.Second}, {At: 69584986037, Kind: APIOutage, Target: 2, For: 21 * time.Second},
				{At: 80418618662, Kind: WatchLag, Target: 1, For: 28 * time.Second}, {At: 5496720386, Kind: PowerCycle, Target: 1, For: 33 * time.Second},
				{At: 164545860019, Kind: PowerCycle, Target: 0, For: 27 * time.Second},
				{At: 95753272672, Kind: CoordAPICut, Target: 0, For: 16 * time.Second},
				{At: 73361922021, Kind: NodeDeleted, Target: 2, For: 213 * time.Second},
				{At: 108443643037, Kind: OperatorReplaysRequest, Target: 1, For: 61 * time.Second}},
			[][]string{{"node-0.edge loses power"}, {"node-2.edge FAILEDDRAIN", "the Node object has been gone"},
				{"node-1.edge NOTSUPPORTED", "declared whole-cluster shutdown"}, {"node-0.edge REQUESTED", "node-1.edge in maintenance"}}},
		{"a drain whose COMPLETE was sent in a NATS outage and which ended as its Node was gone freed its slot then: the node " +
			"registering again and its request withdrawn take no slot back through the return gate (S3, seed 1205730)", 1205730, ConfigFor(1205730),
			Plan{{At: 37986945485, Kind: KernelDay}, {At: 137415018626, Kind: Reboot, Target: 0}, {At: 22233793916, Kind: Update, Target: 3},
				{At: 75263345810, Kind: CoordCrash, Target: 3, For: 7 * time.Second}, {At: 40019783081, Kind: BusLossy, Target: 3, For: 7 * time.Second},
				{At: 90009437688, Kind: BusOutage, Target: 2, For: 37 * time.Second},
				{At: 25494889400, Kind: CoordBusCut, Target: 0, For: 18 * time.Second},
				{At: 122087403340, Kind: NodeDeletedForGood, Target: 3, For: 480 * time.Second}},
			[][]string{{"node-3.edge FAILEDDRAIN", "the Node object has been gone"}, {"node-0.edge STARTING"},
				{"node-3.edge's Node object registers again"}, {"node-3.edge NOTREQUESTED", "request withdrawn"}}},
		{"a decommissioned machine whose decommission was withdrawn before its power-off and whose Node registered again is a " +
			"node of the cluster: its idle status stays on the bus (L1 check, seed 1220046)", 1220046, ConfigFor(1220046),
			Plan{{At: 45585035141, Kind: Update, Target: 1}, {At: 21277275951, Kind: Reboot, Target: 2},
				{At: 32283501499, Kind: AgentCrash, Target: 2, For: 37 * time.Second}, {At: 83672850069, Kind: Override, Target: 0, For: 24 * time.Second},
				{At: 95519387614, Kind: Withdraw, Target: 0, For: 12 * time.Second}, {At: 36558962578, Kind: AgentCrash, Target: 1, For: 18 * time.Second},
				{At: 11384488539, Kind: Decommission, Target: 0}, {At: 12193244062, Kind: NodeDeleted, Target: 0, For: 255 * time.Second},
				{At: 14799366576, Kind: NodeDeletedForGood, Target: 2, For: 240 * time.Second}},
			[][]string{{"node-0.edge COMPLETE", "node decommissioned"}, {"edgedrainctl withdraw node-0.edge"},
				{"node-0.edge's Node object registers again"}, {"agent of node-0.edge", "the decommission is cancelled"},
				{"node-0.edge NOTREQUESTED", "request withdrawn"}}},
		{"a decommission's COMPLETE decided but not yet on the bus does not take its node out of a whole-cluster shutdown's " +
			"declaration: its publication failed and the drain went back to CORDONED (R2, seed 1310013)", 1310013, ConfigFor(1310013),
			Plan{{At: 42296020288, Kind: ClusterShutdown}, {At: 35265198638, Kind: BusOutage, For: 37 * time.Second},
				{At: 8014578100, Kind: Decommission, Target: 1}, {At: 109742333238, Kind: StreamElection, Target: 1, For: 4435 * time.Millisecond}},
			[][]string{{"coordinator-0 deletes the Node object of node-1.edge"}, {"node-1.edge CORDONED", "the COMPLETE could not be published"},
				{"node-1.edge COMPLETE", "node decommissioned"}}},
		{"an operator's request put over a decommissioned node's, and withdrawn, leaves no status on the bus: the idle status " +
			"of a node out of the cluster goes (L1, seed 61)", 61, ConfigFor(61),
			Plan{{At: 15366359812, Kind: CoordCrash, Target: 0, For: 9 * time.Second}, {At: 33320371806, Kind: Decommission, Target: 1},
				{At: 290724037215, Kind: OperatorReplaysRequest, Target: 1, For: 73 * time.Second}},
			[][]string{{"node-1.edge COMPLETE", "node decommissioned"}, {"node-1.edge is powered off for good"},
				{"an operator's bus identity puts request"}, {"the operator withdraws request"},
				{"node-1.edge NOTREQUESTED", "request withdrawn"}, {"removes the keys of decommissioned node-1.edge"}}},
		{"a pod the scheduler bound to the node just before its cordon, landed after the eviction attempt listed the pods, is " +
			"evicted before COMPLETE (S2, issue 23, seed 7000001)", 7000001, ConfigFor(7000001),
			Plan{{At: 100 * time.Second, Kind: Update, Target: 0}, {At: 90 * time.Second, Kind: BindRace, Target: 0}},
			[][]string{{"coordinator-0 cordons node-0.edge"}, {"a pod the scheduler bound to node-0.edge just before its cordon lands on it"},
				{"node-0.edge DRAINRETRYING", "pod(s) landed on the node after the attempt listed its pods"},
				{"node-0.edge COMPLETE", "node drained"}, {"agent of node-0.edge runs the update command"}}},
		{"a drain whose Node was deleted and registered again schedulable while it waited for its volumes does not go COMPLETE by " +
			"the API-unreachable rule: the node informer's last view shows the node uncordoned (S2, seed 7001876)", 7001876, ConfigFor(7001876),
			Plan{{At: 7900 * time.Millisecond, Kind: Reboot, Target: 1}, {At: 58800 * time.Millisecond, Kind: APIOutage, Target: 2, For: 223 * time.Second},
				{At: 36500 * time.Millisecond, Kind: NodeReregister, Target: 1, For: 20 * time.Second},
				{At: 8300 * time.Millisecond, Kind: NodeDeletedForGood, Target: 0, For: 4 * time.Minute}},
			[][]string{{"coordinator-1 cordons node-1.edge"}, {"node-1.edge's Node object is deleted and registered again"},
				{"the Kubernetes API is unreachable"}, {"node-1.edge CORDONED", "the node informer's last view shows the node uncordoned"},
				{"coordinator-1 leaves outage mode"}, {"node-1.edge STARTING", "node was uncordoned during the drain"}, {"node-1.edge COMPLETE", "node drained"}}},
		{"a cordon whose client timed out lands after the drain was withdrawn and its uncordon found nothing to undo: the " +
			"coordinator uncordons the node when its informer shows edgedrain's record on it (S4, issue 23, seed 7002347)", 7002347, ConfigFor(7002347),
			Plan{{At: 158400 * time.Millisecond, Kind: Reboot, Target: 0}, {At: 61700 * time.Millisecond, Kind: Reboot, Target: 1},
				{At: 166100 * time.Millisecond, Kind: Withdraw, Target: 0, For: 14 * time.Second},
				{At: 150900 * time.Millisecond, Kind: WritesLate, Target: 0, For: 28 * time.Second}},
			[][]string{{"node-0.edge STARTING", "context deadline exceeded"}, {"edgedrainctl withdraw node-0.edge"},
				{"node-0.edge NOTREQUESTED", "idle"}, {"a cordon sent earlier, whose client timed out, lands late (done)"},
				{"node-0.edge NOTREQUESTED", "edgedrain's cordon record is on the node"}, {"coordinator-0 uncordons node-0.edge"}}},
		{"a confirmation read answered by a follower that has no message under the node's key yet is a stale read, read again, not " +
			"\"no status\": the agent took COMPLETE and would wait for a status that never comes (L1, issue 23, seed 8000058)", 8000058, ConfigFor(8000058),
			Plan{{At: 73040281166, Kind: Update, Target: 0}, {At: 339932810, Kind: Reboot, Target: 1},
				{At: 54899965194, Kind: CoordCrash, Target: 2, For: 3 * time.Second}, {At: 49470163087, Kind: FollowerLags, Target: 0, For: 37 * time.Second}},
			[][]string{{"a follower of the status stream stops applying"}, {"node-0.edge COMPLETE", "node drained"},
				{"agent of node-0.edge: its read is answered by a lagging follower: revision 0"}, {"agent of node-0.edge runs the update command"}}},
		{"a resume reads the statuses as of the bucket's last revision: a follower that lags, which had no status for a node " +
			"yet, is not taken for its answer and the transition is not announced again (E1, issue 23, seed 8000487)", 8000487, ConfigFor(8000487),
			Plan{{At: 23988637509, Kind: KernelDay}, {At: 14155890710, Kind: AgentPausedNotReady, Target: 0, For: 16 * time.Second},
				{At: 30491230492, Kind: RecordonNoCoordinator, Target: 0, For: 4 * time.Second}, {At: 19244763185, Kind: FollowerLags, Target: 0, For: 31 * time.Second}},
			[][]string{{"a follower of the status stream stops applying"}, {"node-1.edge REQUESTED"}, {"coordinator-0 crashes"},
				{"a read of status/node-1.edge answered by a lagging follower is behind revision", "read from the stream's leader"},
				{"coordinator-0 resumes: 3 request(s), 3 status(es)"}}},
		{"a fenced write reads the term record as of the bucket's last revision: a follower that lags answers with the run's own " +
			"record while another coordinator's is written, and the ex-leader stepped over the takeover (S1, issue 23, seed 8000773)", 8000773, ConfigFor(8000773),
			Plan{{At: 72833175014, Kind: KernelDay}, {At: 107080953981, Kind: CoordAPICut, Target: 0, For: 225 * time.Second},
				{At: 99974187054, Kind: FollowerLags, Target: 0, For: 49 * time.Second}},
			[][]string{{"a follower of the status stream stops applying"}, {"coordinator-0's path to the Kubernetes API is cut"},
				{"coordinator-1 becomes the active coordinator"}, {"a read of status/_coordinator answered by a lagging follower is behind revision", "read from the stream's leader"},
				{"coordinator-0 leaves outage mode: another coordinator took over"}}},
		{"two slots and the wait policy: a copy being rebuilt counts as one, so the node it is rebuilt on and the node with " +
			"the other copy are not in maintenance together (L1, issue 23 defect 5, seed 8006130)", 8006130, ConfigFor(8006130),
			Plan{{At: 50061341566, Kind: KernelDay}, {At: 78732339367, Kind: ReplicaFails, Target: 1, For: 40 * time.Second}},
			[][]string{{"replica vol0-r1 of vol0 on node-0.edge fails"}, {"STARTING"}, {"REQUESTED", "the other copies of volume vol0"},
				{"COMPLETE"}, {"COMPLETE"}, {"COMPLETE"}}},
		{"two slots and the wait policy: two drains admitted while their volume had a third copy, which then failed, do not " +
			"wait for each other's copy for good: the one admitted last gives way, its cordon undone, and is drained after the " +
			"other (L1, seed 104119)", 104119, ConfigFor(104119),
			Plan{{At: 23174578204, Kind: KernelDay}, {At: 50865135056, Kind: BusOutage, Target: 3, For: 39 * time.Second},
				{At: 177522897199, Kind: ReplicaFails, Target: 0, For: 18 * time.Second}, {At: 96403649425, Kind: PDBBlocks, Target: 0, For: 287 * time.Second},
				{At: 25809888684, Kind: CoordBusCut, Target: 0, For: 21 * time.Second}, {At: 171979111477, Kind: CoordPauseMidWrite, Target: 0, For: 29 * time.Second},
				{At: 31665363042, Kind: CoordPauseMidWrite, Target: 0, For: 15 * time.Second}},
			[][]string{{"replica vol0-r1 of vol0 on node-0.edge fails"}, {"node-2.edge REQUESTED", "giving way: the other copies of volume", "are on node-1.edge"},
				{"uncordons node-2.edge"}, {"node-1.edge COMPLETE", "node drained"}, {"node-2.edge COMPLETE", "node drained"}}},
		{"the same when the third copy fails as both drains wait at their first volume check, their cordons landed late " +
			"(L1, seed 315217)", 315217, ConfigFor(315217),
			Plan{{At: 28706434336, Kind: KernelDay}, {At: 127056793699, Kind: Reboot, Target: 1}, {At: 132537881166, Kind: Reboot, Target: 2},
				{At: 49565661771, Kind: CoordCrash, Target: 0, For: 17 * time.Second}, {At: 150418895039, Kind: ReplicaFails, Target: 2, For: 39 * time.Second},
				{At: 51298317182, Kind: CoordAPICut, Target: 0, For: 17 * time.Second}, {At: 113840295197, Kind: WritesLate, Target: 0, For: 33 * time.Second},
				{At: 87809161593, Kind: WritesLate, Target: 0, For: 5 * time.Second}},
			[][]string{{"replica vol0-r1 of vol0 on node-0.edge fails"}, {"node-2.edge REQUESTED", "giving way: the other copies of volume", "are on node-1.edge"},
				{"uncordons node-2.edge"}, {"node-1.edge COMPLETE", "node drained"}, {"node-2.edge COMPLETE", "node drained"}}},
		{"the same with three volumes and two coordinators, the third copy failing as both drains evict (L1, seed 412717)",
			412717, ConfigFor(412717),
			Plan{{At: 71088137588, Kind: KernelDay}, {At: 9100432213, Kind: Update, Target: 1}, {At: 13693132157, Kind: ReplicaFails, Target: 2, For: 37 * time.Second},
				{At: 142033280201, Kind: ReplicaFails, Target: 1, For: 2 * time.Second}, {At: 76170693108, Kind: CoordCrash, Target: 2, For: 30 * time.Second}},
			[][]string{{"replica vol1-r1 of vol1 on node-1.edge fails"}, {"node-0.edge REQUESTED", "giving way: the other copies of volume", "are on node-2.edge"},
				{"uncordons node-0.edge"}, {"node-2.edge COMPLETE", "node drained"}, {"node-0.edge COMPLETE", "node drained"}}},
		{"the same on four nodes, the drain admitted first still retrying its evictions against a PodDisruptionBudget " +
			"(L1, seed 514833)", 514833, ConfigFor(514833),
			Plan{{At: 12459820715, Kind: KernelDay}, {At: 179393684089, Kind: ReplicaFails, Target: 1, For: time.Second},
				{At: 109106556326, Kind: PDBBlocks, Target: 2, For: 207 * time.Second}, {At: 44314793047, Kind: KubeletDown, Target: 2, For: 28 * time.Second}},
			[][]string{{"replica vol1-r1 of vol1 on node-1.edge fails"}, {"node-2.edge REQUESTED", "giving way: the other copies of volume", "are on node-0.edge"},
				{"uncordons node-2.edge"}, {"node-0.edge COMPLETE", "node drained"}, {"node-2.edge COMPLETE", "node drained"}}},
		{"the same for an update and a reboot, the uncordon of the drain that gives way landing late (L1, seed 604476)",
			604476, ConfigFor(604476),
			Plan{{At: 87691418201, Kind: Reboot, Target: 1}, {At: 80075002507, Kind: Update, Target: 2}, {At: 102207948502, Kind: ReplicaFails, Target: 1, For: 22 * time.Second},
				{At: 85075475077, Kind: PDBBlocks, Target: 1, For: 69 * time.Second}, {At: 75197470369, Kind: WritesLate, Target: 0, For: 50 * time.Second}},
			[][]string{{"replica vol0-r1 of vol0 on node-0.edge fails"}, {"node-1.edge REQUESTED", "giving way: the other copies of volume", "are on node-2.edge"},
				{"uncordons node-1.edge"}, {"node-2.edge COMPLETE", "node drained"}, {"node-1.edge COMPLETE", "node drained"}}},
		{"a coordinator whose clock is ahead does not release a NotReady holder's slot early: it counts NotReady on its own " +
			"clock, not from the Node condition's time the control plane wrote (R2, issue 23, seed 44)", 44, ConfigFor(44),
			Plan{{At: 7718000000, Kind: Reboot, Target: 2}, {At: 0, Kind: CoordClockSkew, Target: 0, For: 7 * time.Second}},
			[][]string{{"the clock of coordinator-0 is off by 7s"}, {"node-2.edge COMPLETE", "node drained"}, {"node-2.edge goes down"},
				{"node-2.edge COMPLETE", "admission slot released"}}},
		{"a node without a real-time clock reinstalled withdraws its old request once NTP has set its clock: the boot time read at " +
			"start, on the clock not yet set, made the request look made since the boot (L1, issue 23, seed 9000410)", 9000410, ConfigFor(9000410),
			Plan{{At: 120718432418, Kind: KernelDay}, {At: 196843538230, Kind: StateLost, Target: 1, For: 37 * time.Second},
				{At: 147159268082, Kind: CoordFreeze, Target: 0, For: 38 * time.Second}, {At: 24616375368, Kind: KeepCordoned, Target: 2, For: 75 * time.Second},
				{At: 0, Kind: NoRTC, Target: 1, For: 38 * time.Second}},
			[][]string{{"node-1.edge COMPLETE", "node drained"}, {"node-1.edge is reinstalled"}, {"node-1.edge boots without a real-time clock"},
				{"agent of node-1.edge withdraws request node-1.edge-req2, left from before the boot"},
				{"COMPLETE", "node drained"}, {"COMPLETE", "node drained"}}},
		{"a node reinstalled after its clock stepped back further than its request's age still withdraws the request its last " +
			"boot left: the request names the boot it was made in (L1, seed 64603)", 64603, ConfigFor(64603),
			Plan{{At: 123016988386, Kind: KernelDay}, {At: 214011433234, Kind: StateLost, Target: 2, For: 8 * time.Second},
				{At: 192018048753, Kind: ClockStep, Target: 2, For: -511 * time.Second}},
			[][]string{{"node-2.edge REQUESTED"}, {"the clock of node-2.edge is off by -8m31s"}, {"node-2.edge is reinstalled"},
				{"agent of node-2.edge withdraws request node-2.edge-req2, left from before the boot"}}},
		{"the same on a node without a real-time clock whose clock then steps back (L1, seed 50796)", 50796, ConfigFor(50796),
			Plan{{At: 106176641421, Kind: KernelDay}, {At: 166858456288, Kind: StateLost, Target: 1, For: 17 * time.Second},
				{At: 190609531647, Kind: ClockStep, Target: 1, For: -439 * time.Second}, {At: 0, Kind: NoRTC, Target: 1, For: 68 * time.Second}},
			[][]string{{"node-1.edge REQUESTED"}, {"node-1.edge is reinstalled"}, {"node-1.edge boots without a real-time clock"},
				{"agent of node-1.edge withdraws request node-1.edge-req2, left from before the boot"}}},
		{"a COMPLETE node that stops matching --node-selector keeps its slot until it is back: it is there, not a Node gone " +
			"(R2, issue 23, seed 648)", 648, ConfigFor(648),
			Plan{{At: 18864760610, Kind: Update, Target: 0}, {At: 32108551046, Kind: AgentPausedNotReady, Target: 0, For: 55 * time.Second},
				{At: 51369275008, Kind: SelectorLeaveForGood, Target: 0}},
			[][]string{{"node-0.edge COMPLETE", "node drained"}, {"node-0.edge stops matching --node-selector"},
				{"agent of node-0.edge runs the update command"}, {"coordinator-0 uncordons node-0.edge"}, {"the return gate of node-0.edge ended (healthy)"}}},
		{"a node that stops matching --node-selector is not taken for down under a declared whole-cluster shutdown while it is " +
			"up (R2, issue 23, seed 1061)", 1061, ConfigFor(1061),
			Plan{{At: 26930494608, Kind: ClusterShutdown}, {At: 32817464315, Kind: SelectorLeave, Target: 2, For: 111 * time.Second},
				{At: 42739182237, Kind: SelectorLeaveForGood, Target: 0}},
			[][]string{{"node-0.edge stops matching --node-selector"}, {"node-0.edge COMPLETE", "node drained"}, {"node-0.edge goes down"},
				{"node-0.edge COMPLETE", "went down under the declared whole-cluster shutdown"}}},
		{"a drain under way whose node stops matching --node-selector ends its own way: FAILEDDRAIN, never a go-ahead, edgedrain's " +
			"cordon undone, drained anew once it matches again (issue 23, seed 9001167)", 9001167, ConfigFor(9001167),
			Plan{{At: 69831466326, Kind: Update, Target: 0}, {At: 15310874631, Kind: PDBBlocks, Target: 2, For: 217 * time.Second},
				{At: 129120944755, Kind: SelectorLeave, Target: 0, For: 112 * time.Second}},
			[][]string{{"node-0.edge DRAINRETRYING"}, {"node-0.edge stops matching --node-selector"},
				{"node-0.edge FAILEDDRAIN", "has not matched this coordinator's --node-selector"}, {"coordinator-0 uncordons node-0.edge"},
				{"node-0.edge matches --node-selector"}, {"node-0.edge COMPLETE", "node drained"}, {"agent of node-0.edge runs the update command"}}},
		{"a coordinator resuming a return gate another replica started, whose clock was minutes behind, does not time it out at " +
			"once: the timeout counts no earlier than the resume (R1, issue 23, seed 9002139)", 9002139, ConfigFor(9002139),
			Plan{{At: 74450426880, Kind: Reboot, Target: 1}, {At: 125799366218, Kind: APIOutage, Target: 3, For: 195 * time.Second},
				{At: 223071031413, Kind: StateLost, Target: 1, For: 24 * time.Second}, {At: 154265653371, Kind: AgentCrash, Target: 0, For: 28 * time.Second},
				{At: 0, Kind: CoordClockSkew, Target: 0, For: -537 * time.Second}},
			[][]string{{"the clock of coordinator-0 is off by -8m57s"}, {"node-1.edge goes down"}, {"coordinator-1 resumes"},
				{"the return gate of node-1.edge ended"}}},
		{"a decommission whose node an operator uncordoned and cordoned again mid-drain drains it again before it deletes the " +
			"Node: a pod landed in between (S2, seed 40661)", 40661, ConfigFor(40661),
			Plan{{At: 31989399896, Kind: Update, Target: 0}, {At: 140869133677, Kind: Update, Target: 1}, {At: 33530985473, Kind: Update, Target: 2},
				{At: 13607156687, Kind: BusLossy, Target: 1, For: 25 * time.Second}, {At: 132090405936, Kind: Decommission, Target: 0},
				{At: 108072438295, Kind: OperatorRecordon, Target: 0, For: 80 * time.Second},
				{At: 94813012660, Kind: OperatorReplaysRequest, Target: 0, For: 69 * time.Second}},
			[][]string{{"an operator uncordons node-0.edge"}, {"an operator cordons node-0.edge again"},
				{"node-0.edge STARTING", "uncordoned and cordoned again by someone else"},
				{"coordinator-0 deletes the Node object of node-0.edge"}, {"node-0.edge COMPLETE", "node decommissioned"}}},
		{"an ex-leader whose write's reply came after a freeze (its Lease lapsed, another leader ran a whole drain of the node " +
			"meanwhile) does not announce that write: its Event would repeat the new leader's NOTREQUESTED (E1, seed 64599)", 64599, ConfigFor(64599),
			Plan{{At: 26512197027, Kind: KernelDay, Target: 0}, {At: 89927737574, Kind: Update, Target: 0},
				{At: 80518188466, Kind: CoordFreeze, Target: 2, For: 39 * time.Second}, {At: 10071279826, Kind: PowerCycle, Target: 2, For: 30 * time.Second},
				{At: 4897309425, Kind: StatusForger, Target: 2, For: 48 * time.Second},
				{At: 58705289381, Kind: CoordPauseMidWrite, Target: 0, For: 5 * time.Second}},
			[][]string{{"coordinator-0 pauses for 5s between its checks and its write of node-0.edge NOTREQUESTED"}, {"coordinator-0 freezes"},
				{"coordinator-1 becomes the active coordinator"}, {"coordinator-1 publishes node-0.edge NOTREQUESTED", "request withdrawn"},
				{"coordinator-0 stops leading"}}},
		{"a cordon that lands late on a node that has left --node-selector is undone all the same: the record is edgedrain's " +
			"(L1, seed 105433)", 105433, ConfigFor(105433),
			Plan{{At: 40999270435, Kind: KernelDay}, {At: 281299140163, Kind: Update, Target: 1}, {At: 241206293360, Kind: Withdraw, Target: 2, For: time.Second},
				{At: 100563844867, Kind: StatusForger, Target: 2, For: 64 * time.Second}, {At: 193103007876, Kind: WritesLate, Target: 0, For: 55 * time.Second},
				{At: 220246297113, Kind: OperatorReplaysRequest, Target: 1, For: 26 * time.Second},
				{At: 265779761974, Kind: OperatorReplaysRequest, Target: 2, For: 43 * time.Second},
				{At: 46023009005, Kind: ClockStep, Target: 2, For: -301 * time.Second}, {At: 247263845574, Kind: ClockStep, Target: 1, For: 29 * time.Second},
				{At: 222515610585, Kind: SelectorLeaveForGood, Target: 1}},
			[][]string{{"node-1.edge stops matching --node-selector"}, {"coordinator-0 cordons node-1.edge"},
				{"node-1.edge NOTREQUESTED", "edgedrain's cordon record is on the node"}, {"coordinator-0 uncordons node-1.edge"}}},
		{"a withdrawal made while the JetStream API refuses consumers after a quorum loss reaches the coordinator when its request " +
			"watch can be made again, and the cordon is undone then: S4's bound counts only while the bus can deliver it (S4, seed 311856)",
			311856, ConfigFor(311856),
			Plan{{At: 179937113638, Kind: CoordPauseMidWrite, Target: 0, For: 22 * time.Second},
				{At: 27032588202, Kind: OperatorPutsRequest, Target: 1, For: 70 * time.Second}, {At: 77151580268, Kind: QuorumLoss, Target: 1, For: 24 * time.Second}},
			[][]string{{"node-1.edge COMPLETE", "node drained"}, {"its API refuses consumers"}, {"the operator withdraws request node-1.edge-operator1"},
				{"the JetStream API creates consumers again"}, {"coordinator-0 uncordons node-1.edge"}}},
		{"the same with the agent's own withdrawal and API writes that land late (S4, seed 508265)", 508265, ConfigFor(508265),
			Plan{{At: 7728908982, Kind: KernelDay}, {At: 179563215402, Kind: WritesLate, Target: 0, For: 33 * time.Second},
				{At: 11782504606, Kind: OperatorPutsRequest, Target: 0, For: 61 * time.Second}, {At: 92081260886, Kind: QuorumLoss, Target: 1, For: 26 * time.Second}},
			[][]string{{"its API refuses consumers"}, {"agent of node-1.edge: withdraw of the drain request succeeded"},
				{"the JetStream API creates consumers again"}, {"node-1.edge NOTREQUESTED", "request withdrawn"}, {"coordinator-0 uncordons node-1.edge"}}},
		{"the same with the leader paused before its write, another coordinator taking over (S4, seed 615822)", 615822, ConfigFor(615822),
			Plan{{At: 22518984571, Kind: Reboot, Target: 2}, {At: 34288627995, Kind: CoordPauseMidWrite, Target: 1, For: 24 * time.Second},
				{At: 51714619129, Kind: QuorumLoss, Target: 0, For: 21 * time.Second}},
			[][]string{{"its API refuses consumers"}, {"agent of node-2.edge: withdraw of the drain request succeeded"},
				{"the JetStream API creates consumers again"}, {"coordinator-1 pauses"}, {"coordinator-0 uncordons node-2.edge"}}},
		{"a declared whole-cluster shutdown does not take for down a node back from a reboot whose Node is not Ready yet: its agent " +
			"just withdrew its request, and its reboot cleared the shutdown's sentinel; the last two nodes drain one after the other " +
			"(S3, seed 502990)", 502990, ConfigFor(502990),
			Plan{{At: 85168371644, Kind: ClusterShutdown}, {At: 59866730032, Kind: Reboot, Target: 0}, {At: 14804739590, Kind: Reboot, Target: 1},
				{At: 38855301062, Kind: KeepCordoned, Target: 1, For: 99 * time.Second}, {At: 0, Kind: SelectorJoinLate, Target: 1, For: time.Minute}},
			[][]string{{"an operator declares a whole-cluster shutdown"}, {"node-0.edge goes down for request node-0.edge-req2"},
				{"agent of node-0.edge: the node is back after the reboot"}, {"node-1.edge STARTING", "node-1.edge-req4"},
				{"node-2.edge REQUESTED", "waiting: node-1.edge in maintenance"}, {"node-1.edge goes down"},
				{"node-2.edge STARTING"}, {"node-2.edge COMPLETE", "node drained"}}},
		{"an agent restarted while its update ran waits for the bus without waking itself again and again while NATS is down " +
			"(L1 livelock, seed 511946)", 511946, noOutcomeFile(ConfigFor(511946)),
			Plan{{At: 4566273226, Kind: Update, Target: 0}, {At: 20286487219, Kind: BusOutage, Target: 1, For: 35 * time.Second},
				{At: 15880693695, Kind: DiskReadOnly, Target: 0, For: 62 * time.Second}},
			[][]string{{"agent of node-0.edge stops (crash after its command"}, {"NATS is down"}, {"agent of node-0.edge restarts"},
				{"interrupted: the agent restarted while the command ran"}, {"NATS is back"},
				{"request node-0.edge-req1 is withdrawn on the bus: the command succeeded"}}},
		{"an update that succeeded while its agent was paused, the agent killed before it heard, does not run again: its shell " +
			"recorded the success (S5, seed 601471)", 601471, ConfigFor(601471),
			Plan{{At: 11386516517, Kind: Update, Target: 1}, {At: 44778595031, Kind: AgentCrash, Target: 1, For: 6 * time.Second},
				{At: 41212868988, Kind: AgentPause, Target: 1, For: 36 * time.Second}},
			[][]string{{"agent of node-1.edge runs the update command for request node-1.edge-req1"}, {"the agent of node-1.edge is paused"},
				{"agent of node-1.edge stops (crash)"}, {"agent of node-1.edge restarts"},
				{"agent of node-1.edge", "the command's shell recorded that it succeeded"},
				{"agent of node-1.edge: update command succeeded: withdrawing request node-1.edge-req1"}}},
		{"an update an override let run, whose success the agent's failing disk could not record before a crash, does not run " +
			"again: its shell recorded the success (S5, seed 505648)", 505648, ConfigFor(505648),
			Plan{{At: 241045762801, Kind: Update, Target: 1}, {At: 211252829532, Kind: ForgedStatus, Target: 1, For: 11 * time.Second},
				{At: 47144124187, Kind: Override, Target: 1, For: 15 * time.Second},
				{At: 70307096572, Kind: StatusForger, Target: 0, For: 81 * time.Second},
				{At: 51115785823, Kind: StatusForger, Target: 1, For: 56 * time.Second},
				{At: 250581337921, Kind: DiskReadOnly, Target: 1, For: 26 * time.Second},
				{At: 87571759010, Kind: StreamElection, Target: 1, For: 2529 * time.Millisecond}},
			[][]string{{"agent of node-1.edge runs the update command for request node-1.edge-req1", "cleared by override COMPLETE"},
				{"the disk of node-1.edge refuses writes"}, {"agent of node-1.edge stops (crash after its command"},
				{"agent of node-1.edge restarts"}, {"agent of node-1.edge", "the command's shell recorded that it succeeded"}}},
		{"a decommission's COMPLETE that could not be published (a NATS outage) is checked again before it goes out: its " +
			"Node registered again meanwhile is drained and deleted first (D1, seed 411862)", 411862, ConfigFor(411862),
			Plan{{At: 11834207714, Kind: Update, Target: 1}, {At: 20380680358, Kind: APIOutage, For: 36 * time.Second},
				{At: 259826213211, Kind: BusOutage, Target: 2, For: 37 * time.Second}, {At: 176054396813, Kind: Decommission, Target: 0},
				{At: 194060383444, Kind: NodeDeleted, Target: 0, For: 99 * time.Second}},
			[][]string{{"NATS is down"}, {"node-0.edge's Node object registers again", "a new object"},
				{"coordinator-0 deletes the Node object of node-0.edge"},
				{"node-0.edge CORDONED", "the COMPLETE could not be published"}, {"node-0.edge COMPLETE", "node decommissioned"},
				{"agent of node-0.edge runs the decommission command"}}},
		{"a decommissioned node's keys are removed request first: a coordinator stopped between the two removals resumes " +
			"from the status left and removes it, never serving a request left without its status (L1, seed 413666)", 413666, ConfigFor(413666),
			Plan{{At: 132721416517, Kind: BusLossy, For: 40 * time.Second}, {At: 100 * time.Second, Kind: CoordCrash, For: time.Second},
				{At: 153100 * time.Millisecond, Kind: CoordCrash, For: time.Second},
				{At: 37022921411, Kind: Decommission, Target: 0}, {At: 35998560530, Kind: WritesLate, For: 24 * time.Second}},
			[][]string{{"node-0.edge is powered off for good"}, {"removes the request of decommissioned node-0.edge"},
				{"the removal of the status of decommissioned node-0.edge fails"}, {"coordinator-0 crashes"},
				{"coordinator-0 resumes: 0 request(s), 1 status(es)"}, {"removes the keys of decommissioned node-0.edge"}}},
		{"a retired machine's leftover request (a second agent's, after a decommission forced with the override file) drained " +
			"to COMPLETE holds its slot until the operator withdraws it, without --stale-holder-timeout: the drains queued " +
			"behind it wait with it (L1 check, simulator, seed 413760)", 413760, ConfigFor(413760),
			Plan{{At: 33098735573, Kind: Update, Target: 0}, {At: 56519392470, Kind: Reboot, Target: 2},
				{At: 76143850110, Kind: Override, Target: 0, For: 3 * time.Second}, {At: 32048517308, Kind: AgentDuplicated, Target: 0, For: 33 * time.Second},
				{At: 53994707497, Kind: Override, Target: 0, For: 33 * time.Second}, {At: 79637852753, Kind: Decommission, Target: 0}},
			[][]string{{"a second agent starts with the name node-0.edge"}, {"publishing drain request node-0.edge-req1"},
				{"runs the decommission command", "cleared by override COMPLETE"}, {"node-0.edge is powered off for good"},
				{"node-0.edge COMPLETE for request \"node-0.edge-req1\""}, {"node-2.edge REQUESTED", "node-0.edge in maintenance"}}},
		{"a request withdrawn while the volume gate checks its node (an operator's replay of an earlier request, withdrawn at " +
			"once by its agent) leaves no Longhorn eviction: the check runs under the cancelled context, after the release " +
			"(here after a whole-cluster shutdown; L1 check, simulator, seed 1502902)", 1502902, ConfigFor(1502902),
			Plan{{At: 52962689095, Kind: ClusterShutdown}, {At: 17538237015, Kind: Update, Target: 2},
				{At: 65328302385, Kind: OperatorCordon, Target: 0, For: 15 * time.Second}, {At: 51655573704, Kind: CoordCrash, Target: 2, For: 16 * time.Second},
				{At: 146859758976, Kind: OperatorReplaysRequest, Target: 0, For: 40 * time.Second}},
			[][]string{{"an operator's bus identity puts request node-0.edge-req5"},
				{"agent of node-0.edge: the coordinator serves request node-0.edge-req5 (STARTING)", "withdrawing it"},
				{"node-0.edge CORDONED", "checking volumes"}, {"node-0.edge NOTREQUESTED", "request withdrawn"},
				{"the volume gate's check of node-0.edge runs under a cancelled context"}, {"coordinator-0 uncordons node-0.edge"}}},
		{"the same after a reboot withdrawn with edgedrainctl, under a status forger (L1 check, simulator, seed 1209394)", 1209394, ConfigFor(1209394),
			Plan{{At: 90898387263, Kind: KernelDay}, {At: 25577826593, Kind: Update, Target: 0}, {At: 40207610604, Kind: Reboot, Target: 1},
				{At: 43107727237, Kind: AgentCrash, Target: 0, For: 15 * time.Second}, {At: 121431295064, Kind: Withdraw, Target: 0, For: 20 * time.Second},
				{At: 115248551827, Kind: AgentCut, Target: 0, For: 25 * time.Second}, {At: 121092318517, Kind: StatusForger, Target: 0, For: 279 * time.Second},
				{At: 77298059016, Kind: AgentPause, Target: 1, For: 9 * time.Second},
				{At: 211832628646, Kind: OperatorReplaysRequest, Target: 0, For: 22 * time.Second}},
			[][]string{{"an operator's bus identity puts request node-0.edge-req11"},
				{"agent of node-0.edge: the coordinator serves request node-0.edge-req11 (STARTING)", "withdrawing it"},
				{"node-0.edge CORDONED", "checking volumes"}, {"node-0.edge NOTREQUESTED", "request withdrawn"},
				{"the volume gate's check of node-0.edge runs under a cancelled context"}, {"coordinator-0 uncordons node-0.edge"}}},
		{"a drain whose Node was deleted ends as gone only once the coordinator's view is fresh again after an API outage: " +
			"its count pauses while the API is unreachable and waits a relist after (N2 check, simulator, seed 2103665)", 2103665, ConfigFor(2103665),
			Plan{{At: 79947372390, Kind: KernelDay}, {At: 139061227311, Kind: APIOutage, Target: 1, For: 189 * time.Second},
				{At: 62677283697, Kind: NodeDeleted, Target: 2, For: 166 * time.Second}},
			[][]string{{"node-2.edge's Node object is deleted"}, {"the Kubernetes API is unreachable"},
				{"node-2.edge FAILEDDRAIN", "has been gone for 1m0s"}}},
		{"a decommission forced with the override file while its drain waits for volumes leaves the drain, and its slot, " +
			"for the operator's withdrawal: the machine powered off before its agent could withdraw (L1 check, simulator, seed 2129995)",
			2129995, ConfigFor(2129995),
			Plan{{At: 33120381507, Kind: Reboot, Target: 0}, {At: 27758078793, Kind: Reboot, Target: 2},
				{At: 18270155405, Kind: BusOutage, Target: 0, For: 32 * time.Second}, {At: 69786765844, Kind: Override, Target: 1, For: 35 * time.Second},
				{At: 79502103567, Kind: ReplicaFails, Target: 0, For: 37 * time.Second}, {At: 20013422667, Kind: Decommission, Target: 1}},
			[][]string{{"node-1.edge CORDONED", "waiting for 2 volume(s)"}, {"an operator writes the override file on node-1.edge: COMPLETE"},
				{"agent of node-1.edge runs the decommission command", "override COMPLETE"}, {"node-1.edge is powered off for good"},
				{"node-0.edge COMPLETE"}, {"node-1.edge CORDONED", "waiting for 1 volume(s)"}}},
		{"a decommission's Node is not deleted, nor its COMPLETE published, on checks a coordinator's pause has made old: " +
			"they are made again, and a blocker that appeared meanwhile holds it (P3 check, simulator, seed 2146338)", 2146338, ConfigFor(2146338),
			Plan{{At: 12383838140, Kind: Decommission, Target: 1}, {At: 118581477783, Kind: CoordPauseMidWrite, Target: 0, For: 29 * time.Second},
				{At: 11590373982, Kind: WritesLate, Target: 0, For: 48 * time.Second}},
			[][]string{{"coordinator-0 pauses for 29s"}, {"a blocker appears on node-1.edge"},
				{"does not delete the Node object of node-1.edge"}, {"node-1.edge CORDONED", "waiting for 1 blocker(s) to clear before COMPLETE"},
				{"the blocker on node-1.edge is gone"}, {"node-1.edge COMPLETE", "node decommissioned"}}},
		{"two drains whose COMPLETEs of the API-unreachable rule could not be published, and whose volume's third copy failed " +
			"meanwhile, give way once a later write fenced on the same revision shows the COMPLETEs never landed: the one " +
			"admitted last gives way, and both finish (L1 check, simulator, seed 2042524)", 2042524, func() Config {
			c := ConfigFor(2042524)
			c.InformerRelist = -1 // (its caches never lag: the rule applies soon after a takeover)
			return c
		}(),
			Plan{{At: 5792513352, Kind: KernelDay}, {At: 56189520548, Kind: APIOutage, Target: 2, For: 82 * time.Second},
				{At: 80150940919, Kind: ReplicaFails, Target: 2, For: 30 * time.Second},
				{At: 24417950057, Kind: ReplicaFails, Target: 0, For: 23 * time.Second},
				{At: 95896131048, Kind: BusOutage, Target: 2, For: 32 * time.Second},
				{At: 26565062024, Kind: CoordFreeze, Target: 3, For: 25 * time.Second},
				{At: 7527246430, Kind: OperatorRecordon, Target: 1, For: 35 * time.Second}},
			[][]string{{"replica vol0-r2 of vol0 on node-1.edge fails"},
				{"node-0.edge CORDONED", "the COMPLETE could not be published"}, {"node-2.edge CORDONED", "the COMPLETE could not be published"},
				{"node-0.edge REQUESTED", "giving way", "volume vol0"}, {"node-2.edge COMPLETE"}, {"node-0.edge COMPLETE"}}},
		{"a copy left on a decommissioned node, whose Node object is gone, is no peer: the drain of a node whose volume's " +
			"other live copy is on a node in maintenance waits in REQUESTED instead of both drains waiting for each other's " +
			"copy for good (L1 check, simulator, seed 2629492)", 2629492, ConfigFor(2629492),
			Plan{{At: 44586872035, Kind: Reboot, Target: 0}, {At: 171895414674, Kind: Reboot, Target: 1},
				{At: 166767081420, Kind: Reboot, Target: 2}, {At: 34591009825, Kind: CoordCrash, Target: 3, For: 31 * time.Second},
				{At: 86125125923, Kind: Decommission, Target: 0}, {At: 139720919076, Kind: OperatorPutsRequest, Target: 3, For: 24 * time.Second}},
			[][]string{{"coordinator-0 deletes the Node object of node-0.edge"}, {"node-0.edge is powered off for good"},
				{"coordinator-0 cordons node-2.edge"}, {"node-1.edge REQUESTED", "the other copies of volume vol0 are on node-2.edge, in maintenance"},
				{"node-2.edge COMPLETE"}, {"node-1.edge COMPLETE"}}},
		{"a COMPLETE refused after a pause between its checks and its write is not written again at once on those old " +
			"checks: the drain checks again, and evicts the pod that landed meanwhile (S2 check, simulator, seed 3125144)",
			3125144, ConfigFor(3125144),
			Plan{{At: 72918247355, Kind: KernelDay}, {At: 164477751864, Kind: APIOutage, Target: 0, For: 14 * time.Second},
				{At: 11044627786, Kind: ForgedStatus, Target: 1, For: 37 * time.Second}, {At: 791035121, Kind: Decommission},
				{At: 19564061971, Kind: StatusForger, Target: 0, For: 221 * time.Second},
				{At: 90537364576, Kind: StatusForger, Target: 0, For: 14 * time.Second},
				{At: 155326341887, Kind: CoordPauseMidWrite, Target: 0, For: 20 * time.Second},
				{At: 92136339828, Kind: CoordPauseMidWrite, Target: 0, For: 22 * time.Second},
				{At: 16270717298, Kind: AgentPauseAtRead, Target: 0, For: 7 * time.Second},
				{At: 43258591520, Kind: PodPinned, Target: 1},
				{At: 101263313100, Kind: WritesLate, Target: 0, For: 34 * time.Second}},
			[][]string{{"coordinator-0 pauses for 20s between its checks and its write of node-1.edge COMPLETE"},
				{"lands on it: job-7"}, {"node-1.edge COMPLETE refused", "not written again"},
				{"node-1.edge CORDONED", "the COMPLETE could not be published"}, {"node-1.edge COMPLETE"}}},
		{"a second API outage that begins while a vanished Node's count still waits for the first one's relist pauses " +
			"nothing twice: the drain ends within N2's bound (N2 check, simulator, seed 3017043)", 3017043, ConfigFor(3017043),
			Plan{{At: 113129913704, Kind: Reboot, Target: 1}, {At: 176651097824, Kind: APIOutage, Target: 2, For: 29 * time.Second},
				{At: 98109118866, Kind: NodeReregister, Target: 2, For: 6 * time.Second},
				{At: 219045939185, Kind: APIOutage, Target: 1, For: 230 * time.Second},
				{At: 71538145941, Kind: CoordCrash, Target: 2, For: 37 * time.Second},
				{At: 24728079350, Kind: PDBBlocks, Target: 2, For: 210 * time.Second},
				{At: 176362190077, Kind: NodeDeleted, Target: 1, For: 264 * time.Second}},
			[][]string{{"node-1.edge's Node object is deleted"}, {"the Kubernetes API is unreachable for 29s"},
				{"the Kubernetes API is unreachable"}, {"node-1.edge FAILEDDRAIN", "has been gone for 1m0s"}}},
		{"a decommission forced with the override file while its request waits leaves its drain, and its slot, for the " +
			"operator's withdrawal even with a stale-holder timeout, which releases only a COMPLETE holder (L1 check, " +
			"simulator, seed 3128313)", 3128313, ConfigFor(3128313),
			Plan{{At: 139329929673, Kind: Reboot, Target: 0}, {At: 78144404466, Kind: APIOutage, Target: 0, For: 264 * time.Second},
				{At: 138258426402, Kind: ReplicaFails, Target: 0, For: 21 * time.Second}, {At: 100112237694, Kind: Decommission, Target: 1},
				{At: 143233480668, Kind: StatusForger, Target: 2, For: 42 * time.Second},
				{At: 145595129309, Kind: OverrideUnsupported, Target: 1, For: 13 * time.Second}},
			[][]string{{"an operator writes the override file on node-1.edge: NOTSUPPORTED"}, {"node-1.edge is powered off for good"},
				{"node-0.edge REQUESTED", "node-1.edge in maintenance"}, {"node-1.edge CORDONED", "waiting for 1 volume(s)"}}},
		{"a node back from a declared whole-cluster shutdown (Ready again after its slot was released as it went down) " +
			"declares it no more, though its request stays on the bus (a withdrawal the coordinator, cut from NATS, did " +
			"not see, then a replay of the request): no second node is admitted while one is down (R2 check, simulator, " +
			"seed 3309148)", 3309148, ConfigFor(3309148),
			Plan{{At: 32134817538, Kind: ClusterShutdown}, {At: 42612904484, Kind: CoordBusCut, Target: 0, For: 28 * time.Second},
				{At: 63339464163, Kind: OperatorReplaysRequest, Target: 0, For: 57 * time.Second}},
			[][]string{{"coordinator-0: whole-cluster shutdown = true"}, {"node-0.edge is up again"},
				{"coordinator-0: whole-cluster shutdown = false"}, {"puts request node-0.edge-req1"},
				{"node-1.edge goes down"}, {"node-1.edge is up again"}, {"node-3.edge STARTING"}}},
	}
	for _, c := range cases {
		if !slices.ContainsFunc(c.plan, func(f Fault) bool { return f.Kind == TypedReboot }) {
			// Found before agents caught shutdowns (their own commands' among them): they keep
			// the schedules they were found with.
			c.cfg.TypedReboots, c.cfg.CatchShutdown = false, false
		}
		t.Run(c.name, func(t *testing.T) {
			r := RunPlan(c.seed, c.cfg, c.plan)
			require.Nil(t, r.Violation, "%s", r.Report())
			next := 0
			for _, line := range r.Story {
				if next < len(c.happens) && containsAll(line, c.happens[next]) {
					next++
				}
			}
			require.Equal(t, len(c.happens), next, "the scenario did not happen: no line with %q after the earlier ones\n%s",
				c.happens[min(next, len(c.happens)-1)], story(r.Story, 60))
			for _, line := range r.Story {
				if strings.Contains(line, "cleared by NOTSUPPORTED") && !strings.Contains(c.name, "whole-cluster") &&
					!strings.Contains(c.name, "NOTSUPPORTED") {
					t.Fatalf("an operation ran on NOTSUPPORTED: %s", line)
				}
			}
		})
	}
}

// lossy is ConfigFor(seed) changed by mod; lossyPlan is its random plan with NATS losing
// replies the whole active phase.
func lossy(seed uint64, mod func(*Config)) Config {
	c := noChanges(ConfigFor(seed))
	mod(&c)
	return c
}

func lossyPlan(seed uint64, mod func(*Config)) Plan {
	c := lossy(seed, mod)
	return append(RandomPlan(c, rand.New(rand.NewPCG(seed, 0x91a4))), Fault{Kind: BusLossy, For: c.Active})
}

// noChanges is cfg without the gate's change signals (issue 12): the regressions found before
// them keep the schedules they were found with.
func noChanges(cfg Config) Config {
	cfg.InformerChanges, cfg.Decommission, cfg.Forgers, cfg.AgentFaults, cfg.Operators = 0, false, false, false, false
	cfg.Clocks, cfg.Selector = false, false
	return cfg
}

// beforePolicy is cfg without the maintenance policy (windows, blockers, return gate, stale
// holders, domains): the regressions found before it keep the schedules they were found with.
func beforePolicy(cfg Config) Config {
	cfg.Maintenance, cfg.Domains, cfg.StaleHolderTimeout, cfg.Policy.ReturnTimeout = false, 0, 0, 0
	cfg.InformerChanges, cfg.Decommission, cfg.Forgers, cfg.AgentFaults = 0, false, false, false
	cfg.Clocks, cfg.Selector = false, false
	return cfg
}

// beforeReads is cfg with agents taking watch deliveries as delivered (no checked read after
// each): the regressions whose scenario needs a late delivery to reach the agent keep it.
func beforeReads(cfg Config) Config {
	cfg.UncheckedDeliveries = true
	return cfg
}

// caught is cfg with agents that catch the reboots typed on their node (typedreboot.go).
func caught(cfg Config) Config {
	cfg.TypedReboots, cfg.CatchShutdown, cfg.InhibitDelay = true, true, 5*time.Minute
	return cfg
}

// noOutcomeFile is cfg with the agents' outcome file off: the regressions of an interrupted
// update that only the bus answers keep their scenario.
func noOutcomeFile(cfg Config) Config {
	cfg.NoOutcomeFile = true
	return cfg
}

func containsAll(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}
