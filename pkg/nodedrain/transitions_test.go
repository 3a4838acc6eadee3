package nodedrain

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The coordinator's transition table (see phase.go): TestTransitionTable explores the machine
// and compares its transitions with testdata/transitions.golden; TestMain checks, after the
// tests, that every transition a step test made (through run.step) is a row of it.

var updateTransitions = flag.Bool("update-transitions", false, "rewrite testdata/transitions.golden from the machine")

const transitionsGolden = "testdata/transitions.golden"

// updatingTransitions reports whether the golden table is to be rewritten (-update-transitions, or
// EDGEDRAIN_UPDATE_TRANSITIONS=1).
func updatingTransitions() bool {
	return *updateTransitions || os.Getenv("EDGEDRAIN_UPDATE_TRANSITIONS") == "1"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if check := checkStepTransitions(); code == 0 { // (after a failure too, for what it says)
		code = check
	}
	os.Exit(code)
}

// transition is one row of the table.
type transition struct {
	From    string // a Phase, or restartPhase
	Event   string
	To      Phase
	Actions string // the action names, sorted, space-separated; "-" for none
}

// restartPhase is the pseudo-phase a resumed drain comes from (Resume after a restart).
const restartPhase = "(restart)"

// transitionOf is what Step(before, ev, now, p) = (after, actions) makes a row of; ok is false
// for a step that changes neither the phase nor acts (a no-op at this level: not in the table).
func transitionOf(before Drain, ev Event, now time.Time, p Limits, after Drain, actions []Action) (tr transition, ok bool) {
	tr = transition{From: string(before.Phase()), Event: eventLabel(before, ev, now, p), To: after.Phase(), Actions: actionNames(before, actions)}
	return tr, len(actions) > 0 || before.Phase() != after.Phase()
}

