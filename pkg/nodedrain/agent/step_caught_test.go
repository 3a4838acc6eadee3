package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// caughtShutdown is logind's PrepareForShutdown(true) as the runtime hands it to the machine.
func caughtShutdown(id string) Event {
	return EvTrigger{Operation: OpReboot, Context: "caught: a reboot started outside edgedrain", RequestID: id, Caught: true}
}

// A shutdown started by someone else is held back (its lock kept) until COMPLETE for its own
// request, confirmed by a fresh read, then let through; the node back with a new boot ID ends it.
func TestCaughtShutdownWaitsForItsCompleteThenProceeds(t *testing.T) {
	m, _, got := play(t, fresh(), seq(up, []step{
		now(caughtShutdown("c1")), now(pubOK("c1")),
		now(status(nodedrain.StatusCordoned, "c1")),
		now(status(nodedrain.StatusComplete, "other")), // another request's COMPLETE lets nothing through
		now(status(nodedrain.StatusComplete, "c1")),
		now(read(nodedrain.StatusComplete, "c1")),
	}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish c1", "read", "proceed c1 drained=true runs=true"}, got)
	assert.Equal(t, PhaseWaitingBoot, m.State.Phase)
	assert.True(t, m.State.Caught)

	m, _, got = play(t, m, []step{now(EvStart{BootID: "b2"})})
	assert.Equal(t, PhaseIdle, m.State.Phase, "back after the caught reboot: done")
	assert.Equal(t, []string{"withdraw"}, got)
}

// A failed drain does not hold a shutdown that cannot wait for the next try: it goes ahead
// undrained, the request staying (the node cordoned) until the node is back.
func TestCaughtShutdownProceedsUndrainedWhenTheDrainFails(t *testing.T) {
	m, _, got := play(t, fresh(), seq(up, []step{
		now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusFailedDrain, "c1")),
	}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish c1", "drain-failed FAILEDDRAIN #1", "proceed c1 drained=false runs=false"}, got)
	assert.Equal(t, PhaseWaitingBoot, m.State.Phase)
	assert.True(t, m.State.OnBus, "the request stays while the node goes down")
}

// A shutdown that went ahead before the agent let it (logind's delay ran out, or the lock was
// lost with the process) is reported as undrained at the next boot, and the request withdrawn.
func TestCaughtShutdownThatWentAheadIsReportedUndrainedAtBoot(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusCordoned, "c1"))}))
	require.Equal(t, PhaseDeferred, m.State.Phase)
	m, _, got := play(t, m, []step{now(EvStart{BootID: "b2"})})
	assert.Equal(t, []string{"undrained c1 deferred", "withdraw"}, got)
	assert.Equal(t, PhaseIdle, m.State.Phase)
}

