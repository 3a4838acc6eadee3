package agent

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The agent's transition table: (phase, event) → (phase, actions), recorded from every step the
// step tests make through playFrom, and kept in testdata/transitions.golden. After a run of the
// whole package, TestMain compares the transitions made with the file (or rewrites it with
// -update-transitions, or EDGEDRAIN_UPDATE_TRANSITIONS=1); after a run of some tests only (-run,
// -skip), it checks that every transition made is a row of it. The coordinator's table is in
// pkg/nodedrain/testdata/transitions.golden (phase.go there tells how it is made).

var updateAgentTransitions = flag.Bool("update-transitions", false, "rewrite testdata/transitions.golden from the step tests' transitions")

const agentTransitionsGolden = "testdata/transitions.golden"

const agentRegenerate = "go test ./pkg/nodedrain/agent -update-transitions"

func TestMain(m *testing.M) {
	code := m.Run()
	// (After a failure the transitions made are checked still, for what they say, but only
	// against the table: a test that stopped half-way made only some of its own.)
	if check := checkAgentTransitions(code == 0 && wholeRun()); code == 0 {
		code = check
	}
	os.Exit(code)
}

// agentTransition is one row of the table.
type agentTransition struct {
	From    Phase
	Event   string
	To      Phase
	Actions string // the action names, sorted, space-separated; "-" for none
}

var agentTransitions = struct {
	sync.Mutex
	m       map[agentTransition]string // the first test that made it
	invalid []string                   // steps that left the machine in a phase outside the list
}{m: map[agentTransition]string{}}

// recordAgentStep records a step a test made through playFrom.
func recordAgentStep(t *testing.T, before Machine, ev Event, now time.Time, after Machine, actions []Action) {
	agentTransitions.Lock()
	defer agentTransitions.Unlock()
	if !after.State.Phase.valid() {
		agentTransitions.invalid = append(agentTransitions.invalid, fmt.Sprintf("%s: %s after %s in %s", t.Name(),
			after.State.Phase, agentEventLabel(before, ev, now), before.State.Phase))
	}
	names := agentActionNames(actions)
	if names == "-" && before.State.Phase == after.State.Phase {
		return // a no-op at this level (or only log lines): not in the table
	}
	tr := agentTransition{From: before.State.Phase, Event: agentEventLabel(before, ev, now), To: after.State.Phase, Actions: names}
	if _, seen := agentTransitions.m[tr]; !seen {
		agentTransitions.m[tr] = t.Name()
	}
}

