package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hostile makes, under dir, each kind of thing an operator's mistake or an attacker can leave
// at a path the agent reads: a FIFO (opening it for reading waits for a writer), a symlink to
// an endless device, and a socket-like special file stand-in (a character device).
func hostile(t *testing.T, dir string) map[string]string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	return map[string]string{"fifo": fifo, "symlink to /dev/zero": zero, "device": "/dev/null"}
}

// finishes runs f and fails the test if it does not return within a few seconds: the agent's
// loop must never block on what sits at a path.
func finishes(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still blocked after 5s", what)
	}
}

func TestSentinelAndOverrideRefuseWhatIsNotAFile(t *testing.T) {
	for name, path := range hostile(t, t.TempDir()) {
		finishes(t, "sentinel "+name, func() {
			_, found, err := checkSentinel(OpReboot, path)
			require.Error(t, err, name)
			require.False(t, found, name)
			require.ErrorContains(t, err, "not a regular file")
		})
		finishes(t, "override "+name, func() {
			ch := newOverrideFile(path).poll()
			require.Error(t, ch.Err, name)
			require.ErrorContains(t, ch.Err, "not a regular file")
			require.Nil(t, ch.Override)
		})
	}
}

func TestStateFileThatIsNotAFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, StateFileName), 0o600))
	finishes(t, "state file fifo", func() {
		_, err := NewStateStore(dir).Load()
		require.ErrorContains(t, err, "not a regular file")
		require.NotErrorIs(t, err, ErrCorruptState, "not moved aside: somebody put it there")
	})
}

func TestBootFilesThatAreNotFilesAreRefused(t *testing.T) {
	for name, path := range hostile(t, t.TempDir()) {
		finishes(t, "boot ID "+name, func() {
			_, err := ReadBootID(path)
			require.Error(t, err, name)
		})
		finishes(t, "boot time "+name, func() {
			_, err := ReadBootTime(path)
			require.Error(t, err, name)
		})
	}
	// The kernel's own files are regular files (of size 0) and still read.
	_, err := ReadBootID("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	_, err = ReadBootTime("/proc/stat")
	require.NoError(t, err)
}

// The outcome file is written by the command's shell with a redirect: a FIFO there would hold
// the shell for good, a symlink would be written through. The agent turns the file off instead,
// and its read refuses them too.
func TestOutcomeFileThatIsNotAFileIsRefused(t *testing.T) {
	for name, path := range hostile(t, t.TempDir()) {
		require.ErrorContains(t, checkOutcomePath(path), "not a regular file", name)
		finishes(t, "outcome "+name, func() { require.Empty(t, ReadOutcome(path), name) })
	}
	dir := t.TempDir()
	require.NoError(t, checkOutcomePath(filepath.Join(dir, "missing")))
	file := filepath.Join(dir, "command-succeeded")
	require.NoError(t, os.WriteFile(file, []byte("r1\n"), 0o600))
	require.NoError(t, checkOutcomePath(file))
	require.Equal(t, "r1", ReadOutcome(file))
}