func actionNames(before Drain, actions []Action) string {
	if len(actions) == 0 {
		return "-"
	}
	names := make([]string, len(actions))
	for i, a := range actions {
		names[i] = actionLabel(before, a)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// withNote is tr with a note (Publish(note)) among its actions, if it has none: a note publishes
// only a change, so a step that would publish the note it already published does not, and the
// table keeps only the row with the note.
func withNote(tr transition) (transition, bool) {
	if strings.Contains(tr.Actions, "Publish(note)") {
		return tr, false
	}
	names := []string{"Publish(note)"}
	if tr.Actions != "-" {
		names = append(names, strings.Fields(tr.Actions)...)
	}
	sort.Strings(names)
	tr.Actions = strings.Join(names, " ")
	return tr, true
}

// mergeNotes drops the rows that differ from another only by the other's note.
func mergeNotes(rows map[transition]bool) map[transition]bool {
	out := make(map[transition]bool, len(rows))
	for tr := range rows {
		if noted, ok := withNote(tr); !ok || !rows[noted] {
			out[tr] = true
		}
	}
	return out
}

// stepTransitions are the transitions the step tests made (run.step), with the first test
// that made each.
var stepTransitions = struct {
	sync.Mutex
	m map[transition]string
}{m: map[transition]string{}}

// recordStep records a step a test made through run.step.
func recordStep(t *testing.T, before Drain, ev Event, now time.Time, p Limits, after Drain, actions []Action) {
	tr, ok := transitionOf(before, ev, now, p, after, actions)
	if !ok {
		return
	}
	stepTransitions.Lock()
	defer stepTransitions.Unlock()
	if _, seen := stepTransitions.m[tr]; !seen {
		stepTransitions.m[tr] = t.Name()
	}
}

// checkStepTransitions fails (exit code 1) when a step test made a transition that is not a row
// of the golden table: the exploration does not reach it (its event alphabet lacks something a
// test does), or the table is out of date. Valid for any subset of the tests (-run).
func checkStepTransitions() int {
	stepTransitions.Lock()
	defer stepTransitions.Unlock()
	if len(stepTransitions.m) == 0 {
		return 0
	}
	data, err := os.ReadFile(transitionsGolden)
	if err != nil {
		fmt.Fprintf(os.Stderr, "transition table: %v\n", err)
		return 1
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		rows[normalizeRow(line)] = true
	}
	var missing []string
	for tr, test := range stepTransitions.m {
		noted, _ := withNote(tr)
		if !rows[normalizeRow(formatRow(tr))] && !rows[normalizeRow(formatRow(noted))] {
			missing = append(missing, fmt.Sprintf("  %s   (made by %s)", formatRow(tr), test))
		}
	}
	if len(missing) == 0 {
		if testing.Verbose() {
			fmt.Printf("transition table: the step tests made %d distinct transitions, all rows of %s\n", len(stepTransitions.m),
				transitionsGolden)
		}
		return 0
	}
	sort.Strings(missing)
	fmt.Fprintf(os.Stderr, "--- FAIL: transition table: %d transition(s) made by the step tests are not rows of %s\n"+
		"(extend the exploration's events in transitions_test.go, or regenerate the table: go test ./pkg/nodedrain -run "+
		"TestTransitionTable -update-transitions):\n%s\n", len(missing), transitionsGolden, strings.Join(missing, "\n"))
	return 1
}

var rowSpaces = regexp.MustCompile(`\s+`)

func normalizeRow(line string) string {
	return rowSpaces.ReplaceAllString(strings.TrimSpace(line), " ")
}

// Column widths of the table (fixed, so that a new row does not realign every other one).
const (
	fromWidth  = 22
	eventWidth = 46
	toWidth    = 22
)

func padColumn(s string, w int) string { return s + strings.Repeat(" ", max(2, w-len(s))) }

func formatRow(tr transition) string {
	return padColumn(tr.From, fromWidth) + padColumn(tr.Event, eventWidth) + "→  " + padColumn(string(tr.To), toWidth) + tr.Actions
}

// ---- exploration ----

// explored is what the exploration found, for one or more policies.
type explored struct {
	rows    map[transition]bool
	states  int
	unknown []string // states in PhaseUnknown, described
	phases  map[Phase]int
}

var (
	exploreOnce   sync.Once
	explorationOf explored
)

// exploration explores the machine once per test binary.
func exploration() explored {
	exploreOnce.Do(func() {
		explorationOf = explored{rows: map[transition]bool{}, phases: map[Phase]int{}}
		for _, p := range explorationPolicies() {
			explore(&explorationOf, p)
		}
		explorationOf.rows = mergeNotes(explorationOf.rows)
	})
	return explorationOf
}

// explorationPolicies are the policies explored: the step tests', and with the return gate
// off and a decommission's keys removed at once (they change which transitions there are).
func explorationPolicies() []Limits {
	p := testPolicy()
	noGate := p
	noGate.ReturnTimeout = 0
	noLinger := p
	noLinger.DecommissionLinger = 0
	return []Limits{p, noGate, noLinger}
}

// xstate is a drain and its clock, as the exploration reached them.
type xstate struct {
	d   Drain
	now time.Time
}

// explore runs every event of the alphabet on every state reachable from a fresh drain
// and from every status the machine publishes, resumed after a restart with the request as it
// was, withdrawn or replaced, and records the transitions into x. States are told apart by all
// they hold but their times (which only say whether a retry is due, the return gate's deadline
// past, a Node missing for NodeGoneAfter) and what only times depend on.
func explore(x *explored, p Limits) {
	seen := map[xkey]bool{}
	resumed := map[rkey]bool{}
	var queue []xstate
	add := func(s xstate) {
		if k := stateKey(s.d, s.now, p); !seen[k] {
			seen[k] = true
			queue = append(queue, s)
			x.states++
			ph := s.d.Phase()
			x.phases[ph]++
			if ph == PhaseUnknown {
				x.unknown = append(x.unknown, describeState(s.d))
			}
		}
	}
	var statuses []xstate // published statuses, to resume from
	published := func(s xstate, actions []Action) {
		for _, a := range actions {
			if pub, ok := a.(Publish); ok {
				if k := resumeKey(pub.Status); !resumed[k] {
					resumed[k] = true
					statuses = append(statuses, xstate{d: Drain{Status: pub.Status}, now: s.now})
				}
			}
		}
	}
	add(xstate{d: Drain{Status: NodeDrainStatus{Node: "edge-1.shop", Status: StatusNotRequested}}, now: t0})
	for len(queue) > 0 || len(statuses) > 0 {
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			for _, e := range alphabet(s.d, s.now, p) {
				d, actions := Step(s.d, e.ev, e.now, p)
				if tr, ok := transitionOf(s.d, e.ev, e.now, p, d, actions); ok {
					x.rows[tr] = true
				}
				published(s, actions)
				add(xstate{d: d, now: e.now})
			}
		}
		for len(statuses) > 0 {
			st := statuses[0].d.Status
			now := statuses[0].now.Add(time.Minute)
			statuses = statuses[1:]
			for _, r := range resumeRequests(st) {
				d, actions := Resume(st, r.req, now, p)
				tr := transition{From: restartPhase, Event: resumeLabel(st, r.name), To: d.Phase(), Actions: actionNames(Drain{Status: st}, actions)}
				x.rows[tr] = true
				s := xstate{d: d, now: now}
				published(s, actions)
				add(s)
			}
		}
	}
}

// stateKey tells states apart for the exploration (see explore): by everything Step reads of
// them but the request IDs themselves (only whether the request is the one the status names),
// the times (only whether a retry is due, the return gate's deadline past, a Node missing for
// NodeGoneAfter), the messages and blockers (they only decide whether a note publishes), what
// only decides when a blocked gate is asked again, and GateSafe (which Step never reads).
func stateKey(d Drain, now time.Time, p Limits) xkey {
	st := d.Status
	deadline := d.ReturnDeadline(p)
	k := xkey{status: st.Status, requestedBy: st.RequestedBy, attempt: st.Attempt, waiting: d.Waiting, retryOp: d.RetryOp,
		nextAttempt: d.NextAttempt}
	if r := d.Request; r != nil {
		k.request, k.sameRequest, k.requestedBy2, k.context = true, r.RequestID == st.RequestID, r.RequestedBy, r.Context
	}
	for i, bit := range [...]bool{st.CordonedByUs, !st.ReturningSince.IsZero(), st.SlotReleased, st.DeclaredShutdown, st.Decommission,
		st.CompleteSent, st.APIUnreachable, st.RequestID != "", d.Evicted, d.ForgetFailed, d.NodeMissing, d.NodeUID != "",
		d.UncordonAfter, d.CordonKnown, d.BusHolds, d.RetryOp != OpNone && !now.Before(d.RetryAt),
		!deadline.IsZero() && !now.Before(deadline), !d.MissingSince.IsZero(), !d.MissingSince.IsZero() && now.Sub(d.MissingSince) >= NodeGoneAfter} {
		if bit {
			k.bits |= 1 << i
		}
	}
	return k
}

type xkey struct {
	status                    DrainStatus
	requestedBy, requestedBy2 Requester
	attempt, nextAttempt      int
	waiting, retryOp          Op
	request, sameRequest      bool
	context                   string
	bits                      uint32
}

// resumeKey tells published statuses apart by what Resume reads of them.
func resumeKey(st NodeDrainStatus) rkey {
	return rkey{st.Status, st.RequestedBy, st.Attempt, st.RequestID != "", st.CordonedByUs, !st.ReturningSince.IsZero(), st.SlotReleased,
		st.DeclaredShutdown, st.Decommission, st.CompleteSent, st.APIUnreachable}
}

type rkey struct {
	status                                                                      DrainStatus
	requestedBy                                                                 Requester
	attempt                                                                     int
	id, ours, returning, released, shutdown, decommission, sent, apiUnreachable bool
}

type namedRequest struct {
	name string
	req  *NodeDrainRequest
}

// resumeRequests are the requests a resumed drain may find on the bus: none (withdrawn while no
// coordinator ran), the one its status answers, or a new one.
func resumeRequests(st NodeDrainStatus) []namedRequest {
	out := []namedRequest{{"none", nil}}
	if st.RequestID != "" {
		out = append(out, namedRequest{"same", RequestOf(st, "reboot")})
	}
	return append(out, namedRequest{"new", req(otherID(st.RequestID))})
}

// resumeLabel names a resume: the status it resumes from, what of it Resume itself tells apart
// (edgedrain's cordon, the return gate, a decommission done, a COMPLETE sent), and the request on
// the bus. (Other flags, such as a declared shutdown, decide where the withdrawal or the new
// request it hands to Step goes: more than one row.)
func resumeLabel(st NodeDrainStatus, request string) string {
	flags := []string{st.Status.String()}
	for _, f := range []struct {
		on   bool
		name string
	}{
		{st.CordonedByUs, "ours"}, {!st.ReturningSince.IsZero(), "returning"}, {st.Decommission && st.SlotReleased, "decommissioned"},
		{st.CompleteSent, "sent"},
	} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	return "Resume(" + strings.Join(flags, "+") + ",request:" + request + ")"
}

func otherID(id string) string {
	if id == "a" {
		return "b"
	}
	return "a"
}

func describeState(d Drain) string {
	return fmt.Sprintf("status %s, request %v, waiting %s, retry %s, returning %v, uncordonAfter %v, forgetFailed %v, slotReleased %v, decommission %v",
		d.Status.Status, d.Request != nil, d.Waiting, d.RetryOp, d.Returning(), d.UncordonAfter, d.ForgetFailed, d.Status.SlotReleased,
		d.Status.Decommission)
}

type timedEvent struct {
	ev  Event
	now time.Time
}

// alphabet is the exploration's alphabet in state d at now: what the coordinator's executor,
// admission, informers and bus may feed a drain (an answer only for the operation in flight,
// EvAdmit only to a drain that awaits admission, as Admit does); timers when a retry is due,
// the return gate's deadline is past, or late, when a Node has been missing for NodeGoneAfter.
func alphabet(d Drain, now time.Time, p Limits) []timedEvent {
	id := d.Status.RequestID
	next := otherID(id)
	decom, shutdown := req(next), req(next)
	decom.Context, shutdown.Context = "decommission disk worn out", ClusterShutdownContext
	vol := []Blocker{{Kind: BlockerVolume, Name: "pvc-x", Reason: "last healthy replica"}}
	alert := []Blocker{{Kind: "Alert", Name: "NodeMaintenanceFreeze", Reason: "firing"}}
	evs := []Event{
		EvRequest{Request: req(next)}, EvRequest{Request: decom}, EvRequest{Request: shutdown}, EvRequest{},
		EvChanged{},
		EvAPIUnreachable{For: 5 * time.Minute, Safe: true}, EvAPIUnreachable{For: 5 * time.Minute, Blockers: vol},
		EvAPIUnreachable{For: 5 * time.Minute, Safe: true, Uncordoned: true}, EvAPIUnreachable{For: 5 * time.Minute, Safe: true, ViewBehind: true},
		EvPublished{Status: d.Status.Status, Holds: d.Status.HoldsSlot()}, EvPublishFailed{}, EvCompleteNotLanded{RequestID: id},
		EvNodeGone{For: NodeGoneAfter}, EvNodeUnmanaged{For: NodeGoneAfter}, EvForgetIdle{}, EvCordonFound{},
		EvGiveWay{Reason: "giving way: the other copies of volume v1 are on edge-2.shop"}, EvReleaseSlot{Reason: "node NotReady for 30m"},
	}
	if d.AwaitsAdmission() { // (admission's answers go to such drains only; a decommission is never NOTSUPPORTED)
		evs = append(evs, EvAdmit{}, EvQueued{Message: "waiting: edge-2.shop in maintenance"})
		if !DeclaresDecommission(*d.Request) {
			evs = append(evs, EvNotSupported{Reason: "no other node"})
		}
	}
	if d.Waiting == OpEvict {
		evs = append(evs, EvProgress{RequestID: id, Evicted: 1, Total: 2})
	}
	if d.Waiting != OpNone {
		for _, r := range xAnswers(d.Waiting, vol, alert) {
			r.Op, r.RequestID = d.Waiting, id
			evs = append(evs, r)
		}
		if d.Waiting == OpFinalGate || d.Waiting == OpCheckCordon {
			// Answers older than MaxAnswerAge (the coordinator was paused).
			r := EvResult{Op: d.Waiting, RequestID: id, Safe: true, Cordoned: true, At: now.Add(-2 * MaxAnswerAge)}
			evs = append(evs, r)
		}
	}
	out := make([]timedEvent, 0, len(evs)+3)
	for _, ev := range evs {
		out = append(out, timedEvent{ev, now})
	}
	if d.RetryOp != OpNone {
		out = append(out, timedEvent{EvTimer{}, notBefore(now, d.RetryAt)})
		if !d.MissingSince.IsZero() {
			out = append(out, timedEvent{EvTimer{}, notBefore(now, d.RetryAt.Add(NodeGoneAfter))})
		}
	}
	if dl := d.ReturnDeadline(p); !dl.IsZero() {
		out = append(out, timedEvent{EvTimer{}, notBefore(now, dl)})
	}
	return out
}

func notBefore(now, at time.Time) time.Time {
	if at.After(now) {
		return at
	}
	return now
}

// xAnswers are the ways op may answer (Op and RequestID are set by the caller), as the
// coordinator's executor makes them.
func xAnswers(op Op, vol, alert []Blocker) []EvResult {
	boom := errors.New("boom")
	errs := []EvResult{{Err: boom}}
	switch op {
	case OpCordon:
		return []EvResult{{ByUs: true, UID: "u1"}, {UID: "u1"}, {Err: boom}, {Err: boom, Unreachable: true}}
	case OpGate, OpFinalGate, OpReturnGate:
		return append(errs, EvResult{Safe: true}, EvResult{Blockers: vol}, EvResult{Blockers: alert})
	case OpEvict:
		return append(errs, EvResult{}, EvResult{Err: boom, Unreachable: true},
			EvResult{Err: boom, Blockers: []Blocker{{Kind: BlockerPod, Namespace: "db", Name: "db-0", Reason: "PDB"}}})
	case OpCheckCordon:
		pods := []Blocker{{Kind: BlockerPod, Namespace: "default", Name: "job-4", Reason: "on the node"}}
		return append(errs, EvResult{Cordoned: true, UID: "u1"}, EvResult{UID: "u1"}, EvResult{Missing: true},
			EvResult{Cordoned: true, Missing: true}, EvResult{Cordoned: true, Foreign: true, UID: "u1"},
			EvResult{Cordoned: true, Pods: pods, UID: "u1"}, EvResult{Cordoned: true, Foreign: true, Pods: pods, UID: "u1"},
			EvResult{Cordoned: true, UID: "u2"})
	case OpDeleteNode:
		return append(errs, EvResult{Cordoned: true}, EvResult{Cordoned: true, Missing: true}, EvResult{Missing: true},
			EvResult{}, EvResult{UID: "u2"}, EvResult{Err: fmt.Errorf("%w (9s old)", ErrChecksStale)})
	case OpUncordon:
		return append(errs, EvResult{}, EvResult{Kept: "an operator asked to keep it cordoned"})
	case OpForget:
		return append(errs, EvResult{})
	}
	return nil
}

// ---- the table ----

// phaseDocs reads the one-line documentation of each phase from the table in phase.go's
// comment (phase, status, under way, meaning), for the golden table's headers.
func phaseDocs(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile("phase.go")
	require.NoError(t, err)
	docs := map[string]string{}
	cols := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(string(src), "\n") {
		rest, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			continue
		}
		f := cols.Split(strings.TrimSpace(rest), 4)
		if len(f) == 4 && Phase(f[0]) != "phase" {
			docs[f[0]] = fmt.Sprintf("%s  (status %s; under way: %s)", f[3], f[1], f[2])
		}
	}
	return docs
}

