package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The host files for an agent not run as root (deploy/host), on a real systemd: at boot the
// agent's directories are its user's, the sentinel directory is made in /run, and
// /run/reboot-required is mirrored into it with its content and time, follows it when it is
// written again or removed, and a reboot clears the mirror.
func TestHostFilesForTheNonRootAgent(t *testing.T) {
	testenv.NeedLogindHost(t)
	t.Parallel()
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join("host", name))
		require.NoError(t, err)
		return string(data)
	}
	h := testenv.StartLogindHost(t, testenv.LogindHostOptions{
		Files: map[string]string{
			"/etc/tmpfiles.d/edgedrain-agent.conf":                  read("edgedrain-agent.tmpfiles"),
			"/etc/systemd/system/edgedrain-reboot-required.path":    read("edgedrain-reboot-required.path"),
			"/etc/systemd/system/edgedrain-reboot-required.service": read("edgedrain-reboot-required.service"),
		},
		Enable: []string{"edgedrain-reboot-required.path", "edgedrain-reboot-required.service"},
	})
	dirs := func() string {
		out, err := h.Exec("stat", "-c", "%n %u:%g %a", "/var/lib/edgedrain/agent", "/persist/kube-status", "/run/edgedrain/sentinels")
		require.NoError(t, err, out)
		return out
	}
	want := "/var/lib/edgedrain/agent 65532:65532 700\n/persist/kube-status 65532:65532 750\n/run/edgedrain/sentinels 0:0 755\n"
	assert.Equal(t, want, dirs())

	const needed = "*** System restart required ***\n"
	out, err := h.Exec("sh", "-c", "printf '"+needed+"' > /run/reboot-required")
	require.NoError(t, err, out)
	mirror := func() string {
		out, _ := h.Exec("cat", "/run/edgedrain/sentinels/reboot-required")
		return out
	}
	require.Eventually(t, func() bool { return mirror() == needed }, 10*time.Second, 100*time.Millisecond,
		"/run/reboot-required not mirrored: %q", mirror())
	out, err = h.Exec("stat", "-c", "%Y", "/run/reboot-required", "/run/edgedrain/sentinels/reboot-required")
	require.NoError(t, err, out)
	times := strings.Fields(out)
	require.Len(t, times, 2, out)
	assert.Equal(t, times[0], times[1], "the mirror keeps the file's time")

	// (Each change once the copy before it is done: systemd starts no unit already running, so a
	// change in the last instant of one is not announced; edgedrain-reboot-required.service.)
	settled := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			out, _ := h.Exec("systemctl", "is-active", "edgedrain-reboot-required.service")
			return strings.TrimSpace(out) != "activating"
		}, 10*time.Second, 50*time.Millisecond, "the mirror's copy never ended")
	}
	settled()
	const again = "*** System restart required ***\nlinux-image-6.1.0-30\n"
	out, err = h.Exec("sh", "-c", "printf '"+again+"' > /run/reboot-required")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return mirror() == again }, 10*time.Second, 100*time.Millisecond,
		"the mirror did not follow a new write: %q", mirror())
	settled()
	out, err = h.Exec("rm", "/run/reboot-required")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool {
		_, err := h.Exec("test", "-e", "/run/edgedrain/sentinels/reboot-required")
		return err != nil
	}, 10*time.Second, 100*time.Millisecond, "the mirror stayed after /run/reboot-required was removed")
	settled()
	out, err = h.Exec("sh", "-c", "printf '"+needed+"' > /run/reboot-required")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return mirror() == needed }, 10*time.Second, 100*time.Millisecond,
		"/run/reboot-required not mirrored when it came back: %q", mirror())

	out, err = h.Exec("systemctl", "reboot")
	require.NoError(t, err, out)
	_, down := h.WaitDown(60 * time.Second)
	require.True(t, down, "the machine did not reboot")
	h.Boot()
	assert.Equal(t, want, dirs(), "made again at boot")
	out, err = h.Exec("ls", "/run/edgedrain/sentinels")
	require.NoError(t, err, out)
	assert.Empty(t, strings.TrimSpace(out), "a reboot clears the sentinels")
}
