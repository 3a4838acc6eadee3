package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testPolicy() Limits {
	return Limits{DrainRetryBackoff: time.Minute, DrainRetryBackoffMax: 4 * time.Minute,
		CommandRetryBackoff: 10 * time.Second, CommandRetryBackoffMax: time.Minute,
		RebootTimeout: 5 * time.Minute, BusRetry: 2 * time.Second}
}

// step is one event of a sequence, after advancing the clock by after.
type step struct {
	after time.Duration
	ev    Event
}

func at(after time.Duration, ev Event) step { return step{after: after, ev: ev} }
func now(ev Event) step                     { return step{ev: ev} }

func status(s nodedrain.DrainStatus, id string) Event {
	return EvBusStatus{Status: &nodedrain.NodeDrainStatus{Node: "edge-1", Status: s, RequestID: id}}
}

// read is the answer to a ReadStatus: the status the bus holds now.
func read(s nodedrain.DrainStatus, id string) Event {
	return EvStatusRead{Status: &nodedrain.NodeDrainStatus{Node: "edge-1", Status: s, RequestID: id}}
}

func override(status nodedrain.DrainStatus, by nodedrain.Requester) Event {
	return EvOverride{Override: &nodedrain.StatusOverride{Status: status, RequestedBy: by}}
}

func trigger(op Operation, id string) Event {
	return EvTrigger{Operation: op, Context: string(op), RequestID: id}
}

func sentinel(op Operation, id string, mtime int64) Event {
	return EvTrigger{Operation: op, Context: string(op), RequestID: id, Sentinel: "/run/" + string(op) + "-required", SentinelModTime: mtime}
}

var (
	pubOK = func(id string) Event { return EvBusDone{Publish: true, RequestID: id} }
	wdOK  = EvBusDone{}
	// up is an agent start on boot b1 with the bus answering and no status published yet.
	up = []step{now(EvStart{BootID: "b1"}), now(wdOK), now(EvBusSnapshot{})}
)

// summary names an action compactly; reports are left out.
func summary(a Action) string {
	switch a := a.(type) {
	case PublishRequest:
		return "publish " + a.Request.RequestID
	case WithdrawRequest:
		return "withdraw"
	case ReadStatus:
		return "read"
	case RunCommand:
		return fmt.Sprintf("run %s %s #%d", a.Operation, a.RequestID, a.Attempt)
	case RemoveOverride:
		return "remove-override"
	case TriggerResult:
		if a.Accepted {
			return "accepted"
		}
		return "refused"
	case DrainFailed:
		return fmt.Sprintf("drain-failed %s #%d", a.Status, a.Failures)
	case CommandFailed:
		return fmt.Sprintf("command-failed #%d", a.Failures)
	case LetShutdownProceed:
		return fmt.Sprintf("proceed %s drained=%v runs=%v", a.RequestID, a.Drained, a.Runs)
	case UndrainedShutdown:
		return fmt.Sprintf("undrained %s %s", a.RequestID, a.Phase)
	}
	return ""
}

// play runs the steps from m and returns the final machine and every action's summary.
func play(t *testing.T, m Machine, steps []step) (Machine, time.Time, []string) {
	t.Helper()
	m, clock, acts := playFrom(t, m, t0, testPolicy(), steps)
	return m, clock, summaries(acts)
}

// playFrom runs the steps from m at clock under p and returns the final machine, the clock and
// every action.
func playFrom(t *testing.T, m Machine, clock time.Time, p Limits, steps []step) (Machine, time.Time, []Action) {
	t.Helper()
	var out []Action
	for _, s := range steps {
		clock = clock.Add(s.after)
		var acts []Action
		before := m
		m, acts = Step(m, s.ev, clock, p)
		recordAgentStep(t, before, s.ev, clock, m, acts) // (the transition table: transitions_test.go)
		out = append(out, acts...)
	}
	return m, clock, out
}

