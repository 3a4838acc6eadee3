package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// deferredReboot is an agent whose reboot (sentinel mtime 42) waits for request r1, published and
// in its drain.
var deferredReboot = seq(up, []step{now(sentinel(OpReboot, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1"))})

// (a) After a reconnect the status watch may replay a COMPLETE that was since withdrawn: the
// fresh read finds the request withdrawn, and the reboot is cancelled, never run.
func TestStepReplayedCompleteAfterWithdrawIsNotRun(t *testing.T) {
	m, _, acts := playFrom(t, fresh(), t0, testPolicy(), seq(deferredReboot, []step{
		now(status(nodedrain.StatusComplete, "r1")), // replayed
		now(read(nodedrain.StatusNotRequested, "r1")),
	}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "withdraw"}, summaries(acts))
	assert.Equal(t, PhaseIdle, m.State.Phase)
	assert.Equal(t, int64(42), m.State.Handled[OpReboot], "cancelled like a finished operation: the sentinel does not ask again")
	ws := withdrawals(acts)
	assert.Equal(t, WithdrawRequest{RequestID: "r1", Own: []string{"r1"}}, ws[len(ws)-1])
	// The replayed COMPLETE delivered again, or the read's answer late, runs nothing.
	m, _, acts = playFrom(t, m, t0, testPolicy(), []step{now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1")), now(sentinel(OpReboot, "r2", 42))})
	assert.Equal(t, []string{"refused"}, summaries(acts))
	assert.Equal(t, PhaseIdle, m.State.Phase)
}

// (a) Every run cleared by the bus is confirmed by a fresh read of the status; only a read that
// still clears the current request lets the command run.
func TestStepConfirmsBeforeRunning(t *testing.T) {
	complete := seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1"))})
	tests := []struct {
		name      string
		steps     []step
		wantPhase Phase
		want      []string
	}{
		{name: "COMPLETE read back runs",
			steps:     seq(complete, []step{now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "NOTSUPPORTED read back for our request runs",
			steps:     seq(complete, []step{now(read(nodedrain.StatusNotSupported, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "a drain still under way read back waits again",
			steps:     seq(complete, []step{now(read(nodedrain.StatusCordoned, "r1"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "read"}},
		{name: "a COMPLETE for another request read back waits again",
			steps:     seq(complete, []step{now(read(nodedrain.StatusComplete, "x0"))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "read"}},
		{name: "NOTSUPPORTED naming no request read back waits again (and makes sure its request is there)",
			steps:     seq(complete, []step{now(read(nodedrain.StatusNotSupported, ""))}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "read", "publish r1"}},
		{name: "no status read back: waits again and publishes the request again",
			steps:     seq(complete, []step{now(EvStatusRead{}), at(republishAfter, EvTimer{})}),
			wantPhase: PhaseDeferred, want: []string{"withdraw", "accepted", "publish r1", "read", "publish r1"}},
		{name: "withdrawn read back: cancelled",
			steps:     seq(complete, []step{now(read(nodedrain.StatusNotRequested, "r1"))}),
			wantPhase: PhaseIdle, want: []string{"withdraw", "accepted", "publish r1", "read", "withdraw"}},
		{name: "a read that waits again needs a new COMPLETE and a new read",
			steps: seq(complete, []step{now(read(nodedrain.StatusCordoned, "r1")), now(status(nodedrain.StatusComplete, "r1")),
				now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "read", "run reboot r1 #1"}},
		{name: "the watch going back to a drain while the read is under way: the read's answer decides",
			steps:     seq(complete, []step{now(status(nodedrain.StatusCordoned, "r1")), now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseRunning, want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}},
		{name: "withdrawn by someone else while the read is under way: cancelled, the late read runs nothing",
			steps:     seq(complete, []step{now(status(nodedrain.StatusNotRequested, "r1")), now(read(nodedrain.StatusComplete, "r1"))}),
			wantPhase: PhaseIdle, want: []string{"withdraw", "accepted", "publish r1", "read", "withdraw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, got := play(t, fresh(), tt.steps)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantPhase, m.State.Phase)
			assert.False(t, m.Confirming)
		})
	}
}

// (a) A failed read is tried again after BusRetry, on the timer; nothing runs meanwhile.
func TestStepReadErrorRetries(t *testing.T) {
	p := testPolicy()
	m, clock, acts := playFrom(t, fresh(), t0, p, seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")),
		now(EvStatusRead{Err: errors.New("nats: timeout")})}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read"}, summaries(acts))
	assert.NotEmpty(t, warnings(acts[len(acts)-1:]), "the failed read is reported")
	assert.Equal(t, PhaseCleared, m.State.Phase)
	assert.Equal(t, clock.Add(p.BusRetry), m.ConfirmRetryAt)
	assert.Equal(t, clock.Add(p.BusRetry), m.NextWake())

	// The COMPLETE again, or a timer before BusRetry, neither reads nor runs.
	m, clock, acts = playFrom(t, m, clock, p, []step{now(status(nodedrain.StatusComplete, "r1")), at(p.BusRetry/2, EvTimer{})})
	assert.Empty(t, summaries(acts))
	// At BusRetry the read is tried again, and its answer decides.
	m, _, acts = playFrom(t, m, clock, p, []step{at(p.BusRetry/2, EvTimer{}), now(read(nodedrain.StatusComplete, "r1"))})
	assert.Equal(t, []string{"read", "run reboot r1 #1"}, summaries(acts))
	assert.Equal(t, PhaseRunning, m.State.Phase)
	assert.True(t, m.ConfirmRetryAt.IsZero())
}

// (a) A run cleared by the override file needs no read.
func TestStepOverrideClearedRunNeedsNoRead(t *testing.T) {
	m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(override(nodedrain.StatusComplete, 0))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "remove-override", "run reboot r1 #1"}, got)
	assert.Equal(t, PhaseRunning, m.State.Phase)
	m, _, got = play(t, fresh(), seq(deferredReboot, []step{now(override(nodedrain.StatusNotSupported, 0))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "remove-override", "run reboot r1 #1"}, got)
	assert.Equal(t, PhaseRunning, m.State.Phase)
}

// (b) NOTSUPPORTED clears only when it names the current request (or comes from the override).
func TestStepNotSupportedNamingNoRequestDoesNotRun(t *testing.T) {
	t.Run("waiting in the status when the trigger comes", func(t *testing.T) {
		m, _, got := play(t, fresh(), []step{now(EvStart{BootID: "b1"}), now(wdOK), now(status(nodedrain.StatusNotSupported, "")),
			now(EvBusSnapshot{}), now(trigger(OpShutdown, "r1"))})
		assert.Equal(t, []string{"withdraw", "accepted", "publish r1"}, got)
		assert.Equal(t, PhaseDeferred, m.State.Phase)
	})
	t.Run("arriving while deferred", func(t *testing.T) {
		m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusNotSupported, ""))}))
		assert.NotContains(t, got, "read")
		assert.NotContains(t, got, "run reboot r1 #1")
		assert.Equal(t, PhaseDeferred, m.State.Phase)
	})
	t.Run("naming the current request it runs, once confirmed", func(t *testing.T) {
		m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusNotSupported, "r1")),
			now(read(nodedrain.StatusNotSupported, "r1"))}))
		assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
}

// (c) NOTREQUESTED naming the current request while it waits means someone else withdrew it
// (edgedrainctl withdraw): the operation is cancelled, not run, and its sentinel does not ask
// again until it changes.
func TestStepWithdrawnBySomeoneElseCancels(t *testing.T) {
	boom := errors.New("exit status 1")
	tests := []struct {
		name  string
		steps []step
		want  []string
	}{
		{name: "while deferred",
			steps: seq(deferredReboot, []step{now(status(nodedrain.StatusNotRequested, "r1"))}),
			want:  []string{"withdraw", "accepted", "publish r1", "withdraw"}},
		{name: "while deferred, before the drain started",
			steps: seq(up, []step{now(sentinel(OpReboot, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusRequested, "r1")),
				now(status(nodedrain.StatusNotRequested, "r1"))}),
			want: []string{"withdraw", "accepted", "publish r1", "withdraw"}},
		{name: "while cleared, waiting to run the command again",
			steps: seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
				now(EvCommandDone{RequestID: "r1", Err: boom}), now(status(nodedrain.StatusNotRequested, "r1")), at(time.Minute, EvTimer{})}),
			want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1", "command-failed #1", "withdraw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, acts := playFrom(t, fresh(), t0, testPolicy(), tt.steps)
			assert.Equal(t, tt.want, summaries(acts))
			assert.Equal(t, PhaseIdle, m.State.Phase)
			assert.Equal(t, int64(42), m.State.Handled[OpReboot])
			ws := withdrawals(acts)
			assert.Equal(t, "r1", ws[len(ws)-1].RequestID)
			// The same sentinel does not ask again; a rewritten one does.
			m, _, acts = playFrom(t, m, t0.Add(time.Hour), testPolicy(), []step{now(wdOK), now(sentinel(OpReboot, "r2", 42)),
				now(sentinel(OpReboot, "r3", 43))})
			assert.Equal(t, []string{"refused", "accepted", "publish r3"}, summaries(acts))
			assert.Equal(t, PhaseDeferred, m.State.Phase)
		})
	}
	t.Run("a NOTREQUESTED naming another request is no cancellation", func(t *testing.T) {
		// The status answers no request of ours: the agent publishes its request again (idempotent).
		m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusNotRequested, "r0"))}))
		assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "publish r1"}, got)
		assert.Equal(t, PhaseDeferred, m.State.Phase)
	})
	t.Run("the running command is not stopped", func(t *testing.T) {
		m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")),
			now(read(nodedrain.StatusComplete, "r1")), now(status(nodedrain.StatusNotRequested, "r1"))}))
		assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
}