// A shutdown caught while an update waits for its drain rides on that drain; it goes ahead
// instead of the update's command, and the update is not taken for done: its sentinel, still
// there after the boot, asks again.
func TestCaughtShutdownTakesTheUpdatesPlaceWithoutDoingIt(t *testing.T) {
	m, _, got := play(t, fresh(), seq(up, []step{
		now(sentinel(OpUpdate, "u1", 7)), now(pubOK("u1")),
		now(caughtShutdown("c1")),
		now(status(nodedrain.StatusComplete, "u1")), now(read(nodedrain.StatusComplete, "u1")),
	}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish u1", "accepted", "read", "proceed u1 drained=true runs=true"}, got,
		"the update's command does not run: the node is going down")
	m, _, got = play(t, m, []step{now(EvStart{BootID: "b2"}), now(wdOK), now(sentinel(OpUpdate, "u2", 7))})
	assert.Equal(t, []string{"withdraw", "accepted", "publish u2"}, got, "the update asks again")
	assert.Equal(t, OpUpdate, m.State.Operation)
	assert.False(t, m.State.Caught)
}

// The shutdown of the agent's own command (logind tells every lock holder, the agent too) goes
// ahead at once: its drain is done.
func TestCaughtShutdownOfTheAgentsOwnRebootProceedsAtOnce(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{
		now(trigger(OpReboot, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
	}))
	require.Equal(t, PhaseRunning, m.State.Phase)
	_, _, got := play(t, m, []step{now(caughtShutdown("c1"))})
	assert.Equal(t, []string{"proceed r1 drained=true runs=false", "accepted"}, got)
}

// A release cleared by an override whose file cannot be removed waits, as a command's start
// does; so does one the state file cannot record.
func TestCaughtShutdownReleaseWaitsForWhatMustBeRecordedFirst(t *testing.T) {
	act := LetShutdownProceed{RequestID: "c1", Drained: true, Runs: true}
	assert.IsType(t, EvRunNotRecorded{}, NotRecorded(act, nil, assert.AnError))
	assert.IsType(t, EvRunNotRecorded{}, NotRecorded(act, assert.AnError, nil))
	assert.Nil(t, NotRecorded(LetShutdownProceed{RequestID: "c1"}, assert.AnError, assert.AnError), "an undrained release is not held")

	m, _, _ := play(t, fresh(), seq(up, []step{now(caughtShutdown("c1")), now(pubOK("c1")), now(override(nodedrain.StatusComplete, 0))}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, _, _ = play(t, m, []step{now(EvRunNotRecorded{RequestID: "c1", Err: assert.AnError})})
	assert.Equal(t, PhaseCleared, m.State.Phase, "put back, to be let through once recorded")
	_, _, got := play(t, m, []step{at(time.Minute, EvTimer{RequestID: "x"})})
	assert.Contains(t, got, "proceed c1 drained=true runs=true")
}

// A caught shutdown that does not take the node down within the reboot timeout of its release
// (cancelled) ends: the request is withdrawn.
func TestCaughtShutdownNotHappeningEnds(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{
		now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusComplete, "c1")), now(read(nodedrain.StatusComplete, "c1")),
	}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, _, got := play(t, m, []step{at(testPolicy().RebootTimeout, EvTimer{RequestID: "x"})})
	assert.Equal(t, []string{"withdraw"}, got)
	assert.Equal(t, PhaseIdle, m.State.Phase)
}

// A caught shutdown called off while held, its lock let go on its COMPLETE, and a shutdown
// started again just before the wait for the node to go down ends: it is let through at once on
// the same COMPLETE, and the wait starts again:
// the first wait ending would withdraw the request, and the coordinator uncordon the node and
// give its slot to another, while this shutdown takes the node down.
func TestCaughtShutdownLetThroughAgainWaitsAgain(t *testing.T) {
	timeout := testPolicy().RebootTimeout
	m, clock, _ := playFrom(t, fresh(), t0, testPolicy(), seq(up, []step{
		now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusCordoned, "c1")),
		at(time.Second, EvShutdownCalledOff{}), // (logind restarted during its delay)
		now(status(nodedrain.StatusComplete, "c1")), now(read(nodedrain.StatusComplete, "c1")),
	}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, clock, acts := playFrom(t, m, clock, testPolicy(), []step{at(timeout-2*time.Second, caughtShutdown("c2"))})
	assert.Equal(t, []string{"proceed c1 drained=true runs=false", "accepted"}, summaries(acts), "let through again on the same COMPLETE")
	m, clock, acts = playFrom(t, m, clock, testPolicy(), []step{at(2*time.Second, EvTimer{RequestID: "x"})})
	assert.Empty(t, summaries(acts), "the first wait's end withdraws nothing while the second shutdown goes on")
	assert.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, _, acts = playFrom(t, m, clock, testPolicy(), []step{at(timeout, EvTimer{RequestID: "x"})})
	assert.Equal(t, []string{"withdraw"}, summaries(acts), "called off too: the request ends after its own wait")
	assert.Equal(t, PhaseIdle, m.State.Phase)
}

// A shutdown of a decommissioned node (its Node deleted) goes ahead at once: nothing would ever
// answer a request for it.
func TestCaughtShutdownOfADecommissionedNodeProceedsAtOnce(t *testing.T) {
	m := fresh()
	m.State.Retired = "b1"
	m, _, got := play(t, m, seq(up, []step{now(caughtShutdown("c1"))}))
	assert.Equal(t, []string{"withdraw", "proceed c1 drained=true runs=false", "accepted"}, got)
	assert.Equal(t, PhaseIdle, m.State.Phase)
}

// A shutdown that took an update's place and then did not happen (called off) gives the update
// back: it runs its own command once its COMPLETE is confirmed again, and is not taken for done.
func TestCaughtShutdownCalledOffGivesTheUpdateBack(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{
		now(sentinel(OpUpdate, "u1", 7)), now(pubOK("u1")), now(caughtShutdown("c1")),
		now(status(nodedrain.StatusComplete, "u1")), now(read(nodedrain.StatusComplete, "u1")),
	}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, _, got := play(t, m, []step{at(testPolicy().RebootTimeout, EvTimer{RequestID: "x"}), now(read(nodedrain.StatusComplete, "u1"))})
	assert.Equal(t, []string{"read", "run update u1 #1"}, got)
	assert.False(t, m.State.Caught)
	_, _, got = play(t, m, []step{now(EvCommandDone{RequestID: "u1"})})
	assert.Equal(t, []string{"withdraw"}, got, "the update done by its own command")
}

// A reboot caught while an update's command runs goes ahead at once (the node is drained); the
// command's success still counts, and a command the reboot cut short leaves the update undone.
func TestCaughtShutdownWhileAnUpdateRuns(t *testing.T) {
	running, _, _ := play(t, fresh(), seq(up, []step{
		now(sentinel(OpUpdate, "u1", 7)), now(pubOK("u1")), now(status(nodedrain.StatusComplete, "u1")), now(read(nodedrain.StatusComplete, "u1")),
	}))
	require.Equal(t, PhaseRunning, running.State.Phase)
	m, _, got := play(t, running, []step{now(caughtShutdown("c1"))})
	assert.Equal(t, []string{"proceed u1 drained=true runs=false", "accepted"}, got)
	assert.Equal(t, PhaseRunning, m.State.Phase, "the command's result still counts")

	done, _, got := play(t, m, []step{now(EvCommandDone{RequestID: "u1"})})
	assert.Empty(t, got, "the request stays while the node goes down: withdrawn, its slot would go to another node")
	assert.Equal(t, PhaseWaitingBoot, done.State.Phase)
	done, _, got = play(t, done, []step{now(EvStart{BootID: "b2"})})
	assert.Equal(t, []string{"withdraw"}, got)
	assert.Equal(t, int64(7), done.State.Handled[OpUpdate], "it succeeded before the node went down")

	cut, _, _ := play(t, m, []step{now(EvStart{BootID: "b2"})})
	assert.Equal(t, PhaseIdle, cut.State.Phase)
	assert.Zero(t, cut.State.Handled[OpUpdate], "cut short by the reboot: not done, its sentinel asks again")
}

// A reboot caught while an update's command runs, let go and then called off by logind (its job
// could not start) while the command still runs: once the command succeeds the update is done
// and its request withdrawn at once — not run again, nor kept until the reboot timeout. A
// caught reboot let go and called off with no command of its own ends at once too.
func TestCaughtShutdownCalledOffWhileTheCommandRuns(t *testing.T) {
	running, _, _ := play(t, fresh(), seq(up, []step{
		now(sentinel(OpUpdate, "u1", 7)), now(pubOK("u1")), now(status(nodedrain.StatusComplete, "u1")), now(read(nodedrain.StatusComplete, "u1")),
		now(caughtShutdown("c1")),
	}))
	require.Equal(t, PhaseRunning, running.State.Phase)
	m, _, got := play(t, running, []step{now(EvShutdownCalledOff{})})
	assert.Empty(t, got, "nothing to do while the command runs")
	assert.True(t, m.State.CalledOff)
	m, _, got = play(t, m, []step{now(EvCommandDone{RequestID: "u1"})})
	assert.Equal(t, []string{"withdraw"}, got, "done: withdrawn at once")
	assert.Equal(t, PhaseIdle, m.State.Phase)
	assert.Equal(t, int64(7), m.State.Handled[OpUpdate], "the update is done, not asked again")

	released, _, _ := play(t, fresh(), seq(up, []step{
		now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusComplete, "c1")), now(read(nodedrain.StatusComplete, "c1")),
	}))
	require.Equal(t, PhaseWaitingBoot, released.State.Phase)
	m, _, got = play(t, released, []step{now(EvShutdownCalledOff{})})
	assert.Equal(t, []string{"withdraw"}, got)
	assert.Equal(t, PhaseIdle, m.State.Phase)
}

