package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStateRoundTrip(t *testing.T) {
	s := NewStateStore(filepath.Join(t.TempDir(), "nested", "dir"))
	st, err := s.Load()
	require.NoError(t, err)
	assert.Equal(t, State{Phase: PhaseIdle}, st, "a missing file is the idle state")

	want := State{Phase: PhaseWaitingBoot, Operation: OpReboot, Context: "reboot *** System restart required ***",
		RequestID: "edge-1-20260301T120000.000Z-abcd", RequestedAt: t0, BootID: "b1", OnBus: true,
		Sentinel: "/run/reboot-required", SentinelModTime: 42, DrainFailures: 1, ClearedBy: Clearance{Status: nodedrain.StatusComplete},
		CommandRan: true, CommandStartedAt: t0.Add(time.Minute), CommandFailures: 2, RetryAt: t0.Add(time.Hour),
		Mine: []string{"edge-1-20260301T110000.000Z-0123", "edge-1-20260301T120000.000Z-abcd"}, Handled: map[Operation]int64{OpUpdate: 7}}
	require.NoError(t, s.Save(want))
	got, err := s.Load()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// Idle, it still remembers its requests.
	idle := State{Phase: PhaseIdle, Mine: want.Mine, Handled: want.Handled}
	require.NoError(t, s.Save(idle))
	got, err = s.Load()
	require.NoError(t, err)
	assert.Equal(t, idle, got)

	fi, err := os.Stat(s.Path())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	entries, err := os.ReadDir(filepath.Dir(s.Path()))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}

func TestStateCorrupt(t *testing.T) {
	tests := []struct {
		name, content, reason string
	}{
		{"empty", "", "empty file"},
		{"not JSON", "reboot please", "not a state file"},
		{"truncated", `{"version":1,"state":{"phase":"deferred","operation":"reb`, "not a state file"},
		{"trailing data", `{"version":1,"state":{"phase":"idle"}} {}`, "trailing data"},
		{"other version", `{"version":2,"state":{"phase":"idle"}}`, "version 2, want 1"},
		{"unknown phase", `{"version":1,"state":{"phase":"rebooting"}}`, `unknown phase "rebooting"`},
		{"unknown field", `{"version":1,"state":{"phase":"idle","extra":1}}`, "unknown field"},
		{"wrong type", `{"version":1,"state":{"phase":"idle","onBus":"yes"}}`, "not a state file"},
		{"unknown operation", `{"version":1,"state":{"phase":"deferred","operation":"dance","requestID":"r","requestedAt":"2026-03-01T12:00:00Z"}}`, "unknown operation"},
		{"deferred without a request", `{"version":1,"state":{"phase":"deferred","operation":"reboot"}}`, "RequestID: required"},
		{"idle with a request", `{"version":1,"state":{"phase":"idle","requestID":"r1"}}`, "idle state with"},
		{"too large", `{"version":1,"state":{"phase":"idle","context":"` + strings.Repeat("x", maxStateSize) + `"}}`, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStateStore(t.TempDir())
			require.NoError(t, os.WriteFile(s.Path(), []byte(tt.content), 0o600))
			_, err := s.Load()
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrCorruptState), "%v", err)
			assert.Contains(t, err.Error(), s.Path())
			assert.Contains(t, err.Error(), tt.reason)

			moved, err := s.Quarantine(t0)
			require.NoError(t, err)
			assert.FileExists(t, moved)
			st, err := s.Load()
			require.NoError(t, err)
			assert.Equal(t, PhaseIdle, st.Phase)
		})
	}
}

func TestStateUnreadableIsNotCorrupt(t *testing.T) {
	s := NewStateStore(t.TempDir())
	require.NoError(t, os.Mkdir(s.Path(), 0o700)) // a directory where the file should be
	_, err := s.Load()
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrCorruptState), "an I/O error is not a corrupt file: the agent must not move it aside")
}

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "boot_id")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	id, err := ReadBootID(write("5b7c6a4e-1f0e-4c55-9c1d-2f3e4a5b6c7d\n"))
	require.NoError(t, err)
	assert.Equal(t, "5b7c6a4e-1f0e-4c55-9c1d-2f3e4a5b6c7d", id)
	_, err = ReadBootID(write("  \n"))
	assert.ErrorContains(t, err, "want one line")
	_, err = ReadBootID(write("a\nb\n"))
	assert.ErrorContains(t, err, "want one line")
	_, err = ReadBootID(filepath.Join(dir, "missing"))
	assert.ErrorContains(t, err, "no such file")
}

func TestReadBootTime(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "stat")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	bt, err := ReadBootTime(write("cpu  1 2 3\nintr 5\nbtime 1767225600\nprocesses 9\n"))
	require.NoError(t, err)
	assert.Equal(t, time.Unix(1767225600, 0), bt)
	for _, bad := range []string{"cpu 1\n", "btime x\n", "btime -5\n", ""} {
		_, err := ReadBootTime(write(bad))
		assert.Error(t, err, "%q", bad)
	}
	_, err = ReadBootTime(filepath.Join(dir, "missing"))
	assert.Error(t, err)
}

// A state file keeps what cleared the operation as the text older agents wrote and read; text
// that names no clearance is a corrupt state, not an operation taken as cleared.
func TestClearanceInTheStateFile(t *testing.T) {
	for text, want := range map[string]Clearance{
		`""`:                      {},
		`"COMPLETE"`:              {Status: nodedrain.StatusComplete},
		`"NOTSUPPORTED"`:          {Status: nodedrain.StatusNotSupported},
		`"override COMPLETE"`:     {Status: nodedrain.StatusComplete, Override: true},
		`"override NOTSUPPORTED"`: {Status: nodedrain.StatusNotSupported, Override: true},
	} {
		var c Clearance
		require.NoError(t, json.Unmarshal([]byte(text), &c), text)
		assert.Equal(t, want, c, text)
		out, err := json.Marshal(c)
		require.NoError(t, err)
		assert.JSONEq(t, text, string(out))
	}
	for _, text := range []string{`"CORDONED"`, `"override"`, `"override FAILEDDRAIN"`, `"overrideCOMPLETE"`, `"bus COMPLETE"`, `7`, `{}`} {
		var c Clearance
		assert.Error(t, json.Unmarshal([]byte(text), &c), text)
	}
}