// (d) Two agents running under one node name (a cloned machine, a replaced node with the old
// agent still up) share the node's request key and status. Neither withdraws nor replaces the
// other's request, and neither runs on a COMPLETE the other asked for.
func TestStepTwoAgentsOneNodeNameDoNotWithdrawEachOther(t *testing.T) {
	p := testPolicy()
	type agent struct {
		m    Machine
		acts []Action
	}
	a, b := &agent{m: fresh()}, &agent{m: fresh()}
	clock := t0
	feed := func(x *agent, evs ...Event) []Action {
		t.Helper()
		var out []Action
		for _, ev := range evs {
			var acts []Action
			x.m, acts = Step(x.m, ev, clock, p)
			out = append(out, acts...)
		}
		x.acts = append(x.acts, out...)
		return out
	}
	both := func(ev Event) (fromA, fromB []Action) { return feed(a, ev), feed(b, ev) }

	feed(a, EvStart{BootID: "a-boot"}, wdOK, EvBusSnapshot{})
	feed(b, EvStart{BootID: "b-boot"}, wdOK, EvBusSnapshot{})
	// A asks first; the coordinator serves its request.
	assert.Equal(t, []string{"accepted", "publish a1"}, summaries(feed(a, trigger(OpUpdate, "a1"), pubOK("a1"))))
	fa, fb := both(status(nodedrain.StatusRequested, "a1"))
	assert.Empty(t, summaries(fa))
	assert.Empty(t, summaries(fb), "idle B leaves A's request alone")

	// B asks meanwhile: it waits for A's request to end, warning, and neither publishes over it
	// nor withdraws it.
	assert.Equal(t, []string{"accepted"}, summaries(feed(b, trigger(OpReboot, "b1"))))
	assert.Equal(t, PhasePending, b.m.State.Phase)
	fa, fb = both(status(nodedrain.StatusCordoned, "a1"))
	assert.Empty(t, summaries(fa))
	assert.Empty(t, summaries(fb))
	require.NotEmpty(t, warnings(fb))
	assert.Contains(t, warnings(fb)[0], "a1")
	assert.Contains(t, warnings(fb)[0], "did not make")

	// A's COMPLETE runs A's update only; B neither reads nor runs.
	fa, fb = both(status(nodedrain.StatusComplete, "a1"))
	assert.Equal(t, []string{"read"}, summaries(fa))
	assert.Empty(t, summaries(fb))
	fa, fb = both(read(nodedrain.StatusComplete, "a1"))
	assert.Equal(t, []string{"run update a1 #1"}, summaries(fa))
	assert.Empty(t, summaries(fb))
	assert.Equal(t, PhasePending, b.m.State.Phase)

	// A is done and withdraws only its own request; once it is over, B asks.
	fa = feed(a, EvCommandDone{RequestID: "a1"})
	require.Len(t, withdrawals(fa), 1)
	assert.Equal(t, []string{"a1"}, withdrawals(fa)[0].Own)
	feed(a, wdOK)
	fa, fb = both(status(nodedrain.StatusNotRequested, "a1"))
	assert.Empty(t, summaries(fa))
	assert.Equal(t, []string{"publish b1"}, summaries(fb))
	feed(b, pubOK("b1"))

	// The coordinator serves B's request: idle A leaves it alone, whatever it becomes.
	for _, st := range []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusCordoned, nodedrain.StatusComplete} {
		fa, _ = both(status(st, "b1"))
		assert.Empty(t, summaries(fa), "A after %s for B's request", st)
	}
	// A restarts while B's request is served: its clean-up may delete only A's own requests.
	a.m = Machine{Node: a.m.Node, State: a.m.State}
	fa = feed(a, EvStart{BootID: "a-boot"}, wdOK, status(nodedrain.StatusComplete, "b1"), EvBusSnapshot{})
	require.Len(t, withdrawals(fa), 1)
	assert.NotContains(t, withdrawals(fa)[0].Own, "b1")

	for _, w := range withdrawals(a.acts) {
		assert.NotContains(t, w.Own, "b1", "A never may withdraw B's request")
	}
	for _, w := range withdrawals(b.acts) {
		assert.NotContains(t, w.Own, "a1", "B never may withdraw A's request")
	}
	for _, s := range summaries(b.acts) {
		assert.NotEqual(t, "run reboot a1 #1", s)
	}
	assert.Equal(t, PhaseCleared, b.m.State.Phase, "B's own COMPLETE clears B")
}

