package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunCommandEnvironment(t *testing.T) {
	t.Setenv("EDGEDRAIN_NATS_PASSWORD", "secret")
	out := filepath.Join(t.TempDir(), "env")
	a := RunCommand{Operation: OpUpdate, Context: `update "v1.2.3"; $(not run)`, RequestID: "r1", Attempt: 2}
	_, err := runCommand(`env | grep -E '^EDGEDRAIN_' | sort > `+out, "edge-1", a, time.Minute, filepath.Join(t.TempDir(), "ok"))
	require.NoError(t, err)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "EDGEDRAIN_ATTEMPT=2\nEDGEDRAIN_CONTEXT=update \"v1.2.3\"; $(not run)\nEDGEDRAIN_NODE=edge-1\n"+
		"EDGEDRAIN_OPERATION=update\nEDGEDRAIN_REQUEST_ID=r1\n", string(data), "the agent's own settings are not passed on")
}

func TestRunCommandFailures(t *testing.T) {
	a := RunCommand{Operation: OpReboot, RequestID: "r1", Attempt: 1}
	_, err := runCommand("echo going down; echo no permission >&2; exit 3", "edge-1", a, time.Minute, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reboot command: exit status 3")
	assert.Contains(t, err.Error(), "no permission")

	start := time.Now()
	_, err = runCommand("sleep 30 & sleep 30", "edge-1", a, 200*time.Millisecond, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out after 200ms")
	assert.Less(t, time.Since(start), 10*time.Second, "the whole process group was killed")

	out, err := runCommand(strings.Repeat("echo 0123456789abcdef;", 1000), "edge-1", a, time.Minute, "")
	require.NoError(t, err)
	assert.LessOrEqual(t, len(out), maxOutput)
}

// The command's shell records its success in the outcome file, where an agent restarted before
// it could record it finds it; a failed or killed command leaves it as it was.
func TestRunCommandRecordsItsSuccess(t *testing.T) {
	outcome := filepath.Join(t.TempDir(), "command-succeeded")
	a := RunCommand{Operation: OpUpdate, RequestID: "r1", Attempt: 1}
	_, err := runCommand("echo $0 $#; exit 3", "edge-1", a, time.Minute, outcome)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "update command: exit status 3")
	assert.Empty(t, ReadOutcome(outcome))
	_, err = runCommand("sleep 30", "edge-1", a, 200*time.Millisecond, outcome)
	require.Error(t, err)
	assert.Empty(t, ReadOutcome(outcome))

	out, err := runCommand(`echo "$0" $#; exit 0`, "edge-1", a, time.Minute, outcome)
	require.NoError(t, err)
	assert.Equal(t, Shell+" 0", out, "the command runs as with sh -c, with no arguments")
	assert.Equal(t, "r1", ReadOutcome(outcome))

	a.RequestID = "r2"
	_, err = runCommand("exit 1", "edge-1", a, time.Minute, outcome)
	require.Error(t, err)
	assert.Equal(t, "r1", ReadOutcome(outcome))
	assert.Empty(t, ReadOutcome(""))
}

// A command that exits 0 but leaves a process holding its output succeeded: counted a failure
// (exec's WaitDelay error), it ran again though its shell had recorded its success (review).
func TestRunCommandThatLeavesAProcessBehindSucceeded(t *testing.T) {
	outcome := filepath.Join(t.TempDir(), "command-succeeded")
	a := RunCommand{Operation: OpUpdate, RequestID: "r1", Attempt: 1}
	out, err := runCommand("sleep 8 & echo started", "edge-1", a, time.Minute, outcome) // (outlives WaitDelay)
	require.NoError(t, err)
	assert.Contains(t, out, "started")
	assert.Contains(t, out, "left running")
	assert.Equal(t, "r1", ReadOutcome(outcome))
}
