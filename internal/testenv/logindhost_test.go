package testenv

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogindHostRebootsWithANewBootID: the machine boots a real logind; `systemctl reboot`
// inside ends the boot as a reboot (nspawn's 133), the next boot has a new boot ID and the same
// machine ID and files, and a power-off ends it with 0. Nothing of it is left afterwards.
func TestLogindHostRebootsWithANewBootID(t *testing.T) {
	t.Parallel()
	var h *LogindHost
	t.Cleanup(func() { // after the machine's own clean-up
		for _, path := range []string{h.cg, h.dir} {
			_, err := os.Stat(path)
			assert.True(t, os.IsNotExist(err), "%s is left: %v", path, err)
		}
	})
	h = StartLogindHost(t, LogindHostOptions{Files: map[string]string{"/etc/edgedrain-test": "kept\n"}})
	first := h.BootID()
	machineID, err := h.Exec("cat", "/etc/machine-id")
	require.NoError(t, err, machineID)
	out, err := h.LogindProperty("InhibitDelayMaxUSec")
	require.NoError(t, err, out)
	assert.Equal(t, "t 5000000", out, "logind's default InhibitDelayMaxSec, 5 s")

	out, err = h.Exec("systemctl", "reboot")
	require.NoError(t, err, out)
	code, down := h.WaitDown(30 * time.Second)
	require.True(t, down, "the machine did not go down after systemctl reboot")
	assert.Equal(t, 133, code, "nspawn's exit code for a reboot")
	assert.Zero(t, h.PID1())

	h.Boot()
	second := h.BootID()
	assert.NotEqual(t, first, second, "a new boot has a new boot ID")
	again, err := h.Exec("cat", "/etc/machine-id", "/etc/edgedrain-test")
	require.NoError(t, err, again)
	assert.Equal(t, machineID+"kept\n", again, "the same machine, its files kept")

	out, err = h.Exec("systemctl", "poweroff")
	require.NoError(t, err, out)
	code, down = h.WaitDown(30 * time.Second)
	require.True(t, down, "the machine did not go down after systemctl poweroff")
	assert.Equal(t, 0, code, "nspawn's exit code for a power-off")
}
