package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The start-up clean-up's bound is the kernel's boot time read again at each try: it moves when
// NTP sets a clock that started wrong (no real-time clock), and the one read at start made the
// last boot's request look made since this boot (simulation, issue 23, seed 9000410).
func TestCleanupReadsTheBootTimeAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stat")
	write := func(secs string) {
		require.NoError(t, os.WriteFile(path, []byte("cpu  1 2 3\nbtime "+secs+"\nprocesses 9\n"), 0o600))
	}
	a := &Agent{cfg: Config{BootTimeFile: path}}
	write("1577836800") // 2020-01-01: the clock not set yet
	atStart := time.Unix(1577836800, 0)
	write("1767225800") // NTP set the clock: the boot time moved with it
	assert.Equal(t, time.Unix(1767225800, 0), a.bootTimeNow(atStart))
	assert.True(t, a.bootTimeNow(time.Time{}).IsZero(), "no clean-up pending: no bound")
	require.NoError(t, os.Remove(path))
	assert.Equal(t, atStart, a.bootTimeNow(atStart), "unreadable: the bound read at start")
}