// (d) An agent remembers the request IDs it made, at most eight, and withdraws only those.
func TestStepRemembersItsOwnRequests(t *testing.T) {
	var steps []step
	steps = append(steps, up...)
	ids := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}
	for _, id := range ids {
		steps = append(steps, now(trigger(OpUpdate, id)), now(pubOK(id)), now(status(nodedrain.StatusComplete, id)),
			now(read(nodedrain.StatusComplete, id)), now(EvCommandDone{RequestID: id}), now(wdOK))
	}
	m, _, acts := playFrom(t, fresh(), t0, testPolicy(), steps)
	assert.Equal(t, ids[2:], m.State.Mine, "the newest eight")
	ws := withdrawals(acts)
	assert.Equal(t, WithdrawRequest{RequestID: "r9", Own: ids[2:]}, ws[len(ws)-1])
	for _, w := range ws[1:] {
		assert.Contains(t, w.Own, w.RequestID)
		assert.LessOrEqual(t, len(w.Own), 8)
	}

	// Idle: a served request among them is withdrawn; one forgotten is not this agent's to touch.
	_, _, got := play(t, m, []step{now(status(nodedrain.StatusComplete, "r0"))})
	assert.Empty(t, got)
	_, _, got = play(t, m, []step{now(status(nodedrain.StatusComplete, "r5"))})
	assert.Equal(t, []string{"withdraw"}, got)

	// A request asked again after a failed drain is remembered too.
	m, _, _ = play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusFailedDrain, "r1")), now(wdOK),
		at(time.Minute, EvTimer{RequestID: "r2"})}))
	assert.Equal(t, []string{"r1", "r2"}, m.State.Mine)
}

