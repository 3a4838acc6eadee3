package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// withdrawn waits until the node's request key is gone.
func (w *world) withdrawn(why string) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		_, _, err := w.requests.Get(context.Background(), node)
		return errors.Is(err, pubsub.ErrNotFound)
	}, 10*time.Second, 10*time.Millisecond, why)
}

func TestAgentDecommissionThroughTheSocket(t *testing.T) {
	w := newWorld(t)
	w.cfg.Commands[agent.OpDecommission] = `echo "$EDGEDRAIN_OPERATION $EDGEDRAIN_CONTEXT" >> ` + w.ran
	w.run()
	w.waitStatus(nodedrain.StatusNotRequested)

	msg, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpDecommission, "disk failed")
	require.NoError(t, err)
	assert.Contains(t, msg, "decommission deferred")
	r := w.request()
	assert.Equal(t, nodedrain.RequesterDeviceOp, r.RequestedBy)
	assert.Equal(t, "decommission disk failed", r.Context)
	assert.True(t, nodedrain.DeclaresDecommission(r))

	// A plain COMPLETE (an older coordinator's) does not run it; one saying the Node was deleted does.
	w.publish(nodedrain.StatusComplete, r.RequestID)
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseCleared }, 10*time.Second, 10*time.Millisecond)
	testenv.Never(t, func() bool { return len(w.ranLines()) > 0 }, 300*time.Millisecond, 10*time.Millisecond,
		"the decommission ran on a COMPLETE that does not say the node was decommissioned")
	_, err = w.statuses.Publish(context.Background(), node, testenv.SignStatus(nodedrain.NodeDrainStatus{Node: node, Status: nodedrain.StatusComplete,
		RequestID: r.RequestID, Decommission: true}))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(w.ranLines()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"decommission decommission disk failed"}, w.ranLines())
	// The command returned: the request is withdrawn at once (the same boot ID throughout), so
	// the coordinator removes the node's keys.
	w.withdrawn("request not withdrawn after the decommission command returned")
	// (The withdrawal may reach the bus before the step that made it has updated the report.)
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseIdle }, 10*time.Second, 10*time.Millisecond,
		"the agent is not idle after its decommission")
}

func TestAgentRefusesWhatWouldDeleteTheNodeUnasked(t *testing.T) {
	w := newWorld(t) // commands for reboot and update only
	w.run()
	w.waitStatus(nodedrain.StatusNotRequested)

	for _, tt := range []struct {
		name    string
		op      agent.Operation
		context string
		want    string
	}{
		{"decommission without a decommission command", agent.OpDecommission, "", "no --decommission-command configured"},
		{"a reboot whose context declares a decommission", agent.OpReboot, "decommission soon", "delete the Node object"},
		{"an update whose context is the word", agent.OpUpdate, "decommission", "delete the Node object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agent.Request(context.Background(), w.cfg.Socket, tt.op, tt.context)
			require.Error(t, err)
			assert.True(t, errors.Is(err, agent.ErrRefused), "%v", err)
			assert.ErrorContains(t, err, tt.want)
			assert.Equal(t, agent.PhaseIdle, w.status().State.Phase)
			_, _, err = w.requests.Get(context.Background(), node)
			assert.True(t, errors.Is(err, pubsub.ErrNotFound), "a refused request was published: %v", err)
		})
	}

	// Any other context is the reboot's own.
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpReboot, "kernel 6.12")
	require.NoError(t, err)
	r := w.request()
	assert.Equal(t, "kernel 6.12", r.Context)
	assert.False(t, nodedrain.DeclaresDecommission(r))
}

func TestAgentDecommissionSentinel(t *testing.T) {
	w := newWorld(t)
	w.cfg.Commands[agent.OpDecommission] = "true"
	path := filepath.Join(t.TempDir(), "decommission-required")
	require.NoError(t, os.WriteFile(path, []byte("chassis 7 retired\n"), 0o600))
	w.cfg.Sentinels = map[agent.Operation]string{agent.OpDecommission: path}
	w.cfg.SentinelJitter = 0 // the first check comes at once
	w.run()

	r := w.request()
	assert.Equal(t, "decommission chassis 7 retired", r.Context)
	assert.True(t, nodedrain.DeclaresDecommission(r))
}
