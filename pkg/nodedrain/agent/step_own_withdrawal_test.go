package agent

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A withdrawal the agent made itself cancels nothing: after a failed drain (or a released
// slot) the agent withdrew its request; an operator's override then let the operation run, and
// its command failed. The coordinator's answer to the agent's own withdrawal (NOTREQUESTED for the
// request) was taken for an operator's withdrawal made after the override: the operation was
// cancelled and its sentinel marked handled, so it never ran (the simulation found it, L1: a
// paused agent, its slot released, an override file).
func TestStepOwnWithdrawalDoesNotCancelAnOverriddenOperation(t *testing.T) {
	p := testPolicy()
	m, clock, got := play(t, fresh(), seq(deferredReboot, []step{
		now(status(nodedrain.StatusFailedDrain, "r1")), // withdrawn by the agent, backing off
		now(wdOK),
		now(override(nodedrain.StatusComplete, 0)), // the operator's go-ahead
		now(EvCommandDone{RequestID: "r1", Err: errors.New("exit 1")}),
		now(status(nodedrain.StatusNotRequested, "r1")), // the coordinator saw the agent's withdrawal
	}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "drain-failed FAILEDDRAIN #1", "withdraw",
		"remove-override", "run reboot r1 #1", "command-failed #1"}, got)
	assert.Equal(t, PhaseCleared, m.State.Phase, "the agent's own withdrawal cancelled the operation the override let run")
	assert.Zero(t, m.State.Handled[OpReboot])

	// The command runs again after its backoff.
	m, _, acts := playFrom(t, m, clock, p, []step{at(p.CommandRetryBackoff, EvTimer{})})
	assert.Equal(t, []string{"run reboot r1 #2"}, summaries(acts))
	assert.Equal(t, PhaseRunning, m.State.Phase)

	// An operator's withdrawal of a request on the bus still cancels a rerun after the override.
	m, _, got = play(t, fresh(), seq(deferredReboot, []step{
		now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
		now(EvCommandDone{RequestID: "r1", Err: errors.New("exit 1")}),
		now(status(nodedrain.StatusNotRequested, "r1")),
	}))
	assert.Equal(t, PhaseIdle, m.State.Phase, "%v", got)
}
