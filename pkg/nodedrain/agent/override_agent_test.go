package agent_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// An override file acted on that cannot be removed (its disk read-only) lets no command start
// until it is: left, it was read again by the agent restarted after the operation it let run (a
// reboot's, or a crash's), and let the next operation run without a drain (the simulation found
// it: one override, two operations). The removal is tried again at every step; the operation
// runs once it succeeds, once.
func TestAgentRunsNothingWhileTheOverrideActedOnIsLeft(t *testing.T) {
	w := newSaveWorld(t)
	persist := filepath.Join(filepath.Dir(w.cfg.StateDir), "persist")
	require.NoError(t, os.Mkdir(persist, 0o700))
	w.cfg.OverrideFile, w.cfg.OverridePoll = filepath.Join(persist, "force.json"), 20*time.Millisecond
	stop := w.start()
	w.waitStatus(nodedrain.StatusNotRequested)
	require.NoError(t, os.WriteFile(w.cfg.OverrideFile, []byte(`{"Status":"NOTSUPPORTED"}`), 0o600))
	w.waitStatus(nodedrain.StatusNotSupported)

	// The override's directory is made unwritable, even for root: moved aside, a file in its place.
	require.NoError(t, os.Rename(persist, persist+".aside"))
	require.NoError(t, os.WriteFile(persist, []byte("not a directory\n"), 0o600))
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, e := range w.logs.AllEntries() {
			if strings.Contains(e.Message, "override file that was acted on could not be removed") {
				return true
			}
		}
		return len(w.ranLines()) > 0
	}, 10*time.Second, 10*time.Millisecond, "the agent neither ran the update nor held it back")
	require.Empty(t, w.ranLines(), "the update ran while the override file that let it run could not be removed")

	// A crash, the disk back: the next agent runs the update once, and the override is gone.
	stop()
	require.NoError(t, os.Remove(persist))
	require.NoError(t, os.Rename(persist+".aside", persist))
	w.start()
	require.Eventually(t, func() bool { return len(w.ranLines()) > 0 }, 10*time.Second, 10*time.Millisecond, "the update never ran")
	require.Eventually(t, func() bool {
		_, err := os.Stat(w.cfg.OverrideFile)
		return errors.Is(err, fs.ErrNotExist)
	}, 10*time.Second, 10*time.Millisecond, "the override file that ran the update is still there")
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseIdle }, 10*time.Second, 10*time.Millisecond)

	// The next update waits for its drain.
	_, err = agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, _, err := w.requests.Get(context.Background(), node)
		return err == nil && r.Context == "v2"
	}, 10*time.Second, 10*time.Millisecond, "the second update published no request")
	assert.Equal(t, agent.PhaseDeferred, w.status().State.Phase)
	assert.Len(t, w.ranLines(), 1, "one override, two operations")
}
