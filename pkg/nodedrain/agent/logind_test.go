package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The logind commands call login1.Manager on a real dbus-daemon, where a stand-in owns logind's
// name: Reboot and PowerOff, never interactive.
func TestLogindCommandsCallLogind(t *testing.T) {
	addr := testenv.StartDBus(t).Address
	logind := testenv.StartLogind(t, addr, nil)
	ctx := context.Background()

	require.NoError(t, LogindAvailable(addr, 5*time.Second))
	require.NoError(t, runLogind(ctx, addr, LogindReboot))
	require.NoError(t, runLogind(ctx, addr, LogindPowerOff))
	calls := logind.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "Reboot", calls[0].Method)
	assert.Equal(t, "PowerOff", calls[1].Method)
	assert.False(t, calls[0].Interactive || calls[1].Interactive, "an agent cannot answer a password prompt")
}

// Each way a logind call fails gives an error that says what to fix, and nothing hangs.
func TestLogindFailuresSayWhy(t *testing.T) {
	ctx := context.Background()
	t.Run("no bus", func(t *testing.T) {
		addr := "unix:path=" + filepath.Join(t.TempDir(), "absent")
		err := runLogind(ctx, addr, LogindReboot)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cannot reach the system D-Bus at "+addr)
		assert.Contains(t, err.Error(), "mount the host's /run/dbus")
		assert.ErrorContains(t, LogindAvailable(addr, time.Second), "cannot reach the system D-Bus")
	})
	t.Run("no logind on the bus", func(t *testing.T) {
		addr := testenv.StartDBus(t).Address
		err := runLogind(ctx, addr, LogindReboot)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "systemd-logind is not on the system bus")
		assert.ErrorContains(t, LogindAvailable(addr, 5*time.Second), "is not on the system D-Bus")
	})
	t.Run("refused", func(t *testing.T) {
		addr := testenv.StartDBus(t).Address
		logind := testenv.StartLogind(t, addr, nil)
		logind.Fail("org.freedesktop.DBus.Error.AccessDenied", "Permission denied")
		err := runLogind(ctx, addr, LogindPowerOff)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "refused by logind and polkit (run the agent as root")
		assert.Contains(t, err.Error(), "Permission denied")
		logind.Fail("org.freedesktop.DBus.Error.Failed", "busy")
		assert.ErrorContains(t, runLogind(ctx, addr, LogindReboot), "logind:reboot: logind: busy")
	})
	t.Run("no answer within the timeout", func(t *testing.T) {
		addr := testenv.StartDBus(t).Address
		block := make(chan struct{})
		t.Cleanup(func() { close(block) })
		testenv.StartLogind(t, addr, func(testenv.LogindCall) { <-block })
		tctx, cancel := context.WithTimeout(ctx, time.Second) // the handshake fits in it on a loaded machine
		defer cancel()
		err := runLogind(tctx, addr, LogindReboot)
		require.ErrorIs(t, err, errNoAnswer)
		assert.Contains(t, err.Error(), "no answer from logind")
	})
	t.Run("the bus goes away before the answer", func(t *testing.T) {
		bus := testenv.StartDBus(t)
		block := make(chan struct{})
		t.Cleanup(func() { close(block) })
		testenv.StartLogind(t, bus.Address, func(testenv.LogindCall) { bus.Kill(); <-block })
		err := runLogind(ctx, bus.Address, LogindPowerOff)
		require.ErrorIs(t, err, errNoAnswer)
	})
	t.Run("unknown logind command", func(t *testing.T) {
		assert.ErrorContains(t, runLogind(ctx, "unix:path=/nonexistent", "logind:suspend"), "the logind commands are logind:reboot and logind:poweroff")
	})
}

func TestLogindCommandsAreValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Node = "n1"
	assert.Equal(t, LogindReboot, cfg.Commands[OpReboot], "reboot goes through logind by default")
	assert.Equal(t, LogindPowerOff, cfg.Commands[OpShutdown])
	require.NoError(t, cfg.ValidateSettings())

	cfg.Commands[OpShutdown] = "logind:halt"
	assert.ErrorContains(t, cfg.ValidateSettings(), `shutdown command "logind:halt": the logind commands are logind:reboot and logind:poweroff`)
	cfg.Commands[OpShutdown] = LogindPowerOff
	cfg.SystemBus = ""
	assert.ErrorContains(t, cfg.ValidateSettings(), "the system bus address is empty")
	cfg.SystemBus = DefaultSystemBus

	// An update or decommission is over when its command returns: with a logind command the
	// request would be withdrawn, and the node uncordoned, while it goes down.
	cfg.Commands[OpUpdate] = LogindReboot
	assert.ErrorContains(t, cfg.ValidateSettings(), "update command logind:reboot takes the node down, but an update is over when its command returns (--update-reboots")
	cfg.Limits.UpdateReboots = true
	require.NoError(t, cfg.ValidateSettings(), "an update that reboots may reboot through logind")
	cfg.Commands[OpDecommission] = LogindPowerOff
	assert.ErrorContains(t, cfg.ValidateSettings(), "a decommission needs a shell command that stops the kubelet first")
}

// A reboot or shutdown whose logind call got no answer counts as under way (the node then has
// the reboot timeout to go down, then it is asked again): calling again at once could take the
// node down twice. An operation that does not take the node down keeps the error and is retried.
func TestLogindNoAnswerCountsAsUnderWay(t *testing.T) {
	addr := testenv.StartDBus(t).Address
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	logind := testenv.StartLogind(t, addr, func(testenv.LogindCall) { <-block })
	cfg := DefaultConfig()
	// (Long enough for the connection's handshake on a loaded machine: a timeout there is
	// another error, "did not let the agent in".)
	cfg.SystemBus, cfg.CommandTimeout = addr, time.Second
	cfg.Commands[OpUpdate] = LogindReboot
	a := &Agent{cfg: cfg}
	entry := logrus.NewEntry(logrus.New())

	out, err := a.runOperation(LogindReboot, RunCommand{Operation: OpReboot, RequestID: "r1", Attempt: 1}, entry)
	require.NoError(t, err)
	assert.Contains(t, out, "no answer from logind")
	assert.Contains(t, out, "treated as under way")
	out, err = a.runOperation(LogindPowerOff, RunCommand{Operation: OpShutdown, RequestID: "r2", Attempt: 1}, entry)
	require.NoError(t, err, out)

	_, err = a.runOperation(LogindReboot, RunCommand{Operation: OpUpdate, RequestID: "r3", Attempt: 1}, entry)
	require.ErrorIs(t, err, errNoAnswer, "an update that does not reboot is not waited on")
	assert.Len(t, logind.Calls(), 3)

	logind.Fail("org.freedesktop.DBus.Error.AccessDenied", "Permission denied")
	_, err = a.runOperation(LogindReboot, RunCommand{Operation: OpReboot, RequestID: "r4", Attempt: 1}, entry)
	assert.ErrorContains(t, err, "refused", "a refusal is an answer: it fails and is retried")

	// A shutdown already under way (a slow one of ours whose reboot timeout ran out, or
	// someone else's): the node is going down; calling again would only be refused again.
	logind.Fail("org.freedesktop.login1.OperationInProgress", "There's already a shutdown or sleep operation in progress")
	out, err = a.runOperation(LogindReboot, RunCommand{Operation: OpReboot, RequestID: "r5", Attempt: 2}, entry)
	require.NoError(t, err)
	assert.Contains(t, out, "a shutdown is already under way")
	_, err = a.runOperation(LogindReboot, RunCommand{Operation: OpUpdate, RequestID: "r6", Attempt: 1}, entry)
	assert.ErrorIs(t, err, errInProgress)
}
