package agent_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// An override file that lets an operation run — NOTSUPPORTED as well as COMPLETE — is consumed
// by the operation it let run: the file is removed, and the next operation waits for its drain
// again. A NOTSUPPORTED left in force was a lasting bypass: every later reboot or update ran at
// once, undrained (issue 23, defect 9).
func TestAgentConsumesANotSupportedOverride(t *testing.T) {
	w := newWorld(t)
	w.cfg.OverridePoll = 20 * time.Millisecond
	w.run()
	w.waitStatus(nodedrain.StatusNotRequested)
	require.NoError(t, os.WriteFile(w.cfg.OverrideFile, []byte(`{"Status":"NOTSUPPORTED"}`), 0o600))
	w.waitStatus(nodedrain.StatusNotSupported)

	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(w.ranLines()) == 1 }, 10*time.Second, 10*time.Millisecond, "the override did not run the update")
	require.Eventually(t, func() bool {
		_, err := os.Stat(w.cfg.OverrideFile)
		return errors.Is(err, fs.ErrNotExist)
	}, 10*time.Second, 10*time.Millisecond, "the NOTSUPPORTED override that ran the update is still there")
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseIdle }, 10*time.Second, 10*time.Millisecond)

	// The next update asks for a drain and waits for it.
	_, err = agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, _, err := w.requests.Get(context.Background(), node)
		return err == nil && r.Context == "v2"
	}, 10*time.Second, 10*time.Millisecond, "the second update published no request")
	st := w.status()
	assert.Equal(t, agent.PhaseDeferred, st.State.Phase)
	assert.Equal(t, agent.SourceBus, st.Source)
	assert.Len(t, w.ranLines(), 1, "the second update ran without a drain")
}