const goldenHeader = `# The coordinator's drain as a transition table: (phase, event) → (phase, actions).
#
# Generated by TestTransitionTable (pkg/nodedrain/transitions_test.go); do not edit. Regenerate:
#
#	go test ./pkg/nodedrain -run TestTransitionTable -update-transitions
#	(or EDGEDRAIN_UPDATE_TRANSITIONS=1 go test ./pkg/nodedrain -run TestTransitionTable)
#
# and review the diff: a change to the machine shows here.
#
# How it is made: the test explores nodedrain.Step from a fresh drain, and from every status
# the machine publishes as a coordinator resumes it after a restart (Resume) with its request as
# it was, withdrawn or replaced: every event of its alphabet in every state reached, under the
# step tests' policy, with the return gate off, and with a decommission's keys removed at once.
# TestMain checks that every transition the step tests make is a row here.
#
# How to read it: one row per transition, grouped by the phase it starts from (the phases are
# described in phase.go); the actions are sorted. A (phase, event) on several rows goes one way
# or another by what the phase does not show (an attempt left, whose cordon it is, the kind of
# request). An event a phase does not list changes neither the phase nor does anything there; it
# may change what the phase does not show (EvChanged brings a recheck forward, EvPublished notes
# that the bus has the status, EvCompleteNotLanded forgets that a COMPLETE was sent) or nothing
# (a stale answer). The exploration feeds events in any order, so a few rows need an unlikely
# interleaving (a publication failing long after it was made).
#
# Names (EventName, ActionName in phase.go): Publish(note) publishes the status the drain already
# had, for the same request, with a new message or blockers (only a change is published: a row
# with a note may also go without it). In an event's parentheses: "+old" an answer older than
# MaxAnswerAge, "+replaced" a Node object other than the one cordoned, "+gone" a Node missing for
# NodeGoneAfter, "+again" a withdrawal delivered again (the drain has no request); "blocked" a
# blocker an informer sees change (a volume, a pod, a node), "blocked-policy" one it does not (an
# alert). EvTimer(due) finds its retry due, EvTimer(deadline) the return gate's ReturnTimeout over.
`

