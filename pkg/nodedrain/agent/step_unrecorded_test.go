package agent

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A command the runtime did not start because the state file could not record its start goes
// back to wait, with backoff, and runs after a fresh confirmation; it is not counted as a failed
// command (issue 23, defect 9).
func TestStepRunNotRecordedWaitsAndConfirmsAgain(t *testing.T) {
	p := testPolicy()
	m, clock, got := play(t, fresh(), seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")),
		now(read(nodedrain.StatusComplete, "r1"))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}, got)
	saveErr := errors.New("no space left on device")

	m, clock, acts := playFrom(t, m, clock, p, []step{now(EvRunNotRecorded{RequestID: "r0", Err: saveErr})})
	assert.Empty(t, acts, "another request's: stale")
	assert.Equal(t, PhaseRunning, m.State.Phase)

	m, clock, acts = playFrom(t, m, clock, p, []step{now(EvRunNotRecorded{RequestID: "r1", Err: saveErr})})
	assert.Empty(t, summaries(acts))
	assert.Equal(t, PhaseCleared, m.State.Phase)
	assert.Equal(t, clock.Add(p.BusRetry), m.State.RetryAt)
	assert.False(t, m.State.CommandRan, "it never started")
	assert.Zero(t, m.State.CommandFailures, "not a failed command")

	// Held again: the wait doubles.
	m, clock, acts = playFrom(t, m, clock, p, []step{at(p.BusRetry, EvTimer{}), now(read(nodedrain.StatusComplete, "r1")),
		now(EvRunNotRecorded{RequestID: "r1", Err: saveErr})})
	assert.Equal(t, []string{"read", "run reboot r1 #1"}, summaries(acts))
	assert.Equal(t, clock.Add(2*p.BusRetry), m.State.RetryAt)

	// Then saved: it runs, still its first attempt, and the count starts over.
	m, _, acts = playFrom(t, m, clock, p, []step{at(2*p.BusRetry, EvTimer{}), now(read(nodedrain.StatusComplete, "r1")),
		now(EvCommandDone{RequestID: "r1"})})
	assert.Equal(t, []string{"read", "run reboot r1 #1"}, summaries(acts))
	assert.Equal(t, PhaseWaitingBoot, m.State.Phase)
	assert.Zero(t, m.UnrecordedRuns)
}