// agentActionNames names the actions but the log lines (Report), sorted.
func agentActionNames(actions []Action) string {
	var names []string
	for _, a := range actions {
		if n := agentActionName(a); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "-"
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// agentActionName names an action by its type and what about it matters ("" for a Report).
func agentActionName(a Action) string {
	switch a := a.(type) {
	case Report:
		return ""
	case WithdrawRequest:
		if a.Pending {
			return "WithdrawRequest(pending)"
		}
	case RunCommand:
		return "RunCommand(" + string(a.Operation) + ")"
	case LetShutdownProceed:
		if a.Drained {
			return "LetShutdownProceed(drained)"
		}
		return "LetShutdownProceed(undrained)"
	case TriggerResult:
		if a.Accepted {
			return "TriggerResult(accepted)"
		}
		return "TriggerResult(refused)"
	case DrainFailed:
		return "DrainFailed(" + a.Status.String() + ")"
	}
	t := fmt.Sprintf("%T", a)
	return t[strings.LastIndexByte(t, '.')+1:]
}

// whose says whose request id is, as m sees it: the current operation's (ours), an earlier one
// of this agent's (mine), none, or another agent's (other).
func whose(m Machine, id string) string {
	switch {
	case id == "":
		return "none"
	case id == m.State.RequestID:
		return "ours"
	case slices.Contains(m.State.Mine, id):
		return "mine"
	}
	return "other"
}

// statusLabel names a status on the bus as m sees it: the status, whose request it answers,
// and the flags the agent reads.
func statusLabel(m Machine, st *nodedrain.NodeDrainStatus) string {
	if st == nil {
		return "none"
	}
	parts := []string{st.Status.String(), whose(m, st.RequestID)}
	switch {
	case st.SlotReleased && st.Decommission:
		parts = append(parts, "decommissioned")
	case st.SlotReleased:
		parts = append(parts, "released")
	case st.Decommission:
		parts = append(parts, "decommission")
	}
	if st.APIUnreachable {
		parts = append(parts, "api-rule")
	}
	return strings.Join(parts, ",")
}

// agentEventLabel names ev for the table: its type, and in parentheses what about it, in m at
// now, decides the transition.
func agentEventLabel(m Machine, ev Event, now time.Time) string {
	st := m.State
	switch e := ev.(type) {
	case EvStart:
		q := []string{"same-boot"}
		if st.BootID != "" && e.BootID != st.BootID {
			q[0] = "new-boot"
		}
		if e.Fresh {
			q = append(q, "fresh")
		}
		if e.Succeeded != "" && e.Succeeded == st.RequestID {
			q = append(q, "succeeded")
		}
		return "EvStart(" + strings.Join(q, "+") + ")"
	case EvTrigger:
		q := []string{string(e.Operation)}
		if !e.Operation.Valid() {
			q[0] = "invalid"
		}
		if checkContext(e.Operation, e.Context) != nil {
			q = append(q, "bad-context")
		}
		if e.Caught {
			q = append(q, "caught")
		}
		if e.Sentinel != "" && st.Handled[e.Operation] == e.SentinelModTime {
			q = append(q, "handled")
		}
		return "EvTrigger(" + strings.Join(q, "+") + ")"
	case EvBusStatus:
		return "EvBusStatus(" + statusLabel(m, e.Status) + ")"
	case EvStatusRead:
		if e.Err != nil {
			return "EvStatusRead(error)"
		}
		l := statusLabel(m, e.Status)
		if m.BusRevision != m.ReadFrom && e.Revision < m.BusRevision {
			l += "+outdated"
		}
		if e.APIReachable {
			l += "+api-reachable"
		}
		return "EvStatusRead(" + l + ")"
	case EvBusDone:
		verb := "withdraw"
		if e.Publish {
			verb = "publish"
		}
		res := "ok"
		if e.Err != nil {
			res = "error"
		}
		if e.Publish != st.OnBus || (e.Publish && e.RequestID != st.RequestID) {
			res += "+stale"
		}
		return "EvBusDone(" + verb + ":" + res + ")"
	case EvOverride:
		if e.Override == nil {
			return "EvOverride(removed)"
		}
		l := e.Override.Status.String()
		if by := e.Override.RequestedBy; by != 0 && by != nodedrain.RequesterNone && st.Phase != PhaseIdle && by != st.Operation.Requester() {
			l += "+other-requester"
		}
		return "EvOverride(" + l + ")"
	case EvCommandDone:
		res := "ok"
		if e.Err != nil {
			res = "error"
		}
		if st.Phase != PhaseRunning || e.RequestID != st.RequestID {
			res += "+stale"
		}
		return "EvCommandDone(" + res + ")"
	case EvRunNotRecorded:
		if e.RequestID != st.RequestID {
			return "EvRunNotRecorded(stale)"
		}
		return "EvRunNotRecorded"
	case EvTimer:
		var q []string
		due := func(at time.Time) bool { return !at.IsZero() && !now.Before(at) }
		if due(st.RetryAt) {
			q = append(q, "retry")
		}
		if !m.BusSynced && due(m.BusRetryAt) {
			q = append(q, "bus-retry")
		}
		if due(m.RepublishAt) {
			q = append(q, "republish")
		}
		if due(m.ConfirmRetryAt) {
			q = append(q, "confirm-retry")
		}
		if len(q) == 0 {
			q = append(q, "early")
		}
		return "EvTimer(" + strings.Join(q, "+") + ")"
	}
	t := fmt.Sprintf("%T", ev)
	return t[strings.LastIndexByte(t, '.')+1:]
}

// ---- the table ----

// agentPhases are the phases in the order the table lists them.
var agentPhases = []Phase{PhaseIdle, PhasePending, PhaseDeferred, PhaseBackoff, PhaseCleared, PhaseRunning, PhaseWaitingBoot}

var agentPhaseDocs = map[Phase]string{
	PhaseIdle:        "no operation wanted; the agent's request withdrawn",
	PhasePending:     "an operation wanted, no request published yet: waits for a known NOTREQUESTED",
	PhaseDeferred:    "the request published: the operation waits for COMPLETE",
	PhaseBackoff:     "the drain failed: the request withdrawn until RetryAt",
	PhaseCleared:     "the operation may run: its command starts at RetryAt or at once, once a status read confirms it",
	PhaseRunning:     "the command runs",
	PhaseWaitingBoot: "a reboot or shutdown returned (or a caught one let go): waits for a new boot ID until RetryAt",
}

const agentGoldenHeader = `# The agent's machine as a transition table: (phase, event) → (phase, actions).
#
# Recorded from the step tests (every step they make through playFrom, in step_test.go) by
# TestMain in pkg/nodedrain/agent/transitions_test.go; do not edit. After a run of the whole
# package the test compares the transitions made with this file; after a run of some tests only,
# it checks that every transition made is a row here. Regenerate (the whole package must run):
#
#	go test ./pkg/nodedrain/agent -update-transitions
#	(or EDGEDRAIN_UPDATE_TRANSITIONS=1 go test ./pkg/nodedrain/agent)
#
# and review the diff: a change to the machine, or a new step test, shows here.
#
# How to read it: the phase is the agent's own (State.Phase, machine.go); one row per transition,
# grouped by the phase it starts from; the actions are sorted, without the log lines (Report).
# A (phase, event) on several rows goes one way or another by what the phase does not show (the
# bus synced or not, a caught shutdown, the operation, an override). A step that changes neither
# the phase nor does anything is not a row. The table holds what the step tests do, not every
# possible transition.
#
# Names: the event's type, and in parentheses what about it decides: for a status (EvBusStatus,
# EvStatusRead) the status, whose request it answers (ours: the current operation's, mine: an
# earlier one of this agent's, other: another agent's, none) and its flags (released,
# decommission(ed), api-rule); EvStart whether the boot ID changed since the operation began;
# EvTimer which of its times are due (retry: State.RetryAt, bus-retry, republish,
# confirm-retry; early: none); "+stale" an answer to something since superseded.
`

func renderAgentTable(rows map[agentTransition]string) string {
	order := map[Phase]int{}
	for i, ph := range agentPhases {
		order[ph] = i
	}
	list := make([]agentTransition, 0, len(rows))
	for tr := range rows {
		list = append(list, tr)
	}
	rank := func(p Phase) int {
		if r, ok := order[p]; ok {
			return r
		}
		return len(agentPhases)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		switch {
		case a.From != b.From:
			return rank(a.From) < rank(b.From)
		case a.Event != b.Event:
			return a.Event < b.Event
		case a.To != b.To:
			return rank(a.To) < rank(b.To)
		}
		return a.Actions < b.Actions
	})
	var b strings.Builder
	b.WriteString(agentGoldenHeader)
	var from Phase = "-"
	for _, tr := range list {
		if tr.From != from {
			from = tr.From
			fmt.Fprintf(&b, "\n## %s: %s\n", from, agentPhaseDocs[from])
		}
		b.WriteString(formatAgentRow(tr))
		b.WriteString("\n")
	}
	return b.String()
}

func agentPad(s string, w int) string { return s + strings.Repeat(" ", max(2, w-len(s))) }

// formatAgentRow formats a row in fixed columns (so that a new row does not realign the others).
func formatAgentRow(tr agentTransition) string {
	return agentPad(string(tr.From), 14) + agentPad(tr.Event, 52) + "→  " + agentPad(string(tr.To), 14) + tr.Actions
}

var agentRowSpaces = regexp.MustCompile(`\s+`)

func agentRows(table string) []string {
	var out []string
	for _, line := range strings.Split(table, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, agentRowSpaces.ReplaceAllString(strings.TrimSpace(line), " "))
		}
	}
	return out
}

