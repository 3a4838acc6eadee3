package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// ruleComplete is a COMPLETE of the coordinator's API-unreachable rule for request id: the drain
// did not finish, the coordinator could not reach the Kubernetes API for its timeout.
func ruleComplete(id string) *nodedrain.NodeDrainStatus {
	return &nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: id, APIUnreachable: true,
		Message: "Kubernetes API unreachable for 5m0s: letting the operation proceed"}
}

// The API-unreachable rule lets a node go down undrained only when the outage is everyone's. When
// the API answers this node, the coordinator alone is cut off: the agent does not run the
// operation on the rule's COMPLETE; it withdraws the request and asks again, and runs only on
// the COMPLETE of a drain that finished (the simulation found a node rebooted undrained while
// its coordinator alone had lost the API).
func TestStepAPIRuleCompleteDoesNotRunWhileTheNodeReachesTheAPI(t *testing.T) {
	m, clock, acts := playFrom(t, fresh(), t0, testPolicy(), seq(deferredReboot, []step{now(EvBusStatus{Status: ruleComplete("r1")}),
		now(EvStatusRead{Status: ruleComplete("r1"), APIReachable: true})}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "withdraw"}, summaries(acts))
	assert.Equal(t, PhaseBackoff, m.State.Phase)
	assert.False(t, m.State.OnBus, "the request is withdrawn")
	assert.Zero(t, m.State.DrainFailures, "not a failed drain: no drain backoff")
	assert.NotEmpty(t, warnings(acts), "said why")
	assert.Equal(t, clock, m.NextWake(), "asks again at once")

	m, _, acts = playFrom(t, m, clock, testPolicy(), []step{now(EvTimer{RequestID: "r2"}), now(status(nodedrain.StatusRequested, "r2")),
		now(status(nodedrain.StatusComplete, "r2")), now(read(nodedrain.StatusComplete, "r2"))})
	assert.Equal(t, []string{"publish r2", "read", "run reboot r2 #1"}, summaries(acts))
	assert.Equal(t, PhaseRunning, m.State.Phase)
}

// When the API does not answer this node either, the outage is everyone's: the rule's COMPLETE
// runs the operation, as it is meant to (a reboot may be the cure).
func TestStepAPIRuleCompleteRunsWhenTheNodeDoesNotReachTheAPI(t *testing.T) {
	m, _, acts := playFrom(t, fresh(), t0, testPolicy(), seq(deferredReboot, []step{now(EvBusStatus{Status: ruleComplete("r1")}),
		now(EvStatusRead{Status: ruleComplete("r1")})}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1"}, summaries(acts))
	assert.Equal(t, PhaseRunning, m.State.Phase)
}