// renderTable writes rows as the golden table.
func renderTable(rows map[transition]bool, docs map[string]string) string {
	order := map[string]int{}
	for i, ph := range allPhases {
		order[string(ph)] = i
	}
	order[restartPhase] = len(allPhases)
	order[string(PhaseUnknown)] = len(allPhases) + 1
	list := make([]transition, 0, len(rows))
	for tr := range rows {
		list = append(list, tr)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.From != b.From {
			return order[a.From] < order[b.From]
		}
		if a.Event != b.Event {
			return a.Event < b.Event
		}
		if a.To != b.To {
			return order[string(a.To)] < order[string(b.To)]
		}
		return a.Actions < b.Actions
	})
	var b strings.Builder
	b.WriteString(goldenHeader)
	from := ""
	for _, tr := range list {
		if tr.From != from {
			from = tr.From
			doc := docs[from]
			if from == restartPhase {
				doc = "a coordinator resumes the drain from its last published status (Resume)"
			}
			fmt.Fprintf(&b, "\n## %s: %s\n", from, doc)
		}
		b.WriteString(formatRow(tr))
		b.WriteString("\n")
	}
	return b.String()
}

// rowLines are a table's rows, without headers and comments.
func rowLines(table string) []string {
	var out []string
	for _, line := range strings.Split(table, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// tableDiff says which rows only one of the two tables has, in the table's order (a row the
// change replaced next to its replacement).
func tableDiff(golden, got string) string {
	had, has := rowLines(golden), rowLines(got)
	var lines []string
	for _, l := range had {
		if !slices.Contains(has, l) {
			lines = append(lines, "- "+l)
		}
	}
	for _, l := range has {
		if !slices.Contains(had, l) {
			lines = append(lines, "+ "+l)
		}
	}
	sortDiff(lines)
	return strings.Join(lines, "\n")
}

// sortDiff orders diff lines by their row, a removed row before the one added in its place.
func sortDiff(lines []string) {
	sort.SliceStable(lines, func(i, j int) bool {
		if a, b := lines[i][2:], lines[j][2:]; a != b {
			return a < b
		}
		return lines[i] < lines[j]
	})
}

// compareGolden compares table with the golden file at path, or rewrites it when updating.
func compareGolden(t *testing.T, path, table, regenerate string) {
	t.Helper()
	if updatingTransitions() {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(table), 0o644))
		t.Logf("wrote %s (%d rows)", path, len(rowLines(table)))
		return
	}
	golden, err := os.ReadFile(path)
	require.NoError(t, err, "regenerate it: %s", regenerate)
	if string(golden) != table {
		t.Errorf("the machine's transitions differ from %s (- only in the file, + only in the machine now).\n"+
			"If the change is meant, regenerate the file (%s) and review its diff:\n%s", path, regenerate, tableDiff(string(golden), table))
	}
}

