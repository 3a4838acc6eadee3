package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// TestRebootThroughLogind: the agent as the DaemonSet runs it, rebooting through logind on the
// system D-Bus (a real dbus-daemon; a stand-in owns logind's name, since logind needs systemd as
// PID 1). Started before logind is on the bus, it says so; the reboot is one non-interactive
// Reboot call, never before COMPLETE; a refused call is retried; once the node is back (new boot
// ID) the request is withdrawn and the node uncordoned.
func TestRebootThroughLogind(t *testing.T) {
	t.Parallel()
	s := newScene(t, "logind", 3)
	target := s.deploy("web", 4, 1)
	s.runCoordinator(nil)
	bus := testenv.StartDBus(t)
	a := s.newAgent(target, "--reboot-command", agent.LogindReboot, "--system-bus", bus.Address,
		"--command-retry-backoff", "300ms", "--command-retry-backoff-max", "300ms")
	a.start()
	require.Eventually(t, func() bool {
		return strings.Contains(a.proc.Log(), "the reboot through logind will fail until logind answers")
	}, 10*time.Second, 20*time.Millisecond, "no warning at start without logind:\n%s", a.proc.Tail(20))

	logind := testenv.StartLogind(t, bus.Address, nil)
	logind.Fail("org.freedesktop.DBus.Error.AccessDenied", "Permission denied")
	out, err := a.cli("request", "reboot", "--context", "kernel 6.12")
	require.NoError(t, err, out)
	req := s.request(target, "")
	deadline := time.Now().Add(drainTimeout)
	var complete nodedrain.NodeDrainStatus
	// The agent may act before this test's own watch records the COMPLETE: calls are judged by
	// their time against the COMPLETE's publication, not by the order the two are seen here.
	for complete.RequestID == "" {
		for _, st := range s.Seen(target) {
			if st.Status == nodedrain.StatusComplete && st.RequestID == req.RequestID {
				complete = st
			}
		}
		require.True(t, time.Now().Before(deadline), "no COMPLETE; history %v", s.history(target))
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range logind.Calls() {
		require.False(t, c.At.Before(complete.UpdatedAt), "logind was called at %s, before COMPLETE at %s", c.At, complete.UpdatedAt)
	}

	require.Eventually(t, func() bool { return len(logind.Calls()) >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(a.proc.Log(), "logind:reboot: refused by logind and polkit (run the agent as root")
	}, 10*time.Second, 20*time.Millisecond, "the refusal is not logged:\n%s", a.proc.Tail(20))
	assert.NotEqual(t, agent.PhaseWaitingBoot, a.status().State.Phase, "a refused reboot is not waited on")
	logind.Fail("", "")
	require.Eventually(t, func() bool { return a.status().State.Phase == agent.PhaseWaitingBoot }, 10*time.Second, 20*time.Millisecond,
		"the retried reboot did not go through:\n%s", a.proc.Tail(20))
	calls := logind.Calls()
	require.GreaterOrEqual(t, len(calls), 2, "refused, then called again and accepted")
	for i, c := range calls {
		assert.Equal(t, "Reboot", c.Method)
		assert.False(t, c.Interactive)
		assert.Equal(t, i < len(calls)-1, c.Refused, "call %d: every call but the last was refused", i)
		assert.False(t, c.At.Before(complete.UpdatedAt), "Reboot called at %s, before COMPLETE at %s", c.At, complete.UpdatedAt)
	}
	assert.True(t, s.unschedulable(target), "the node stays drained until it is back")

	a.stop()
	a.setBootID("boot-2")
	a.start()
	s.waitWithdrawn(target)
	s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.False(t, s.unschedulable(target))
	assert.Len(t, logind.Calls(), len(calls), "no reboot after the node came back")
	_, _, err = s.Requests.Get(context.Background(), target)
	assert.Error(t, err, "the request is withdrawn")
}