// (e) In pending, anything not another agent's request is asked for at once: nothing served, a
// withdrawn request, or a request of ours that is over.
func TestStepPendingPublishesUnlessForeign(t *testing.T) {
	done := seq(up, []step{now(trigger(OpUpdate, "r0")), now(pubOK("r0")), now(status(nodedrain.StatusComplete, "r0")),
		now(read(nodedrain.StatusComplete, "r0")), now(EvCommandDone{RequestID: "r0"}), now(wdOK)})
	tests := []struct {
		name   string
		status Event
		want   []string
	}{
		{name: "nothing served", status: EvBusStatus{}, want: []string{"accepted", "publish r1"}},
		{name: "NOTREQUESTED naming no request", status: status(nodedrain.StatusNotRequested, ""), want: []string{"accepted", "publish r1"}},
		{name: "NOTREQUESTED naming another request", status: status(nodedrain.StatusNotRequested, "x0"), want: []string{"accepted", "publish r1"}},
		{name: "a COMPLETE of ours that is over", status: status(nodedrain.StatusComplete, "r0"), want: []string{"accepted", "publish r1"}},
		{name: "a FAILEDDRAIN of ours", status: status(nodedrain.StatusFailedDrain, "r0"), want: []string{"accepted", "publish r1"}},
		{name: "another agent's request waits", status: status(nodedrain.StatusCordoned, "x0"), want: []string{"accepted"}},
		{name: "another agent's COMPLETE waits", status: status(nodedrain.StatusComplete, "x0"), want: []string{"accepted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, _ := play(t, fresh(), done)
			m.Bus, m.BusSynced = nil, true
			m, _, _ = play(t, m, []step{now(tt.status)})
			m, _, got := play(t, m, []step{now(trigger(OpReboot, "r1"))})
			assert.Equal(t, tt.want, got)
			if len(tt.want) == 1 {
				assert.Equal(t, PhasePending, m.State.Phase)
				assert.False(t, m.State.OnBus)
			} else {
				assert.Equal(t, PhaseDeferred, m.State.Phase)
			}
		})
	}
}