func TestTransitionTable(t *testing.T) {
	x := exploration()
	require.Empty(t, x.unknown, "states in no phase")
	compareGolden(t, transitionsGolden, renderTable(x.rows, phaseDocs(t)),
		"go test ./pkg/nodedrain -run TestTransitionTable -update-transitions")
}

// Every state the exploration reaches is in a phase (Phase is total), and every phase is
// reached and has a row of its own (no dead phase).
func TestPhaseIsTotalAndEveryPhaseLives(t *testing.T) {
	x := exploration()
	if len(x.unknown) > 0 {
		t.Errorf("%d state(s) in no phase, e.g.:\n%s", len(x.unknown), strings.Join(x.unknown[:min(len(x.unknown), 10)], "\n"))
	}
	from := map[string]bool{}
	to := map[Phase]bool{}
	for tr := range x.rows {
		from[tr.From], to[tr.To] = true, true
	}
	for _, ph := range allPhases {
		assert.Positive(t, x.phases[ph], "phase %s is never reached", ph)
		assert.True(t, from[string(ph)], "phase %s has no transition out of it", ph)
		assert.True(t, to[ph], "phase %s has no transition into it", ph)
	}
	t.Logf("%d states, %d rows", x.states, len(x.rows))
}

// Every phase has its line in phase.go's table, and every line there is a phase.
func TestPhaseTableDocumentsEveryPhase(t *testing.T) {
	docs := phaseDocs(t)
	for _, ph := range append(slices.Clone(allPhases), PhaseUnknown) {
		assert.Contains(t, docs, string(ph), "phase %s has no line in phase.go's table", ph)
	}
	for name := range docs {
		assert.True(t, slices.Contains(allPhases, Phase(name)) || Phase(name) == PhaseUnknown, "phase.go's table names %q, no phase", name)
	}
}

