package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A hand-made history of one node's reboot, as the harness records it, judged by the checker;
// then broken in the ways the invariants forbid.

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func st(node string, s float64, status nodedrain.DrainStatus, req string) Event {
	return Event{At: sec(s), Kind: KindStatus, Node: node, Marked: true, RequestID: req,
		Status: &nodedrain.NodeDrainStatus{Node: node, Status: status, RequestID: req}}
}

func nodeEv(node string, s float64, unsched, annotated, ready bool) Event {
	return Event{At: sec(s), Kind: KindNode, Node: node, Unschedulable: unsched, Annotated: annotated, Ready: ready}
}

// reboot is a clean history of node n's reboot for request req, starting at s.
func reboot(n, req string, s float64) []Event {
	returning := st(n, s+20, nodedrain.StatusNotRequested, "")
	returning.Status.ReturningSince = sec(s + 20)
	return []Event{
		nodeEv(n, s, false, false, true),
		{At: sec(s + 0.5), Kind: KindPod, Node: n, Pod: "ns/web-" + n, Evictable: true},
		{At: sec(s + 1), Kind: KindAsk, Node: n, Op: "reboot"},
		{At: sec(s + 2), Kind: KindRequest, Node: n, RequestID: req},
		st(n, s+2.1, nodedrain.StatusRequested, req),
		st(n, s+2.2, nodedrain.StatusStarting, req),
		nodeEv(n, s+2.3, true, true, true),
		st(n, s+2.4, nodedrain.StatusCordoned, req),
		{At: sec(s + 2.5), Kind: KindPod, Node: n, Pod: "ns/web-" + n, Evictable: true, Terminating: true},
		{At: sec(s + 3.5), Kind: KindPod, Node: n, Pod: "ns/web-" + n, Evictable: true, Deleted: true},
		st(n, s+4, nodedrain.StatusComplete, req),
		{At: sec(s + 4.2), Kind: KindRun, Node: n, Op: "reboot", RequestID: req},
		{At: sec(s + 4.5), Kind: KindReboot, Node: n, What: "down", RequestID: req},
		nodeEv(n, s+4.6, true, true, false),
		{At: sec(s + 15), Kind: KindReboot, Node: n, What: "up", RequestID: req},
		nodeEv(n, s+15.5, true, true, true),
		{At: sec(s + 19), Kind: KindRequest, Node: n, Deleted: true},
		returning,
		nodeEv(n, s+21, false, false, true),
		st(n, s+22, nodedrain.StatusNotRequested, ""),
	}
}

func runOf(parts ...[]Event) []Event {
	all := []Event{{At: t0, Kind: KindPhase, What: "start"}}
	for _, p := range parts {
		all = append(all, p...)
	}
	rec := &Recorder{}
	for _, e := range all {
		rec.Add(e)
	}
	rec.Add(Event{At: sec(200), Kind: KindPhase, What: "end"})
	return rec.Events()
}

func invariants(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant+": "+v.What)
	}
	return out
}

func TestCleanHistoryPasses(t *testing.T) {
	vs := Check(runOf(reboot("n1", "r1", 0), reboot("n2", "r2", 1), reboot("n1", "r3", 40)), Config{MaxConcurrent: 2})
	assert.Empty(t, invariants(vs))
}

func TestRunWithoutComplete(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[10] = st("n1", 4, nodedrain.StatusCordoned, "r1") // the COMPLETE never stored
	vs := Check(runOf(h), Config{MaxConcurrent: 1})
	require.NotEmpty(t, vs)
	assert.Equal(t, "S1", vs[0].Invariant)
	assert.Contains(t, vs[0].What, "no COMPLETE or NOTSUPPORTED")
	assert.Contains(t, vs[0].Story, "──── here ────")
	assert.Contains(t, Report(vs, 42), "seed 42")
}

func TestRunOnACompleteOfAnotherRequest(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[10] = st("n1", 4, nodedrain.StatusComplete, "r0")
	vs := Check(runOf(h), Config{MaxConcurrent: 1})
	assert.Contains(t, strings.Join(invariants(vs), "\n"), "S1: the reboot command ran for request r1")
}