// (g) A published request the bus status does not answer is published again after
// republishAfter: it may have vanished while no coordinator ran to see it.
func TestStepRepublishesAnUnansweredRequest(t *testing.T) {
	m, clock, got := play(t, fresh(), seq(up, []step{now(trigger(OpReboot, "r1")), now(pubOK("r1"))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1"}, got)
	assert.Equal(t, clock.Add(republishAfter), m.NextWake())
	m, clock, acts := playFrom(t, m, clock, testPolicy(), []step{at(republishAfter-time.Second, EvTimer{})})
	assert.Empty(t, summaries(acts))
	m, clock, acts = playFrom(t, m, clock, testPolicy(), []step{at(time.Second, EvTimer{}), now(pubOK("r1"))})
	assert.Equal(t, []string{"publish r1"}, summaries(acts))
	assert.Equal(t, clock.Add(republishAfter), m.NextWake(), "still unanswered: again later")
	// Answered: no more republishing.
	m, _, acts = playFrom(t, m, clock, testPolicy(), []step{at(time.Second, status(nodedrain.StatusRequested, "r1")),
		at(time.Hour, EvTimer{})})
	assert.NotContains(t, summaries(acts), "publish r1", "a request the coordinator answers is not published again")
	assert.Equal(t, PhaseDeferred, m.State.Phase)

	// A status for another agent's request is no reason to publish over it.
	m, clock, _ = play(t, fresh(), seq(up, []step{now(trigger(OpReboot, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "x0"))}))
	_, _, acts = playFrom(t, m, clock, testPolicy(), []step{at(time.Hour, EvTimer{})})
	assert.NotContains(t, summaries(acts), "publish r1")
}

// Once the request is answered and the operation goes on (cleared, running, waiting for the
// boot), a republish planned while it was unanswered must not fire: it would put back a request
// withdrawn meanwhile (edgedrainctl withdraw), which the coordinator would drain again.
func TestStepNoRepublishOnceAnswered(t *testing.T) {
	m, clock, got := play(t, fresh(), seq(up, []step{now(trigger(OpReboot, "r1")), now(pubOK("r1")),
		now(status(nodedrain.StatusCordoned, "r1")), now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
		now(EvCommandDone{RequestID: "r1"}), now(status(nodedrain.StatusNotRequested, "r1"))}))
	require.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}, got)
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	_, _, acts := playFrom(t, m, clock, testPolicy(), []step{at(republishAfter, EvTimer{})})
	assert.NotContains(t, summaries(acts), "publish r1", "the withdrawn request is put back")
}

// Regression: an override file saying NOTREQUESTED holds the operation back; it is not a
// withdrawal and does not cancel (a forgotten file would silently drop every operation).
func TestStepOverrideNotRequestedDoesNotCancel(t *testing.T) {
	m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(override(nodedrain.StatusNotRequested, 0))}))
	assert.Equal(t, PhaseDeferred, m.State.Phase)
	assert.NotContains(t, got, "withdraw r1")
	assert.Zero(t, m.State.Handled[OpReboot], "the sentinel is not recorded as handled")
}