// wholeRun reports whether every test of the package ran (no -run or -skip).
func wholeRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return true
}

// checkAgentTransitions compares the transitions the tests made with the golden table (complete:
// after the whole package passed), or checks they are rows of it (after some tests, or a
// failure), or rewrites it.
func checkAgentTransitions(complete bool) int {
	agentTransitions.Lock()
	defer agentTransitions.Unlock()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "--- FAIL: transition table: "+format+"\n", args...)
		return 1
	}
	if len(agentTransitions.invalid) > 0 {
		return fail("steps left the machine in no phase of the list:\n  %s", strings.Join(agentTransitions.invalid, "\n  "))
	}
	if len(agentTransitions.m) == 0 {
		return 0 // (no step test ran)
	}
	table := renderAgentTable(agentTransitions.m)
	update := *updateAgentTransitions || os.Getenv("EDGEDRAIN_UPDATE_TRANSITIONS") == "1"
	if update {
		if !complete {
			return fail("not rewritten: only some tests ran (-run or -skip), or one failed, and the table is what all of them do")
		}
		if err := os.MkdirAll(filepath.Dir(agentTransitionsGolden), 0o755); err != nil {
			return fail("%v", err)
		}
		if err := os.WriteFile(agentTransitionsGolden, []byte(table), 0o644); err != nil {
			return fail("%v", err)
		}
		fmt.Printf("transition table: wrote %s (%d rows)\n", agentTransitionsGolden, len(agentRows(table)))
		return 0
	}
	data, err := os.ReadFile(agentTransitionsGolden)
	if err != nil {
		return fail("%v; regenerate it: %s", err, agentRegenerate)
	}
	golden, got := agentRows(string(data)), agentRows(table)
	var missing, extra []string
	for _, r := range got {
		if !slices.Contains(golden, r) {
			extra = append(extra, "+ "+r)
		}
	}
	if complete {
		for _, r := range golden {
			if !slices.Contains(got, r) {
				missing = append(missing, "- "+r)
			}
		}
		for _, ph := range agentPhases {
			if !slices.ContainsFunc(got, func(r string) bool { return strings.HasPrefix(r, string(ph)+" ") }) {
				missing = append(missing, fmt.Sprintf("  (no transition out of phase %s)", ph))
			}
		}
	}
	if len(missing)+len(extra) == 0 {
		if testing.Verbose() {
			fmt.Printf("transition table: the step tests made %d distinct transitions, as %s has them\n", len(got), agentTransitionsGolden)
		}
		return 0
	}
	diff := append(missing, extra...)
	sort.SliceStable(diff, func(i, j int) bool { // (a removed row next to the one added in its place)
		if a, b := diff[i][2:], diff[j][2:]; a != b {
			return a < b
		}
		return diff[i] < diff[j]
	})
	return fail("the step tests' transitions differ from %s (- only in the file, + only in the tests now).\n"+
		"If the change is meant, regenerate the file (%s) and review its diff:\n%s", agentTransitionsGolden, agentRegenerate,
		strings.Join(diff, "\n"))
}