func TestRunOnAStaleComplete(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[11].At = sec(30) // the command runs 26 s after COMPLETE, the key rewritten meanwhile
	h = append(h, st("n1", 5, nodedrain.StatusCordoned, "r1"))
	vs := Check(runOf(h), Config{MaxConcurrent: 1})
	assert.Contains(t, strings.Join(invariants(vs), "\n"), "no COMPLETE for it that was not slot-released")
}

func TestRunOnAnUncordonedNode(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[13].Unschedulable = false // still uncordoned when the machine goes down
	h = append(h, nodeEv("n1", 4.1, false, true, true))
	vs := Check(runOf(h), Config{MaxConcurrent: 1})
	assert.Contains(t, strings.Join(invariants(vs), "\n"), "on a node not cordoned")

	// The harness seeing the cordon a moment late is not an uncordon.
	late := reboot("n1", "r1", 0)
	late[6].At = sec(4.5)
	assert.Empty(t, invariants(Check(runOf(late), Config{MaxConcurrent: 1})))

	// An operator's uncordon excuses it.
	h = append(h, Event{At: sec(4.05), Kind: KindFault, What: OpUncordon, Target: "n1", Detail: "start"})
	assert.NotContains(t, strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n"), "not cordoned")
}

func TestCompleteWithPodsLeft(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[9].At = sec(8) // the pod goes 4 s after COMPLETE
	vs := Check(runOf(h), Config{MaxConcurrent: 1})
	assert.Contains(t, strings.Join(invariants(vs), "\n"), "S2: COMPLETE for request r1 stored at +4.000s with evictable pods still on the node: ns/web-n1")
}

func TestTooManyInMaintenance(t *testing.T) {
	vs := Check(runOf(reboot("n1", "r1", 0), reboot("n2", "r2", 1)), Config{MaxConcurrent: 1})
	got := strings.Join(invariants(vs), "\n")
	assert.Contains(t, got, "S3: 2 nodes in maintenance at once from +3.200s")
	// Their return gates overlap from +21 to +22 too: a second stretch, bounded by two events.
	assert.Contains(t, got, "S3: 2 nodes in maintenance at once from +21.000s (until +22.000s)")
	assert.Equal(t, 2, strings.Count(got, "S3"), "one violation per stretch")
}

func TestRunTwice(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h = append(h, Event{At: sec(16), Kind: KindRun, Node: "n1", Op: "reboot", RequestID: "r1"})
	vs := Check(runOf(h), Config{MaxConcurrent: 1})
	assert.Contains(t, strings.Join(invariants(vs), "\n"), "S5: the reboot command ran again for request r1")
}

func TestLeftovers(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h = h[:len(h)-4] // never withdrawn, never uncordoned
	h = append(h, Event{At: sec(50), Kind: KindAsk, Node: "n1", Op: "reboot"}, Event{At: sec(99), Kind: KindAgent, Node: "n1", What: "deferred", RequestID: "r2"})
	got := strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n")
	for _, want := range []string{"L1: request r1", "its status at the end is COMPLETE", "left cordoned=true with edgedrain's record=true",
		"agent is not idle at the end: deferred r2", "the reboot asked for at +50.000s never ran"} {
		assert.Contains(t, got, want)
	}
}

func TestScheduleIsTheSeeds(t *testing.T) {
	shape := Shape{Duration: 10 * time.Minute, Nodes: 5, Coords: 2, Servers: 3, FaultEvery: 6 * time.Second, SentinelEvery: 10 * time.Second}
	a, b := Schedule(7, shape), Schedule(7, shape)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, Schedule(8, shape))
	kinds := map[string]bool{}
	for _, x := range a {
		kinds[x.Kind] = true
		assert.Less(t, x.At, shape.Duration)
	}
	for _, k := range append(FaultKinds, Sentinel, AskUpdate) {
		assert.True(t, kinds[k], "no %s in 10 minutes", k)
	}
}

func TestCordonLeftBehind(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h = h[:len(h)-2] // withdrawn, the return gate over, but never uncordoned
	h = append(h, st("n1", 21, nodedrain.StatusNotRequested, ""))
	got := strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n")
	assert.Contains(t, got, "S4: edgedrain's cordon stayed from +21.000s")

	// A coordinator down meanwhile suspends the bound.
	h = append(h, Event{At: sec(22), Kind: KindFault, What: CoordKill, Target: "coordinator-a", Detail: "start"},
		Event{At: sec(150), Kind: KindFault, What: CoordKill, Target: "coordinator-a", Detail: "end"})
	got = strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n")
	assert.NotContains(t, got, "S4")
}