// Regression (simulation, seed 2358): the confirmation read was served while the status was
// CORDONED but answered after the watch had delivered the newer COMPLETE; taking the older read
// rolled the agent back to waiting, and nothing newer ever came. Values are ordered by revision;
// the newer delivery confirms nothing itself (review): the status is read again, and that read
// runs the command.
func TestStepOlderReadDoesNotRollBack(t *testing.T) {
	complete := nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: "r1"}
	cordoned := nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusCordoned, RequestID: "r1"}
	m, _, got := play(t, fresh(), seq(deferredReboot, []step{
		now(EvBusStatus{Status: &complete, Revision: 10}),  // cleared: asks for a read
		now(EvBusStatus{Status: &cordoned, Revision: 11}),  // the coordinator checks again
		now(EvBusStatus{Status: &complete, Revision: 12}),  // and completes again
		now(EvStatusRead{Status: &cordoned, Revision: 11}), // the read, answered late
		now(EvStatusRead{Status: &complete, Revision: 12}), // the read asked again
	}))
	assert.Equal(t, PhaseRunning, m.State.Phase, "the newer COMPLETE stands: %v", got)
	assert.Equal(t, uint64(12), m.BusRevision)
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "read", "run reboot r1 #1"}, got)

	// The watch delivers in order: a lower revision from it means the bucket was replaced and
	// read again, and is taken (ignoring it would leave the agent deaf for good).
	m, _, got = play(t, fresh(), seq(deferredReboot, []step{
		now(EvBusStatus{Status: &cordoned, Revision: 20}),
		now(EvBusStatus{Status: &complete, Revision: 3}),
		now(EvStatusRead{Status: &complete, Revision: 3}),
	}))
	assert.Equal(t, PhaseRunning, m.State.Phase, "%v", got)

	// The bucket replaced with nothing delivered since the read was asked: the read's older
	// revision is the bus now, and an old COMPLETE does not confirm.
	m, _, got = play(t, fresh(), seq(deferredReboot, []step{
		now(EvBusStatus{Status: &complete, Revision: 40}), // asks for a read
		now(EvStatusRead{Status: &cordoned, Revision: 2}), // the replaced bucket says otherwise
	}))
	assert.Equal(t, PhaseDeferred, m.State.Phase, "%v", got)
	assert.NotContains(t, got, "run reboot r1 #1")
}

