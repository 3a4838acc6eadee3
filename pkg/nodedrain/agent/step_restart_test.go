package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// restartUnder plays before from a fresh machine, then the agent "restarts" (only State
// survives) on boot and plays after, all under p; it returns the machine and the actions after
// the restart.
func restartUnder(t *testing.T, p Limits, before []step, boot string, after ...step) (Machine, []Action) {
	t.Helper()
	m, clock, _ := playFrom(t, fresh(), t0, p, before)
	m2 := Machine{Node: m.Node, State: m.State}
	m2, _, acts := playFrom(t, m2, clock, p, append([]step{at(time.Second, EvStart{BootID: boot})}, after...))
	return m2, acts
}

// restart is restartUnder with the test policy, returning the actions' summaries.
func restart(t *testing.T, before []step, boot string, after ...step) (Machine, []string) {
	t.Helper()
	m, acts := restartUnder(t, testPolicy(), before, boot, after...)
	return m, summaries(acts)
}

func TestStepRestart(t *testing.T) {
	deferred := seq(up, []step{now(sentinel(OpReboot, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1"))})
	running := seq(deferred, []step{now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1"))})
	ran := seq(running, []step{now(EvCommandDone{RequestID: "r1"})})

	t.Run("same boot, deferred: the request is published again and still waits for a confirmed COMPLETE", func(t *testing.T) {
		m, got := restart(t, deferred, "b1", now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1")), now(EvBusSnapshot{}),
			now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")))
		assert.Equal(t, []string{"publish r1", "read", "run reboot r1 #1"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
	t.Run("same boot, deferred: withdrawn by someone else while the agent was down, the reboot is cancelled", func(t *testing.T) {
		m, got := restart(t, deferred, "b1", now(pubOK("r1")), now(status(nodedrain.StatusNotRequested, "r1")), now(EvBusSnapshot{}))
		assert.Equal(t, []string{"publish r1", "withdraw"}, got)
		assert.Equal(t, PhaseIdle, m.State.Phase)
		assert.Equal(t, int64(42), m.State.Handled[OpReboot])
	})
	t.Run("same boot, cleared before the read answered: it reads again", func(t *testing.T) {
		cleared := seq(deferred, []step{now(status(nodedrain.StatusComplete, "r1"))})
		m, got := restart(t, cleared, "b1", now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")), now(EvBusSnapshot{}),
			now(read(nodedrain.StatusComplete, "r1")))
		assert.Equal(t, []string{"publish r1", "read", "run reboot r1 #1"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
	t.Run("new boot after the reboot ran: withdraw, idle, sentinel handled", func(t *testing.T) {
		m, got := restart(t, ran, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpReboot, "r2", 42)))
		assert.Equal(t, []string{"withdraw", "refused"}, got)
		assert.Equal(t, PhaseIdle, m.State.Phase)
		assert.Equal(t, int64(42), m.State.Handled[OpReboot])
	})
	t.Run("new boot while the reboot command ran: done", func(t *testing.T) {
		m, got := restart(t, running, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpReboot, "r2", 42)))
		assert.Equal(t, []string{"withdraw", "refused"}, got)
		assert.Equal(t, PhaseIdle, m.State.Phase)
		assert.Equal(t, int64(42), m.State.Handled[OpReboot])
	})
	t.Run("new boot while still deferred: withdraw, idle, the sentinel asks again", func(t *testing.T) {
		m, got := restart(t, deferred, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpReboot, "r2", 42)))
		assert.Equal(t, []string{"withdraw", "accepted", "publish r2"}, got)
		assert.Equal(t, PhaseDeferred, m.State.Phase)
	})
	t.Run("same boot while the reboot command ran: wait for the node to go down", func(t *testing.T) {
		m, got := restart(t, running, "b1", now(pubOK("r1")), at(5*time.Minute, EvTimer{}))
		assert.Equal(t, []string{"publish r1", "command-failed #1"}, got)
		assert.Equal(t, PhaseCleared, m.State.Phase)
	})
	t.Run("same boot while the update command ran: it counts as failed and runs again, confirmed", func(t *testing.T) {
		running := seq(up, []step{now(trigger(OpUpdate, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
			now(read(nodedrain.StatusComplete, "r1"))})
		m, got := restart(t, running, "b1", now(status(nodedrain.StatusComplete, "r1")), now(EvBusSnapshot{}), now(pubOK("r1")),
			at(10*time.Second, EvTimer{}), now(read(nodedrain.StatusComplete, "r1")))
		assert.Equal(t, []string{"command-failed #1", "publish r1", "read", "run update r1 #2"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
	t.Run("idle: a request of ours the coordinator still serves is withdrawn", func(t *testing.T) {
		done := seq(up, []step{now(trigger(OpUpdate, "r0")), now(pubOK("r0")), now(status(nodedrain.StatusComplete, "r0")),
			now(read(nodedrain.StatusComplete, "r0")), now(EvCommandDone{RequestID: "r0"})})
		m, acts := restartUnder(t, testPolicy(), done, "b1", now(wdOK), now(status(nodedrain.StatusComplete, "r0")), now(EvBusSnapshot{}),
			now(status(nodedrain.StatusComplete, "r0")))
		assert.Equal(t, []string{"withdraw", "withdraw"}, summaries(acts))
		for _, w := range withdrawals(acts) {
			assert.Equal(t, []string{"r0"}, w.Own)
		}
		assert.Equal(t, PhaseIdle, m.State.Phase)
	})
	t.Run("idle: a request not ours the coordinator serves is left alone", func(t *testing.T) {
		m, acts := restartUnder(t, testPolicy(), nil, "b1", now(wdOK), now(status(nodedrain.StatusComplete, "x0")), now(EvBusSnapshot{}),
			now(status(nodedrain.StatusComplete, "x0")), now(status(nodedrain.StatusCordoned, "x1")))
		assert.Equal(t, []string{"withdraw"}, summaries(acts))
		require.Len(t, withdrawals(acts), 1)
		assert.Empty(t, withdrawals(acts)[0].Own, "the start-up clean-up may delete no request this agent did not make")
		assert.Equal(t, PhaseIdle, m.State.Phase)
	})
}

// A new boot ID means the operation is done only if the node went down for it: the agent waited
// for it (waiting-boot) or ran a command that takes the node down. An update that failed, or
// was running, when an unrelated reboot happened is not done: its request is withdrawn and its
// sentinel is not recorded as handled, so that it asks again.
func TestStepRestartNewBootIsNotAnUpdate(t *testing.T) {
	boom := errors.New("exit status 1")
	update := func(after ...step) []step {
		return seq(up, []step{now(sentinel(OpUpdate, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
			now(read(nodedrain.StatusComplete, "r1"))}, after)
	}
	tests := []struct {
		name       string
		before     []step
		reboots    bool // Policy.UpdateReboots
		wantPhase  Phase
		wantDone   bool
		wantAfterS []string // after the restart, then the sentinel again
	}{
		{name: "an update whose command failed is not done by a reboot",
			before: update(now(EvCommandDone{RequestID: "r1", Err: boom}))},
		{name: "an update whose command was running is not done by a reboot",
			before: update()},
		{name: "an update interrupted before its read answered is not done by a reboot",
			before: seq(up, []step{now(sentinel(OpUpdate, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1"))})},
		{name: "an update that reboots the node, running when the boot ID changed, is done",
			before: update(), reboots: true, wantDone: true},
		{name: "an update that reboots the node, waiting for the boot, is done",
			before: update(now(EvCommandDone{RequestID: "r1"})), reboots: true, wantDone: true},
		{name: "an update that reboots the node whose command failed is not done",
			before: update(now(EvCommandDone{RequestID: "r1", Err: boom})), reboots: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy()
			p.UpdateReboots = tt.reboots
			m, acts := restartUnder(t, p, tt.before, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpUpdate, "r2", 42)))
			ws := withdrawals(acts)
			require.NotEmpty(t, ws)
			assert.Equal(t, "r1", ws[0].RequestID)
			assert.Contains(t, ws[0].Own, "r1")
			if tt.wantDone {
				assert.Equal(t, []string{"withdraw", "refused"}, summaries(acts))
				assert.Equal(t, int64(42), m.State.Handled[OpUpdate])
				assert.Equal(t, PhaseIdle, m.State.Phase)
				return
			}
			assert.Equal(t, []string{"withdraw", "accepted", "publish r2"}, summaries(acts), "the sentinel asks again")
			assert.NotContains(t, m.State.Handled, OpUpdate)
			assert.Equal(t, PhaseDeferred, m.State.Phase)
			assert.NotEmpty(t, warnings(acts), "the unrelated reboot is reported")
		})
	}
}

func TestStepBusFailuresRetry(t *testing.T) {
	boom := errors.New("nats: timeout")
	steps := seq(up, []step{now(trigger(OpReboot, "r1")), now(EvBusDone{Publish: true, RequestID: "r1", Err: boom}),
		at(time.Second, EvTimer{}), at(time.Second, EvTimer{}), now(EvBusDone{Publish: true, RequestID: "r1", Err: boom}),
		at(2*time.Second, EvTimer{}), now(status(nodedrain.StatusRequested, "r1")), now(pubOK("r1")), at(time.Hour, EvTimer{})})
	m, _, got := play(t, fresh(), steps)
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "publish r1", "publish r1"}, got)
	assert.True(t, m.BusSynced)
	assert.Zero(t, m.BusFailures)
	assert.True(t, m.NextWake().IsZero())
}

// Regression (review, then the simulation): an agent whose state file is lost or unreadable
// cannot tell its own old request from another agent's. Its start-up withdrawal also removes a
// request made before the node booted (stale), instead of leaving the node cordoned and holding a
// slot for good; a request made since the boot may be a live agent's and stays (a second agent
// with the node's name withdrew the first one's live request mid-reboot: seed 5409). Without a
// boot time, or with its state file, it withdraws only its own.
func TestStepFreshStartWithdrawsAStaleRequest(t *testing.T) {
	boot := t0.Add(-time.Minute)
	withdrawals := func(noState bool, bootTime time.Time) []WithdrawRequest {
		m, p := fresh(), testPolicy()
		var out []WithdrawRequest
		for _, ev := range []Event{EvStart{BootID: "b1", Fresh: noState, BootTime: bootTime}, wdOK, status(nodedrain.StatusComplete, "r-old"),
			EvBusSnapshot{}, trigger(OpReboot, "r1"), pubOK("r1"), status(nodedrain.StatusFailedDrain, "r1")} {
			var acts []Action
			m, acts = Step(m, ev, t0, p)
			for _, a := range acts {
				if w, ok := a.(WithdrawRequest); ok {
					out = append(out, w)
				}
			}
		}
		return out
	}
	got := withdrawals(true, boot)
	require.NotEmpty(t, got)
	assert.Equal(t, boot, got[0].Before, "no state file: the start-up withdrawal also takes a request older than the boot")
	for _, w := range got[1:] {
		assert.True(t, w.Before.IsZero(), "after the clean-up, only its own")
	}
	for _, w := range append(withdrawals(false, boot), withdrawals(true, time.Time{})...) {
		assert.True(t, w.Before.IsZero(), "with its state file, or without a boot time, only its own")
	}
	old := nodedrain.NodeDrainRequest{RequestID: "r-old", RequestedAt: boot.Add(-time.Hour)}
	live := nodedrain.NodeDrainRequest{RequestID: "r-live", RequestedAt: boot.Add(time.Second)}
	assert.True(t, Stale(old, boot, "b2"))
	assert.False(t, Stale(live, boot, "b2"))
	assert.False(t, Stale(old, time.Time{}, "b2"))
}

// Regression (simulation with clocks, seeds 50796 and 64603): a request naming the boot it was
// made in is judged by that, not by the boot time, which moves with the clock: a clock stepped
// back since the request by more than its age made the last boot's request look made since this
// boot, and the node was held for good. A request naming this boot stays, whatever its time.
func TestStaleByBootID(t *testing.T) {
	boot := time.Date(2026, 1, 1, 0, 3, 0, 0, time.UTC)
	lastBoot := nodedrain.NodeDrainRequest{RequestID: "r-last", RequestedAt: boot.Add(5 * time.Minute), BootID: "b1"}
	thisBoot := nodedrain.NodeDrainRequest{RequestID: "r-this", RequestedAt: boot.Add(-time.Hour), BootID: "b2"}
	assert.True(t, Stale(lastBoot, boot, "b2"), "made in another boot, though after the boot time by the clock now")
	assert.False(t, Stale(thisBoot, boot, "b2"), "made in this boot, though before the boot time by the clock now")
	assert.False(t, Stale(lastBoot, time.Time{}, "b2"), "no start-up clean-up pending")
	assert.True(t, Stale(nodedrain.NodeDrainRequest{RequestedAt: boot.Add(-time.Second)}, boot, "b2"), "naming no boot: by its time")
	assert.False(t, Stale(lastBoot, boot, ""), "no boot ID known: by its time")

	m := Machine{Node: "n1", Boot: "b2", State: State{RequestID: "r1", Operation: OpReboot}}
	assert.Equal(t, "b2", m.Request().BootID, "the request names the boot it is published in")
}

// Regression (simulation, seed 740080): the start-up clean-up of an agent without its state file
// is kept until its withdrawal succeeds, across an operation asked meanwhile and a restart of the
// agent (the bus was down: it failed, and the restarted agent, with a state file by then, no
// longer withdrew the stale request that held the node).
func TestStepCleanupSurvivesARestart(t *testing.T) {
	boot := t0.Add(-time.Minute)
	p := testPolicy()
	m, _, _ := playFrom(t, fresh(), t0, p, []step{now(EvStart{BootID: "b1", Fresh: true, BootTime: boot}),
		now(EvBusDone{Err: errors.New("nats: no servers available")}), now(trigger(OpUpdate, "r1"))})
	restarted := Machine{Node: m.Node, State: m.State} // the state file, as the agent saved it
	_, acts := Step(restarted, EvStart{BootID: "b1"}, t0.Add(time.Minute), p)
	require.Equal(t, []WithdrawRequest{{RequestID: "r1", Own: []string{"r1"}, Before: boot, Boot: "b1"}}, withdrawals(acts),
		"the restarted agent withdraws the request older than the boot again")
	m, _ = Step(restarted, EvStart{BootID: "b1"}, t0.Add(time.Minute), p)
	m, _ = Step(m, wdOK, t0.Add(time.Minute), p)
	assert.True(t, m.State.CleanupBefore.IsZero(), "done once the withdrawal succeeded")
}

// The start-up clean-up whose withdrawal failed is carried by the publication of the operation
// asked meanwhile: it replaces the request from before the boot (simulation, seed 4731: the
// publication was refused as over another agent's request, and the agent waited for that
// request to end for good, its own operation never asked). Once published, the clean-up is done.
func TestStepPublicationCarriesTheCleanup(t *testing.T) {
	boot := t0.Add(-time.Minute)
	p := testPolicy()
	m, _, acts := playFrom(t, fresh(), t0, p, []step{now(EvStart{BootID: "b1", Fresh: true, BootTime: boot}),
		now(EvBusDone{Err: errors.New("nats: no servers available")}), now(EvBusSnapshot{}), now(trigger(OpUpdate, "r1"))})
	var pubs []PublishRequest
	for _, a := range acts {
		if x, ok := a.(PublishRequest); ok {
			pubs = append(pubs, x)
		}
	}
	require.Len(t, pubs, 1)
	assert.Equal(t, boot, pubs[0].Before, "a request made before the boot is replaced by the publication")
	m, _ = Step(m, pubOK("r1"), t0, p)
	assert.True(t, m.State.CleanupBefore.IsZero(), "done once the publication succeeded")
}

// An agent restarted (same boot) while its update command ran does not know whether the command
// succeeded: on a failing disk it may have, and the agent withdrawn the request, before either
// could be recorded. It publishes nothing and runs nothing until the bus has answered: if the
// request is withdrawn there, the update does not run again (S5; simulation, seed 26150); if
// the bus still serves it, the command is retried as any failed one.
func TestStepRestartWhileAnUpdateRanAsksTheBusFirst(t *testing.T) {
	running := seq(up, []step{now(sentinel(OpUpdate, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1"))})
	m, got := restart(t, running, "b1")
	assert.NotContains(t, got, "publish r1", "published again before the bus answered")
	// Its retry time passes while the bus stays away: that wakes nothing (the snapshot does),
	// or the agent would wake at once, again and again (simulation, L1 livelock).
	m, _, _ = playFrom(t, m, t0.Add(time.Hour), testPolicy(), []step{now(EvTimer{RequestID: "r2"})})
	assert.True(t, m.Interrupted)
	assert.Zero(t, m.NextWake(), "an interrupted run wakes the agent before the bus answered")

	m, got = restart(t, running, "b1", now(status(nodedrain.StatusNotRequested, "r1")), now(EvBusSnapshot{}),
		at(time.Hour, EvTimer{RequestID: "r1"}))
	assert.Equal(t, []string{"command-failed #1", "withdraw"}, got, "the update ran again, or its request was published again")
	assert.Equal(t, PhaseIdle, m.State.Phase)
	assert.Equal(t, int64(42), m.State.Handled[OpUpdate], "the sentinel that asked for it is handled")

	m, got = restart(t, running, "b1", now(status(nodedrain.StatusComplete, "r1")), now(EvBusSnapshot{}),
		at(time.Hour, EvTimer{RequestID: "r1"}), now(read(nodedrain.StatusComplete, "r1")))
	assert.Equal(t, []string{"command-failed #1", "publish r1", "read", "run update r1 #2"}, got)
	assert.Equal(t, PhaseRunning, m.State.Phase)
}

// An update an operator's override let run after the agent had withdrawn its own failed request,
// interrupted by a restart: the NOTREQUESTED on the bus is the agent's own withdrawal from
// before the override, which says nothing of the command: it runs again (review).
func TestStepRestartAfterAnOverrideRunsTheUpdateAgain(t *testing.T) {
	running := seq(up, []step{now(sentinel(OpUpdate, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1")),
		now(status(nodedrain.StatusFailedDrain, "r1")), now(wdOK),
		now(override(nodedrain.StatusComplete, 0)), // runs the update
		now(status(nodedrain.StatusNotRequested, "r1")),
	})
	m, _ := restart(t, running, "b1", now(status(nodedrain.StatusNotRequested, "r1")), now(EvBusSnapshot{}),
		at(time.Hour, EvTimer{RequestID: "r1"}))
	assert.NotEqual(t, PhaseIdle, m.State.Phase, "the override's update was dropped after an interrupted run")
	assert.Zero(t, m.State.Handled[OpUpdate])
}

// The file of an override that let the operation run is removed by the runtime, which may stop
// before it could (a read-only disk, a crash): the agent restarted removes it before anything
// else, and no command starts while it cannot (NotRecorded), or the file would let the next
// operation run without a drain (simulation, O1).
func TestStepRestartRemovesTheOverrideThatLetTheOperationRun(t *testing.T) {
	deferred := seq(up, []step{now(sentinel(OpReboot, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1"))})
	ran := seq(deferred, []step{now(override(nodedrain.StatusNotSupported, 0))})
	_, got := restart(t, ran, "b1")
	require.NotEmpty(t, got)
	assert.Equal(t, "remove-override", got[0], "restarted, the agent must remove the override file acted on first: %v", got)

	_, got = restart(t, deferred, "b1")
	assert.NotContains(t, got, "remove-override", "an operation no override let run leaves an operator's file alone")
}

// An agent restarted while its update ran, whose command's shell recorded the success the agent
// could not (paused or killed before it heard, its disk refusing the state file): the update is
// done, whatever the bus says; an outcome of another request says nothing of this one.
func TestStepRestartAfterTheCommandRecordedItsSuccess(t *testing.T) {
	running := seq(up, []step{now(sentinel(OpUpdate, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1"))})
	m, clock, _ := playFrom(t, fresh(), t0, testPolicy(), running)
	require.Equal(t, PhaseRunning, m.State.Phase)
	for _, c := range []struct {
		succeeded string
		want      []string
		phase     Phase
	}{
		{"r1", []string{"withdraw"}, PhaseIdle},
		{"r0", []string{"command-failed #1"}, PhaseCleared},
	} {
		m2, _, acts := playFrom(t, Machine{Node: m.Node, State: m.State}, clock, testPolicy(), []step{
			at(time.Second, EvStart{BootID: "b1", Succeeded: c.succeeded}),
			now(status(nodedrain.StatusComplete, "r1")), now(EvBusSnapshot{}), at(time.Hour, EvTimer{RequestID: "r2"})})
		got := summaries(acts)
		assert.Equal(t, c.want, got[:min(len(got), len(c.want))], c.succeeded)
		assert.NotContains(t, got, "run update r1 #2", c.succeeded)
		assert.Equal(t, c.phase, m2.State.Phase, c.succeeded)
		if c.phase == PhaseIdle {
			assert.Equal(t, int64(42), m2.State.Handled[OpUpdate], "the sentinel that asked for it is handled")
		}
	}
}