// A caught request an operator withdraws lets the shutdown go at once: nothing else would, and
// logind would wait out its delay with the node uncordoned.
func TestCaughtShutdownWithdrawnByAnOperatorProceeds(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusCordoned, "c1"))}))
	_, _, acts := playFrom(t, m, t0, testPolicy(), []step{now(EvBusStatus{Status: &nodedrain.NodeDrainStatus{Node: "edge-1",
		Status: nodedrain.StatusNotRequested, RequestID: "c1", Message: "request withdrawn"}})})
	got := summaries(acts)
	assert.Contains(t, got, "proceed c1 drained=false runs=false")
	for _, a := range acts {
		if p, ok := a.(LetShutdownProceed); ok {
			assert.Equal(t, "withdrawn", p.Outcome)
		}
	}
}

// A shutdown caught while a failed command waits for its retry does not wait for the retry: the
// node is drained.
func TestCaughtShutdownDuringACommandBackoffDoesNotWaitForIt(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{
		now(trigger(OpReboot, "r1")), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
		now(EvCommandDone{RequestID: "r1", Err: assert.AnError}),
	}))
	require.Equal(t, PhaseCleared, m.State.Phase)
	require.False(t, m.State.RetryAt.IsZero())
	_, _, got := play(t, m, []step{now(caughtShutdown("c1")), now(read(nodedrain.StatusComplete, "r1"))})
	assert.Equal(t, []string{"accepted", "read", "proceed r1 drained=true runs=true"}, got)
}