// Regression (simulation, seed 17841): the reboot command returned but the node never went down;
// meanwhile an operator wrote a COMPLETE override and the request was withdrawn on the bus
// (edgedrainctl withdraw). The rerun waited for a bus confirmation that could never come while
// the override kept it cleared, and read the status again at once, forever. Now the later of the
// two decides: a withdrawal after the override cancels; an override after the withdrawal reruns
// the command (and is consumed).
func TestStepRerunAfterFailedRebootLaterOfOverrideAndWithdrawalDecides(t *testing.T) {
	p := testPolicy()
	waitingBoot := seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1")), now(EvCommandDone{RequestID: "r1"})})
	overrideThenWithdraw := seq(waitingBoot, []step{at(time.Second, override(nodedrain.StatusComplete, 0)),
		at(time.Second, status(nodedrain.StatusNotRequested, "r1"))})
	withdrawThenOverride := seq(waitingBoot, []step{at(time.Second, status(nodedrain.StatusNotRequested, "r1")),
		at(time.Second, override(nodedrain.StatusComplete, 0))})

	m, clock, _ := play(t, fresh(), overrideThenWithdraw)
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, clock, acts := playFrom(t, m, clock, p, []step{at(p.RebootTimeout, EvTimer{}), at(time.Hour, EvTimer{})})
	assert.Equal(t, []string{"command-failed #1", "remove-override", "withdraw"}, summaries(acts),
		"the withdrawal came last: cancelled, and the operator's COMPLETE goes with the operation")
	assert.Equal(t, PhaseIdle, m.State.Phase)
	_, _, acts = playFrom(t, m, clock, p, []step{now(trigger(OpUpdate, "u1"))})
	assert.NotContains(t, summaries(acts), "run update u1 #1", "the next operation ran without a drain")

	m, clock, _ = play(t, fresh(), withdrawThenOverride)
	m, clock, acts = playFrom(t, m, clock, p, []step{at(p.RebootTimeout, EvTimer{})})
	assert.Equal(t, []string{"command-failed #1", "remove-override"}, summaries(acts))
	assert.Equal(t, Clearance{Status: nodedrain.StatusComplete, Override: true}, m.State.ClearedBy)
	assert.Equal(t, "override COMPLETE", m.State.ClearedBy.String())
	_, _, acts = playFrom(t, m, clock, p, []step{at(time.Hour, EvTimer{})})
	assert.Equal(t, []string{"run reboot r1 #2"}, summaries(acts), "the override came last: the command runs again, no read loop")
}

// A confirming read that neither confirms nor moves the operation on (a status UNKNOWN naming
// the request) is asked again only after BusRetry: no loop of reads.
func TestStepUnconfirmingReadIsNotRepeatedAtOnce(t *testing.T) {
	p := testPolicy()
	m, clock, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1"))}))
	require.Equal(t, []string{"withdraw", "accepted", "publish r1", "read"}, got)
	m, clock, acts := playFrom(t, m, clock, p, []step{now(read(nodedrain.StatusUnknown, "r1"))})
	require.Equal(t, PhaseCleared, m.State.Phase)
	assert.NotContains(t, summaries(acts), "read", "read again at once")
	_, _, acts = playFrom(t, m, clock, p, []step{at(p.BusRetry, EvTimer{})})
	assert.Contains(t, summaries(acts), "read", "never read again")
}

// Once cleared, an operator's override that holds the operation back (REQUESTED) sends it back
// to waiting, as before it was cleared; the bus's COMPLETE does not run it past the override.
func TestStepHoldOverrideAfterClearanceWaits(t *testing.T) {
	m, _, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")),
		now(override(nodedrain.StatusRequested, 0)), now(read(nodedrain.StatusComplete, "r1"))}))
	assert.Equal(t, PhaseDeferred, m.State.Phase)
	assert.NotContains(t, got, "run reboot r1 #1")
}

