package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// The coordinator re-publishes a COMPLETE with SlotReleased when the node never came back
// (NotReady, or its Node object gone, past --stale-holder-timeout) and gives its admission slot
// to the next node. An agent that had not run its operation yet (cut off from the bus, paused)
// and sees that COMPLETE now must not run it: another node may be in maintenance in its place
// (S3). It withdraws the request and asks again; the new request runs on its own COMPLETE
// (issue 23, defect 7).
func TestAgentDoesNotRunOnACompleteWhoseSlotWasReleased(t *testing.T) {
	w := newWorld(t)
	w.run()
	w.waitStatus(nodedrain.StatusNotRequested)
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1")
	require.NoError(t, err)
	first := w.request()

	_, err = w.statuses.Publish(context.Background(), node, testenv.SignStatus(nodedrain.NodeDrainStatus{Node: node,
		Status: nodedrain.StatusComplete, RequestID: first.RequestID, SlotReleased: true,
		Message: "COMPLETE, but the node has been NotReady for 30m: admission slot released"}))
	require.NoError(t, err)

	// It asks again: a new request of the same update replaces the released one.
	var again nodedrain.NodeDrainRequest
	require.Eventually(t, func() bool {
		r, _, err := w.requests.Get(context.Background(), node)
		again = r
		return err == nil && r.RequestID != first.RequestID
	}, 10*time.Second, 10*time.Millisecond, "no new request after the released COMPLETE")
	assert.Empty(t, w.ranLines(), "ran on a COMPLETE whose slot was released")
	assert.Equal(t, "v1", again.Context)
	assert.Equal(t, nodedrain.RequesterUpdate, again.RequestedBy)
	assert.Equal(t, agent.PhaseDeferred, w.status().State.Phase)

	// The new request's own COMPLETE runs the update, once.
	w.publish(nodedrain.StatusComplete, again.RequestID)
	require.Eventually(t, func() bool { return len(w.ranLines()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"update v1 " + again.RequestID}, w.ranLines())
}