// The names are stable: a few fixed examples.
func TestEventAndActionNames(t *testing.T) {
	assert.Equal(t, "EvRequest(withdrawn)", EventName(EvRequest{}))
	assert.Equal(t, "EvRequest(new)", EventName(EvRequest{Request: decommissionReq("d")}))
	assert.Equal(t, "EvResult(cordon:ok)", EventName(EvResult{Op: OpCordon, ByUs: true}))
	assert.Equal(t, "EvResult(final-volume-gate:blocked)", EventName(EvResult{Op: OpFinalGate, Blockers: []Blocker{{Kind: BlockerVolume}}}))
	assert.Equal(t, "EvResult(node-deletion:stale-checks)", EventName(EvResult{Op: OpDeleteNode, Err: fmt.Errorf("x: %w", ErrChecksStale)}))
	assert.Equal(t, "EvTimer", EventName(EvTimer{}))
	assert.Equal(t, "EvNodeGone", EventName(EvNodeGone{}))
	assert.Equal(t, "Publish(COMPLETE)", ActionName(Publish{Status: NodeDrainStatus{Status: StatusComplete}}))
	assert.Equal(t, "Start(cordon-check)", ActionName(Start{Op: OpCheckCordon}))
	assert.Equal(t, "Outcome(withdrawn)", ActionName(Outcome{Result: StatusCordoned, Withdrawn: true}))
	assert.Equal(t, "Forgotten", ActionName(Forgotten{}))
	d := Drain{RetryOp: OpCordon, RetryAt: t0}
	assert.Equal(t, "EvTimer(due)", eventLabel(d, EvTimer{}, t0, testPolicy()))
	assert.Equal(t, "EvTimer(early)", eventLabel(d, EvTimer{}, t0.Add(-time.Second), testPolicy()))
}