// An operation cleared by an operator's override, withdrawn afterwards: an override that does not
// let it run (REQUESTED), written after the withdrawal, does not revive it.
func TestStepHoldOverrideAfterWithdrawalDoesNotRerun(t *testing.T) {
	p := testPolicy()
	m, clock, got := play(t, fresh(), seq(deferredReboot, []step{now(override(nodedrain.StatusComplete, 0)),
		now(EvCommandDone{RequestID: "r1"}), at(time.Second, status(nodedrain.StatusNotRequested, "r1")),
		at(time.Second, override(nodedrain.StatusRequested, 0))}))
	require.Equal(t, []string{"withdraw", "accepted", "publish r1", "remove-override", "run reboot r1 #1"}, got)
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	_, _, acts := playFrom(t, m, clock, p, []step{at(p.RebootTimeout, EvTimer{}), at(time.Hour, EvTimer{})})
	assert.NotContains(t, summaries(acts), "run reboot r1 #2")
	assert.Contains(t, summaries(acts), "withdraw", "cancelled")
}

// A confirmation counts only if it was asked for at most ConfirmMaxAge before the command would
// run: a read answered (or handled) later, after the agent was paused or its loop held up, says
// what the bus held then, not now (a withdrawal or a slot release since). It is read again
// (issue 23, defect 7).
func TestStepConfirmationOlderThanItsBoundIsReadAgain(t *testing.T) {
	complete := seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1"))})
	m, clock, acts := playFrom(t, fresh(), t0, testPolicy(), seq(complete, []step{
		at(ConfirmMaxAge+time.Millisecond, read(nodedrain.StatusComplete, "r1"))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "read"}, summaries(acts))
	assert.Equal(t, PhaseCleared, m.State.Phase)
	assert.True(t, m.Confirming, "read again")
	assert.NotEmpty(t, warnings(acts[len(acts)-3:]), "said why")
	// The new read, answered in time, runs the reboot; one taken exactly at the bound does too.
	m, _, acts = playFrom(t, m, clock, testPolicy(), []step{at(ConfirmMaxAge, read(nodedrain.StatusComplete, "r1"))})
	assert.Equal(t, []string{"run reboot r1 #1"}, summaries(acts))
	assert.Equal(t, PhaseRunning, m.State.Phase)
}

// An override that lets the operation run is consumed by it, NOTSUPPORTED as COMPLETE: left in
// force, a NOTSUPPORTED let every later operation run at once, undrained (issue 23, defect 9).
// One older than a withdrawal goes with the cancelled operation, as a COMPLETE does.
func TestStepNotSupportedOverrideIsConsumed(t *testing.T) {
	p := testPolicy()
	m, clock, got := play(t, fresh(), seq(up, []step{now(override(nodedrain.StatusNotSupported, 0)), now(trigger(OpUpdate, "u1")),
		now(EvCommandDone{RequestID: "u1"}), now(wdOK)}))
	assert.Equal(t, []string{"withdraw", "accepted", "remove-override", "run update u1 #1", "withdraw"}, got)
	assert.Nil(t, m.Override)
	_, _, acts := playFrom(t, m, clock, p, []step{now(trigger(OpUpdate, "u2"))})
	assert.Equal(t, []string{"accepted", "publish u2"}, summaries(acts), "the next update waits for its drain")

	// Written while the node should go down for its reboot, then the request withdrawn by
	// someone else: when the reboot is due again it is cancelled, and the override goes with it.
	m, clock, _ = play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1")), now(EvCommandDone{RequestID: "r1"}),
		at(time.Second, override(nodedrain.StatusNotSupported, 0)), at(time.Second, status(nodedrain.StatusNotRequested, "r1"))}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, clock, acts = playFrom(t, m, clock, p, []step{at(p.RebootTimeout, EvTimer{})})
	assert.Equal(t, []string{"command-failed #1", "remove-override", "withdraw"}, summaries(acts))
	assert.Nil(t, m.Override)
	_, _, acts = playFrom(t, m, clock, p, []step{now(trigger(OpUpdate, "u1"))})
	assert.Equal(t, []string{"accepted", "publish u1"}, summaries(acts))
}