func summaries(acts []Action) []string {
	var out []string
	for _, a := range acts {
		if s := summary(a); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// warnings returns the messages of the warning reports among acts.
func warnings(acts []Action) []string {
	var out []string
	for _, a := range acts {
		if r, ok := a.(Report); ok && r.Level == LevelWarn {
			out = append(out, r.Message)
		}
	}
	return out
}

// withdrawals returns the WithdrawRequest actions among acts.
func withdrawals(acts []Action) []WithdrawRequest {
	var out []WithdrawRequest
	for _, a := range acts {
		if w, ok := a.(WithdrawRequest); ok {
			out = append(out, w)
		}
	}
	return out
}

func seq(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func fresh() Machine { return Machine{Node: "edge-1", State: State{Phase: PhaseIdle}} }

func TestStepPerStatus(t *testing.T) {
	deferred := seq(up, []step{now(trigger(OpReboot, "r1")), now(pubOK("r1"))})
	tests := []struct {
		name      string
		steps     []step
		wantPhase Phase
		want      []string
	}{
		{name: "UNKNOWN waits: nothing is published before the status is known",
			steps:     []step{now(EvStart{BootID: "b1"}), now(wdOK), now(trigger(OpReboot, "r1"))},
			wantPhase: PhasePending, want: []string{"withdraw", "accepted"}},
		{name: "UNKNOWN published on the bus waits",
			steps:     seq([]step{now(EvStart{BootID: "b1"}), now(wdOK), now(status(nodedrain.StatusUnknown, "")), now(EvBusSnapshot{}), now(trigger(OpReboot, "r1"))}),
			wantPhase: PhasePending, want: []string{"withdraw", "accepted"}},
		{name: "NOTREQUESTED publishes the request and defers",
			steps:     seq(up, []step{now(trigger(OpReboot, "r1"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
		{name: "known status arriving after the trigger publishes",
			steps:     []step{now(EvStart{BootID: "b1"}), now(wdOK), now(trigger(OpReboot, "r1")), now(status(nodedrain.StatusNotRequested, "")), now(EvBusSnapshot{})},
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
		{name: "REQUESTED, STARTING, CORDONED, DRAINRETRYING defer",
			steps: seq(deferred, []step{now(status(nodedrain.StatusRequested, "r1")), now(status(nodedrain.StatusStarting, "r1")),
				now(status(nodedrain.StatusCordoned, "r1")), now(status(nodedrain.StatusDrainRetrying, "r1"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
		{name: "COMPLETE for our request is confirmed by a read, then runs the operation once",
			steps: seq(deferred, []step{now(status(nodedrain.StatusCordoned, "r1")), now(status(nodedrain.StatusComplete, "r1")),
				now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
				now(status(nodedrain.StatusComplete, "r1"))}),
			// One read only, though COMPLETE came twice before its answer.
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "a COMPLETE is not run before the read answers",
			steps:     seq(deferred, []step{now(status(nodedrain.StatusComplete, "r1")), at(20*time.Second, EvTimer{})}),
			wantPhase: PhaseCleared, want: []string{"withdraw", "accepted", "publish r1", "read"}},
		{name: "a stale COMPLETE for an older request of ours never runs; ours is published again after a while",
			steps: seq(up, []step{now(trigger(OpReboot, "r0")), now(pubOK("r0")), now(status(nodedrain.StatusFailedDrain, "r0")),
				now(wdOK), at(time.Minute, EvTimer{RequestID: "r1"}), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r0")),
				at(republishAfter, EvTimer{})}),
			wantPhase: PhaseDeferred,
			want: []string{"withdraw", "accepted", "publish r0", "drain-failed FAILEDDRAIN #1", "withdraw", "publish r1",
				"publish r1"}},
		{name: "a COMPLETE for a request not ours never runs and is waited out, not replaced",
			steps:     seq(deferred, []step{now(status(nodedrain.StatusComplete, "x0"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
		{name: "a COMPLETE left for a request not ours is waited out, never withdrawn, then ours is published",
			steps: seq([]step{now(EvStart{BootID: "b1"}), now(wdOK), now(status(nodedrain.StatusComplete, "x0")), now(EvBusSnapshot{}),
				now(trigger(OpReboot, "r1")), now(status(nodedrain.StatusComplete, "x0")), now(status(nodedrain.StatusNotRequested, "x0"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
		{name: "NOTSUPPORTED for our request is confirmed by a read, then runs the operation",
			steps: seq(deferred, []step{now(status(nodedrain.StatusRequested, "r1")), now(status(nodedrain.StatusNotSupported, "r1")),
				now(read(nodedrain.StatusNotSupported, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "NOTSUPPORTED naming no request does not run: the request is published",
			steps: seq([]step{now(EvStart{BootID: "b1"}), now(wdOK), now(status(nodedrain.StatusNotSupported, "")), now(EvBusSnapshot{}),
				now(trigger(OpShutdown, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusNotSupported, "")),
				at(republishAfter, EvTimer{})}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "publish r1"}},
		{name: "NOTSUPPORTED for a request not ours does not run",
			steps:     seq(deferred, []step{now(status(nodedrain.StatusNotSupported, "x0"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
		{name: "FAILEDDRAIN withdraws, keeps the operation, asks again after the backoff",
			steps: seq(deferred, []step{now(status(nodedrain.StatusFailedDrain, "r1")), now(wdOK), now(status(nodedrain.StatusNotRequested, "r1")),
				at(59*time.Second, EvTimer{RequestID: "early"}), at(time.Second, EvTimer{RequestID: "r2"}), now(pubOK("r2")),
				now(status(nodedrain.StatusComplete, "r2")), now(read(nodedrain.StatusComplete, "r2"))}),
			wantPhase: PhaseRunning,
			want: []string{"withdraw", "accepted", "publish r1", "drain-failed FAILEDDRAIN #1", "withdraw",
				"publish r2", "read", "run reboot r2 #1"}},
		{name: "FAILEDCORDON withdraws and backs off; a late FAILED for it changes nothing",
			steps:     seq(deferred, []step{now(status(nodedrain.StatusFailedCordon, "r1")), now(status(nodedrain.StatusFailedCordon, "r1"))}),
			wantPhase: PhaseBackoff, want: []string{"withdraw", "accepted", "publish r1", "drain-failed FAILEDCORDON #1", "withdraw"}},
		{name: "a FAILEDDRAIN for a request not ours is not ours",
			steps:     seq(deferred, []step{now(status(nodedrain.StatusFailedDrain, "x0"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, got := play(t, fresh(), tt.steps)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantPhase, m.State.Phase)
		})
	}
}

func TestStepBackoffDoubles(t *testing.T) {
	steps := seq(up, []step{now(trigger(OpUpdate, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusFailedDrain, "r1")), now(wdOK),
		now(status(nodedrain.StatusNotRequested, "")), at(time.Minute, EvTimer{RequestID: "r2"}), now(pubOK("r2")),
		now(status(nodedrain.StatusFailedDrain, "r2"))})
	m, clock, got := play(t, fresh(), steps)
	assert.Equal(t, PhaseBackoff, m.State.Phase)
	assert.Equal(t, 2, m.State.DrainFailures)
	assert.Equal(t, clock.Add(2*time.Minute), m.State.RetryAt)
	assert.Equal(t, clock.Add(2*time.Minute), m.NextWake())
	assert.Contains(t, got, "drain-failed FAILEDDRAIN #2")
	assert.False(t, m.State.OnBus)
}

func TestStepCommands(t *testing.T) {
	complete := func(op Operation) []step {
		return seq(up, []step{now(trigger(op, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
			now(read(nodedrain.StatusComplete, "r1"))})
	}
	boom := errors.New("exit status 1")
	tests := []struct {
		name      string
		steps     []step
		wantPhase Phase
		want      []string
	}{
		{name: "a failed command runs again after its backoff, never dropped, each run confirmed by a read",
			steps: seq(complete(OpReboot), []step{now(EvCommandDone{RequestID: "r1", Err: boom}), at(9*time.Second, EvTimer{}),
				at(time.Second, EvTimer{}), now(read(nodedrain.StatusComplete, "r1")), now(EvCommandDone{RequestID: "r1", Err: boom}),
				at(19*time.Second, EvTimer{}), at(time.Second, EvTimer{}), now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseRunning,
			want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1", "command-failed #1", "read",
				"run reboot r1 #2", "command-failed #2", "read", "run reboot r1 #3"}},
		{name: "a failed command is not run again once its request was withdrawn by someone else",
			steps: seq(complete(OpReboot), []step{now(EvCommandDone{RequestID: "r1", Err: boom}), at(10*time.Second, EvTimer{}),
				now(read(nodedrain.StatusNotRequested, "r1"))}),
			wantPhase: PhaseIdle,
			want:      []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1", "command-failed #1", "read", "withdraw"}},
		{name: "a failed command waits again when the read status no longer clears it",
			steps: seq(complete(OpReboot), []step{now(EvCommandDone{RequestID: "r1", Err: boom}), at(10*time.Second, EvTimer{}),
				now(read(nodedrain.StatusCordoned, "r1"))}),
			wantPhase: PhaseDeferred,
			want:      []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1", "command-failed #1", "read"}},
		{name: "an update that succeeds withdraws the request and is done",
			steps:     seq(complete(OpUpdate), []step{now(EvCommandDone{RequestID: "r1"})}),
			wantPhase: PhaseIdle, want: []string{"withdraw", "accepted", "publish r1", "read", "run update r1 #1", "withdraw"}},
		{name: "a reboot that returns waits for the node to go down, keeping the request",
			steps:     seq(complete(OpReboot), []step{now(EvCommandDone{RequestID: "r1"}), at(4*time.Minute, EvTimer{})}),
			wantPhase: PhaseWaitingBoot, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "a reboot that never takes the node down counts as failed and runs again",
			steps: seq(complete(OpReboot), []step{now(EvCommandDone{RequestID: "r1"}), at(5*time.Minute, EvTimer{}),
				at(10*time.Second, EvTimer{}), now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseRunning,
			want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1", "command-failed #1", "read",
				"run reboot r1 #2"}},
		{name: "a stale command result changes nothing",
			steps:     seq(complete(OpReboot), []step{now(EvCommandDone{RequestID: "r0", Err: boom})}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, got := play(t, fresh(), tt.steps)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantPhase, m.State.Phase)
		})
	}
}

func TestStepUpdateRebootsWaitsForBoot(t *testing.T) {
	p := testPolicy()
	p.UpdateReboots = true
	m, _, _ := play(t, fresh(), seq(up, []step{now(trigger(OpUpdate, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1"))}))
	require.Equal(t, PhaseRunning, m.State.Phase)
	m, acts := Step(m, EvCommandDone{RequestID: "r1"}, t0, p)
	assert.Equal(t, PhaseWaitingBoot, m.State.Phase)
	for _, a := range acts {
		assert.NotEqual(t, "withdraw", summary(a))
	}
}

func TestStepTriggers(t *testing.T) {
	tests := []struct {
		name      string
		steps     []step
		wantPhase Phase
		want      []string
	}{
		{name: "the same operation again is already pending",
			steps:     seq(up, []step{now(trigger(OpReboot, "r1")), now(sentinel(OpReboot, "r2", 7))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "accepted"}},
		{name: "another operation is refused while one is pending",
			steps:     seq(up, []step{now(trigger(OpUpdate, "r1")), now(trigger(OpReboot, "r2"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "refused"}},
		{name: "an unknown operation is refused",
			steps:     seq(up, []step{now(trigger("dance", "r1"))}),
			wantPhase: PhaseIdle, want: []string{"withdraw", "refused"}},
		{name: "a sentinel whose update is done does not ask again; a rewritten one does",
			steps: seq(up, []step{now(sentinel(OpUpdate, "r1", 7)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
				now(read(nodedrain.StatusComplete, "r1")), now(EvCommandDone{RequestID: "r1"}), now(wdOK), now(sentinel(OpUpdate, "r2", 7)),
				now(sentinel(OpUpdate, "r3", 8)), now(status(nodedrain.StatusNotRequested, "r1"))}),
			// The bus still serves r1, a request of ours that is over: r3 is published at once.
			wantPhase: PhaseDeferred,
			want: []string{"withdraw", "accepted", "publish r1", "read", "run update r1 #1", "withdraw", "refused", "accepted",
				"publish r3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, got := play(t, fresh(), tt.steps)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantPhase, m.State.Phase)
		})
	}
}

func TestStepOverride(t *testing.T) {
	deferred := seq(up, []step{now(trigger(OpReboot, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1"))})
	tests := []struct {
		name         string
		steps        []step
		wantPhase    Phase
		want         []string
		wantOverride bool
	}{
		{name: "COMPLETE runs the operation and is consumed",
			steps:     seq(deferred, []step{now(override(nodedrain.StatusComplete, nodedrain.RequesterDeviceOp))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "remove-override", "run reboot r1 #1"}},
		{name: "COMPLETE for another requester does not apply",
			steps:     seq(deferred, []step{now(override(nodedrain.StatusComplete, nodedrain.RequesterUpdate))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}, wantOverride: true},
		{name: "COMPLETE waiting in the file runs the next operation at once, unasked",
			steps: seq([]step{now(EvStart{BootID: "b1"}), now(wdOK), now(override(nodedrain.StatusComplete, 0)),
				now(trigger(OpUpdate, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "remove-override", "run update r1 #1"}},
		{name: "NOTSUPPORTED runs the operation and is consumed",
			steps:     seq(deferred, []step{now(override(nodedrain.StatusNotSupported, 0))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "remove-override", "run reboot r1 #1"}},
		{name: "FAILEDDRAIN withdraws and backs off",
			steps:     seq(deferred, []step{now(override(nodedrain.StatusFailedDrain, 0))}),
			wantPhase: PhaseBackoff, want: []string{"withdraw", "accepted", "publish r1", "drain-failed FAILEDDRAIN #1", "withdraw"},
			wantOverride: true},
		{name: "UNKNOWN hides a bus COMPLETE: the agent waits",
			steps:     seq(deferred, []step{now(override(nodedrain.StatusUnknown, 0)), now(status(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1"}, wantOverride: true},
		{name: "removing the override lets the bus status act again",
			steps: seq(deferred, []step{now(override(nodedrain.StatusRequested, 0)), now(status(nodedrain.StatusComplete, "r1")),
				now(EvOverride{}), now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "COMPLETE during the backoff runs the operation",
			steps: seq(deferred, []step{now(status(nodedrain.StatusFailedDrain, "r1")), now(wdOK),
				now(override(nodedrain.StatusComplete, 0))}),
			wantPhase: PhaseRunning,
			want: []string{"withdraw", "accepted", "publish r1", "drain-failed FAILEDDRAIN #1", "withdraw", "remove-override",
				"run reboot r1 #1"}},
		{name: "while the command runs an override changes nothing",
			steps: seq(deferred, []step{now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
				now(override(nodedrain.StatusComplete, 0)), now(override(nodedrain.StatusFailedDrain, 0))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}, wantOverride: true},
		{name: "a command cleared by the override runs again after a failure without a read",
			steps: seq(deferred, []step{now(override(nodedrain.StatusComplete, 0)), now(EvCommandDone{RequestID: "r1", Err: errors.New("x")}),
				at(10*time.Second, EvTimer{})}),
			wantPhase: PhaseRunning,
			want: []string{"withdraw", "accepted", "publish r1", "remove-override", "run reboot r1 #1", "command-failed #1",
				"run reboot r1 #2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, got := play(t, fresh(), tt.steps)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantPhase, m.State.Phase)
			assert.Equal(t, tt.wantOverride, m.Override != nil)
		})
	}
}

func TestEffective(t *testing.T) {
	m := fresh()
	assert.Equal(t, View{Status: nodedrain.StatusUnknown, Source: SourceNone, Message: "no status seen yet"}, m.Effective())
	m.BusKnown = true
	assert.Equal(t, nodedrain.StatusNotRequested, m.Effective().Status)
	m.Bus = &nodedrain.NodeDrainStatus{Status: nodedrain.StatusCordoned, RequestID: "r1", Message: "evicting"}
	assert.Equal(t, View{Status: nodedrain.StatusCordoned, RequestID: "r1", Source: SourceBus, Message: "evicting"}, m.Effective())
	m.Override = &nodedrain.StatusOverride{Status: nodedrain.StatusComplete}
	m.State = State{Phase: PhaseDeferred, Operation: OpUpdate, RequestID: "r2"}
	v := m.Effective()
	assert.Equal(t, SourceOverride, v.Source)
	assert.Equal(t, "r2", v.RequestID)
}

func TestPolicyValidate(t *testing.T) {
	require.NoError(t, DefaultLimits().Validate())
	p := DefaultLimits()
	p.DrainRetryBackoffMax = time.Second
	require.ErrorContains(t, p.Validate(), "drain retry backoff")
	p = DefaultLimits()
	p.RebootTimeout = 0
	require.ErrorContains(t, p.Validate(), "reboot timeout")
}