// The same announcement heard twice (a reconnect) changes nothing.
func TestCaughtShutdownAnnouncedTwice(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{now(caughtShutdown("c1")), now(pubOK("c1")), now(status(nodedrain.StatusFailedDrain, "c1"))}))
	m2, _, got := play(t, m, []step{now(caughtShutdown("c2"))})
	assert.Equal(t, []string{"proceed c1 drained=false runs=false", "accepted"}, got, "let go again, still undrained: no 'drained'")
	assert.Equal(t, m.State, m2.State)
	m3, _, got := play(t, fresh(), seq(up, []step{now(caughtShutdown("c1")), now(pubOK("c1")), now(caughtShutdown("c2"))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish c1", "accepted"}, got, "held back once: nothing more")
	assert.Equal(t, "c1", m3.State.RequestID)
}

// The agent's own reboot, announced to its lock, that does not come (logind's job failed)
// counts as its command failing, as without a lock: it runs again, and is not taken for done.
func TestCaughtOwnRebootCalledOffRunsTheCommandAgain(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{
		now(sentinel(OpReboot, "r1", 7)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
		now(EvCommandDone{RequestID: "r1"}), now(caughtShutdown("c1")),
	}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)
	m, _, got := play(t, m, []step{at(testPolicy().RebootTimeout, EvTimer{RequestID: "x"})})
	assert.Equal(t, []string{"command-failed #1"}, got)
	assert.Zero(t, m.State.Handled[OpReboot])
	assert.False(t, m.State.Caught)
}

// A rebooting update's command that fails after the shutdown was let through is not done: the
// shutdown took its place.
func TestCaughtShutdownThenTheCommandFails(t *testing.T) {
	p := testPolicy()
	p.UpdateReboots = true
	m, _, _ := playFrom(t, fresh(), t0, p, seq(up, []step{
		now(sentinel(OpUpdate, "u1", 7)), now(pubOK("u1")), now(status(nodedrain.StatusComplete, "u1")), now(read(nodedrain.StatusComplete, "u1")),
		now(caughtShutdown("c1")), now(EvCommandDone{RequestID: "u1", Err: assert.AnError}),
	}))
	assert.True(t, m.State.Superseded)
	m, _, _ = playFrom(t, m, t0, p, []step{now(EvStart{BootID: "b2"})})
	assert.Equal(t, PhaseIdle, m.State.Phase)
	assert.Zero(t, m.State.Handled[OpUpdate], "not done")
}

// A release put back (the state file could not record it) is not a release: an operator's
// withdrawal then lets the shutdown go.
func TestCaughtReleasePutBackIsNotReleased(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{now(caughtShutdown("c1")), now(pubOK("c1")),
		now(status(nodedrain.StatusComplete, "c1")), now(read(nodedrain.StatusComplete, "c1")),
		now(EvRunNotRecorded{RequestID: "c1", Err: assert.AnError})}))
	require.Equal(t, PhaseCleared, m.State.Phase)
	assert.False(t, m.State.Released)
	_, _, got := play(t, m, []step{now(EvBusStatus{Status: &nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusNotRequested,
		RequestID: "c1", Message: "request withdrawn"}})})
	assert.Contains(t, got, "proceed c1 drained=false runs=false")
}