func TestAnUpdateDoesNotTakeTheNodeDown(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[2].Op, h[11].Op = "update", "update"
	h = append(h[:12], h[16:]...) // no reboot: withdrawn after the command, the return gate
	vs := Check(runOf(h, reboot("n2", "r2", 30)), Config{MaxConcurrent: 1})
	assert.Empty(t, invariants(vs))
	assert.Equal(t, 1, MostInMaintenance(runOf(h, reboot("n2", "r2", 30))))
}

func TestCompleteOnTheLastCopy(t *testing.T) {
	rep := func(s float64, node, r, state string) Event {
		return Event{At: sec(s), Kind: KindReplica, Node: node, Volume: "vol-0", Target: r, What: state}
	}
	h := reboot("n1", "r1", 0)
	h = append(h, nodeEv("n2", 0, false, false, true), rep(0, "n1", "vol-0-r-0", "healthy"), rep(0, "n2", "vol-0-r-1", "healthy"))
	assert.Empty(t, invariants(Check(runOf(h), Config{MaxConcurrent: 1})))

	failed := append(h, rep(2, "n2", "vol-0-r-1", "failed"))
	assert.Contains(t, strings.Join(invariants(Check(runOf(failed), Config{MaxConcurrent: 1})), "\n"),
		"S2: COMPLETE for request r1 stored at +4.000s while the node held the only intact copy of vol-0")

	// The other copy's node going NotReady just before the decision excuses it.
	late := append(h, nodeEv("n2", 3.5, false, false, false))
	assert.Empty(t, invariants(Check(runOf(late), Config{MaxConcurrent: 1})))
	down := append(h, nodeEv("n2", 2, false, false, false))
	assert.Contains(t, strings.Join(invariants(Check(runOf(down), Config{MaxConcurrent: 1})), "\n"), "only intact copy of vol-0")
}