func TestAgentEventAndActionNames(t *testing.T) {
	m := Machine{State: State{Phase: PhaseDeferred, Operation: OpReboot, RequestID: "r2", Mine: []string{"r1", "r2"}, OnBus: true}}
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{EvBusStatus{Status: &nodedrain.NodeDrainStatus{Status: nodedrain.StatusComplete, RequestID: "r2"}}, "EvBusStatus(COMPLETE,ours)"},
		{EvBusStatus{Status: &nodedrain.NodeDrainStatus{Status: nodedrain.StatusComplete, RequestID: "r1", SlotReleased: true}}, "EvBusStatus(COMPLETE,mine,released)"},
		{EvBusStatus{Status: &nodedrain.NodeDrainStatus{Status: nodedrain.StatusRequested, RequestID: "x"}}, "EvBusStatus(REQUESTED,other)"},
		{EvBusStatus{}, "EvBusStatus(none)"},
		{EvBusDone{Publish: true, RequestID: "r2"}, "EvBusDone(publish:ok)"},
		{EvBusDone{Err: errors.New("x")}, "EvBusDone(withdraw:error+stale)"},
		{EvTimer{}, "EvTimer(early)"},
		{EvTrigger{Operation: OpReboot, Caught: true, Context: "reboot"}, "EvTrigger(reboot+caught)"},
		{EvShutdownCalledOff{}, "EvShutdownCalledOff"},
	} {
		if got := agentEventLabel(m, c.ev, t0); got != c.want {
			t.Errorf("agentEventLabel(%T) = %q, want %q", c.ev, got, c.want)
		}
	}
	for _, c := range []struct {
		a    Action
		want string
	}{
		{RunCommand{Operation: OpUpdate}, "RunCommand(update)"}, {WithdrawRequest{Pending: true}, "WithdrawRequest(pending)"},
		{ReadStatus{}, "ReadStatus"}, {Report{}, ""}, {TriggerResult{}, "TriggerResult(refused)"},
	} {
		if got := agentActionName(c.a); got != c.want {
			t.Errorf("agentActionName(%T) = %q, want %q", c.a, got, c.want)
		}
	}
}
