package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// After every reboot the agent withdraws its request, and the coordinator's COMPLETE for it stays
// on the bus until the coordinator sees that: the agent withdraws it again, quietly. A status
// serving a request of this agent's that it did not withdraw itself (one left from before, its
// state lost), or serving the withdrawn one anew (a replay of it: STARTING), is still reported as
// a warning.
func TestACompleteForTheRequestJustWithdrawnIsNoWarning(t *testing.T) {
	m, _, _ := play(t, fresh(), seq(up, []step{now(sentinel(OpReboot, "r1", 1)), now(pubOK("r1")),
		now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
		now(EvCommandDone{RequestID: "r1"})}))
	require.Equal(t, PhaseWaitingBoot, m.State.Phase)

	back := Machine{Node: "edge-1", State: m.State} // the agent restarted on the new boot
	_, _, acts := playFrom(t, back, t0, testPolicy(), []step{now(EvStart{BootID: "b2"}), now(wdOK), now(EvBusSnapshot{}),
		now(status(nodedrain.StatusComplete, "r1"))})
	assert.Empty(t, warnings(acts))
	ws := withdrawals(acts)
	require.Len(t, ws, 2, "withdrawn as the operation ended, and again for the COMPLETE still shown")
	assert.Equal(t, "r1", ws[0].RequestID)

	// Once the coordinator has shown the withdrawal, a COMPLETE of r1 again is a replay.
	_, _, acts = playFrom(t, back, t0, testPolicy(), []step{now(EvStart{BootID: "b2"}), now(wdOK), now(EvBusSnapshot{}),
		now(status(nodedrain.StatusNotRequested, "r1")), now(status(nodedrain.StatusComplete, "r1"))})
	assert.Len(t, warnings(acts), 1, "a COMPLETE of the withdrawn request after the coordinator caught up: %v", warnings(acts))

	_, _, acts = playFrom(t, back, t0, testPolicy(), []step{now(EvStart{BootID: "b2"}), now(wdOK), now(EvBusSnapshot{}),
		now(status(nodedrain.StatusStarting, "r1"))})
	assert.Len(t, warnings(acts), 1, "the withdrawn request served anew: %v", warnings(acts))

	left := Machine{Node: "edge-1", State: State{Phase: PhaseIdle, Mine: []string{"r0"}}}
	_, _, acts = playFrom(t, left, t0, testPolicy(), seq(up, []step{now(status(nodedrain.StatusComplete, "r0"))}))
	assert.Len(t, warnings(acts), 1, "a request this process did not withdraw: %v", warnings(acts))
}