func TestAttemptPastTheLimit(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[7].Status.Attempt = 11
	assert.Contains(t, strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n"), "S5: CORDONED published with attempt 11")
}

func TestReadyBeforeTheMachineIsRecordedUp(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[15].At = sec(14.9) // kwok reports Ready before the harness records the machine up at 15
	h = append(h, Event{At: sec(30), Kind: KindRun, Node: "n9", Op: "update", RequestID: "x"})
	assert.False(t, index(runOf(h), Config{}).downOrBack("n1", sec(25)))
	assert.True(t, index(runOf(h), Config{}).downOrBack("n1", sec(10)))
}

func TestTooManyInMaintenanceBetweenTwoEvents(t *testing.T) {
	// Both CORDONED for 10 s with no event in between: the stretch is measured when it ends.
	h := []Event{
		st("n1", 0, nodedrain.StatusCordoned, "r1"),
		st("n2", 1, nodedrain.StatusCordoned, "r2"),
		st("n1", 11, nodedrain.StatusNotRequested, ""),
		st("n2", 12, nodedrain.StatusNotRequested, ""),
	}
	got := strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n")
	assert.Contains(t, got, "S3: 2 nodes in maintenance at once from +1.000s (until +11.000s)")

	// Shorter than Slack: two views of one handover, no violation.
	h[2] = st("n1", 1.5, nodedrain.StatusNotRequested, "")
	assert.NotContains(t, strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n"), "S3")
}

func stranded(held float64) []Event {
	h := reboot("n1", "r1", 0)
	h = h[:len(h)-2] // withdrawn, the return gate over, but not uncordoned yet
	return append(h, st("n1", 21, nodedrain.StatusNotRequested, ""), nodeEv("n1", 21+held, false, false, true))
}

func fault(s float64, what, target, detail string) Event {
	return Event{At: sec(s), Kind: KindFault, What: what, Target: target, Detail: detail}
}

func TestCordonLeftBehindThroughFaultsThatKeepTheLeader(t *testing.T) {
	s4 := func(h []Event) string {
		for _, v := range Check(runOf(h), Config{MaxConcurrent: 1}) {
			if v.Invariant == "S4" {
				return v.What
			}
		}
		return ""
	}
	require.Empty(t, s4(stranded(80)), "within the bound")
	require.NotEmpty(t, s4(stranded(100)))

	// One NATS server out, or one coordinator's link to one server: the others keep the
	// quorum, the coordinator reaches them, the bound counts.
	for _, f := range [][]Event{
		{fault(30, NATSKill, "nats-1", "start"), fault(40, NATSKill, "nats-1", "end")},
		{fault(30, NATSPause, "nats-2", "start"), fault(40, NATSPause, "nats-2", "end")},
		{fault(30, LinkCut, "coordinator-a→nats-1", "start"), fault(40, LinkCut, "coordinator-a→nats-1", "end")},
		{fault(30, LinkStall, "coordinator-a→nats-0 (what it sends)", "start"), fault(40, LinkStall, "coordinator-a→nats-0 (what it sends)", "end")},
	} {
		assert.Contains(t, s4(append(stranded(100), f...)), "undisturbed", "%s %s", f[0].What, f[0].Target)
	}
	// Two servers out at once: the quorum is lost, the bound waits.
	quorum := append(stranded(100), fault(30, NATSKill, "nats-1", "start"), fault(32, NATSPause, "nats-2", "start"),
		fault(50, NATSPause, "nats-2", "end"), fault(55, NATSKill, "nats-1", "end"))
	assert.Empty(t, s4(quorum))

	// A coordinator down suspends the bound, and only for a retry after it ends.
	down := append(stranded(110), fault(30, CoordKill, "coordinator-a", "start"), fault(40, CoordKill, "coordinator-a", "end"))
	assert.Contains(t, s4(down), "1m37s undisturbed")

	// A process that exited on its own is no fault the bound waits for.
	crash := append(stranded(100), fault(30, "crash", "coordinator-a", "exited on its own (code 2); restarted"))
	assert.Contains(t, s4(crash), "undisturbed")
}

func TestOperatorCordonRemoved(t *testing.T) {
	// An operator cordons n1 from +50 to +80; edgedrain's drain of it comes and goes meanwhile.
	base := append(reboot("n1", "r1", 0),
		fault(50, OpCordon, "n1", "start"), nodeEv("n1", 50.2, true, false, true),
		nodeEv("n1", 79.9, false, false, true), fault(80, OpCordon, "n1", "end"))
	assert.Empty(t, invariants(Check(runOf(base), Config{MaxConcurrent: 1})), "the operator's own uncordon")

	removed := append(base, nodeEv("n1", 60, false, false, true), nodeEv("n1", 61, true, false, true))
	assert.Contains(t, strings.Join(invariants(Check(runOf(removed), Config{MaxConcurrent: 1})), "\n"),
		"S4: the operator's cordon (seen from +50.200s, kept until +80.000s) was removed at +60.000s")

	// An operator's uncordon meanwhile, or the Node deleted and registered again, excuses it.
	uncordoned := append(removed, fault(59.9, OpUncordon, "n1", "start"))
	assert.Empty(t, invariants(Check(runOf(uncordoned), Config{MaxConcurrent: 1})))
	registered := append(removed, fault(58, NodeDelete, "n1", "start"), fault(59.8, NodeDelete, "n1", "end"))
	assert.Empty(t, invariants(Check(runOf(registered), Config{MaxConcurrent: 1})))

	// The operator's uncordon recorded before kubectl runs bounds the cordon: a Node seen
	// schedulable after that record is the operator's doing, one seen before it is not.
	recorded := append(reboot("n1", "r1", 0),
		fault(50, OpCordon, "n1", "start"), nodeEv("n1", 50.2, true, false, true),
		fault(70, OpCordon, "n1", "uncordon"), nodeEv("n1", 72, false, false, true), fault(80, OpCordon, "n1", "end"))
	assert.Empty(t, invariants(Check(runOf(recorded), Config{MaxConcurrent: 1})), "uncordoned after the operator's record")
	early := append(reboot("n1", "r1", 0),
		fault(50, OpCordon, "n1", "start"), nodeEv("n1", 50.2, true, false, true),
		nodeEv("n1", 69, false, false, true), fault(70, OpCordon, "n1", "uncordon"), fault(80, OpCordon, "n1", "end"))
	assert.Contains(t, strings.Join(invariants(Check(runOf(early), Config{MaxConcurrent: 1})), "\n"),
		"was removed at +69.000s", "uncordoned before the operator's record")

	// edgedrain cordoning the node again as the operator's cordon lands (an uncordon left its
	// record): whose cordon it is cannot be told, and edgedrain's uncordon later is no violation.
	racing := append(reboot("n1", "r1", 0),
		nodeEv("n1", 49.9, false, true, true), fault(50, OpCordon, "n1", "start"), st("n1", 50.1, nodedrain.StatusStarting, "r1"),
		nodeEv("n1", 50.2, true, true, true), nodeEv("n1", 60, false, false, true), fault(80, OpCordon, "n1", "end"))
	assert.NotContains(t, strings.Join(invariants(Check(runOf(racing), Config{MaxConcurrent: 1})), "\n"), "S4",
		"edgedrain's re-cordon at the same moment")

	// On a node already cordoned, kubectl cordon changes nothing: the cordon is edgedrain's still.
	already := append(reboot("n1", "r1", 0), fault(3, OpCordon, "n1", "start"), fault(40, OpCordon, "n1", "end"))
	assert.Empty(t, invariants(Check(runOf(already), Config{MaxConcurrent: 1})))
}

func TestRebootAskedNotDoneByAnUpdate(t *testing.T) {
	up := reboot("n1", "r2", 30)
	up[2].Op, up[11].Op = "update", "update"
	up = append(up[:12], up[16:]...) // an update: the node stays up
	h := append(reboot("n1", "r1", 0), up...)
	require.Empty(t, invariants(Check(runOf(h), Config{MaxConcurrent: 1})))

	h = append(h, Event{At: sec(25), Kind: KindAsk, Node: "n1", Op: "reboot"})
	assert.Contains(t, strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n"), "L1: the reboot asked for at +25.000s never ran")
}

func TestRunOnANodeRegisteredAgain(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[13].Unschedulable = false // still uncordoned when the machine goes down
	// Deleted after its COMPLETE, registered again (uncordoned) before the command runs.
	h = append(h, fault(4.05, NodeDelete, "n1", "start"), Event{At: sec(4.08), Kind: KindNode, Node: "n1", Deleted: true},
		nodeEv("n1", 4.15, false, false, true), fault(4.1, NodeDelete, "n1", "end"))
	assert.Empty(t, invariants(Check(runOf(h), Config{MaxConcurrent: 1})))

	// Not deleted: the rule says its own name.
	uncordoned := reboot("n1", "r1", 0)
	uncordoned[13].Unschedulable = false
	uncordoned = append(uncordoned, nodeEv("n1", 4.15, false, true, true))
	vs := Check(runOf(uncordoned), Config{MaxConcurrent: 1})
	require.NotEmpty(t, vs)
	assert.Equal(t, InvRunCordoned, vs[0].Invariant)
}

func TestIncompleteHistoryOrCrashIsAFinding(t *testing.T) {
	lost := append(reboot("n1", "r1", 0), Event{At: sec(3), Kind: KindPhase, What: "lost", Detail: "status revision 7: timeout"})
	vs := Check(runOf(lost), Config{MaxConcurrent: 1})
	require.Len(t, vs, 1)
	assert.Equal(t, InvHistory, vs[0].Invariant)
	assert.Equal(t, 1, vs[0].Lost)
	assert.Contains(t, Report(vs, 1), "lost 1 revisions")

	crash := append(reboot("n1", "r1", 0), fault(3, "crash", "agent-n1", "exited on its own (code 2); restarted"))
	vs = Check(runOf(crash), Config{MaxConcurrent: 1})
	require.Len(t, vs, 1)
	assert.Equal(t, InvCrash, vs[0].Invariant)
	assert.Contains(t, vs[0].What, "agent-n1 exited on its own")
}

func TestDecommissionRunsOnItsReleasedComplete(t *testing.T) {
	h := reboot("n1", "r1", 0)
	h[10].Status.Decommission, h[10].Status.SlotReleased = true, true // its go-ahead
	h[11].Op = "decommission"
	assert.NotContains(t, strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n"), "S1")

	// Any other COMPLETE whose slot was released lets nothing run.
	h[10].Status.Decommission = false
	assert.Contains(t, strings.Join(invariants(Check(runOf(h), Config{MaxConcurrent: 1})), "\n"), "no COMPLETE for it that was not slot-released")
}
