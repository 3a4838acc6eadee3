package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// drainTimeout bounds a drain of a few pods on the local cluster, with room for a loaded machine.
const drainTimeout = 90 * time.Second

// waitDeferredUntilComplete polls until the node's status is COMPLETE for id, checking at every
// turn that the command has not run before it.
func waitDeferredUntilComplete(a *agentProc, id string) nodedrain.NodeDrainStatus {
	a.s.t.Helper()
	deadline := time.Now().Add(drainTimeout)
	for {
		a.noRunBeforeComplete(id)
		for _, st := range a.s.Seen(a.node) {
			if st.Status == nodedrain.StatusComplete && st.RequestID == id {
				return st
			}
		}
		require.True(a.s.t, time.Now().Before(deadline), "no COMPLETE for %s; history %v", id, a.s.history(a.node))
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSentinelRebootAndBack: sentinel → request → drain → COMPLETE → the reboot command runs
// exactly once, never before COMPLETE; then a simulated reboot (new boot ID, agent restarted)
// withdraws the request, the coordinator uncordons the node, and the status is NOTREQUESTED.
func TestSentinelRebootAndBack(t *testing.T) {
	t.Parallel()
	s := newScene(t, "reboot", 3)
	target := s.deploy("web", 6, 2)
	s.runCoordinator(nil)
	a := s.newAgent(target)
	a.start()
	assert.Equal(t, nodedrain.StatusNotRequested, a.status().Status)
	assert.Equal(t, 0.0, a.metric(`edgedrain_agent_deferred_operations{operation="reboot"}`))

	require.NoError(t, os.WriteFile(a.sentinel, []byte("*** System restart required ***\n"), 0o644))
	req := s.request(target, "")
	assert.Equal(t, nodedrain.RequesterDeviceOp, req.RequestedBy)
	assert.Equal(t, "reboot *** System restart required ***", req.Context)
	complete := waitDeferredUntilComplete(a, req.RequestID)
	assert.Equal(t, []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusStarting, nodedrain.StatusCordoned,
		nodedrain.StatusComplete}, s.history(target))

	runs := a.waitRuns(1, 10*time.Second)
	assert.Equal(t, "reboot", runs[0].op)
	assert.Equal(t, req.RequestID, runs[0].request)
	assert.Equal(t, req.Context, runs[0].context)
	assert.False(t, runs[0].at.Before(complete.UpdatedAt), "the command started before COMPLETE was published")
	t.Logf("COMPLETE published -> reboot command started: %s", runs[0].at.Sub(complete.UpdatedAt))
	st := a.status()
	assert.Equal(t, agent.PhaseWaitingBoot, st.State.Phase, "the reboot command returned: waiting for the node to go down")
	assert.True(t, s.unschedulable(target), "the node stays drained until it is back")

	t.Run("SIGTERM stops the agent cleanly and runs nothing", func(t *testing.T) {
		a.stop()
		assert.Len(t, a.runs(), 1)
	})
	t.Run("back from the reboot: withdrawn, uncordoned, NOTREQUESTED", func(t *testing.T) {
		a.setBootID("boot-2")
		a.start()
		s.waitWithdrawn(target)
		s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
			return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
		})
		assert.False(t, s.unschedulable(target), "node left cordoned")
		require.Eventually(t, func() bool { return a.status().Status == nodedrain.StatusNotRequested }, 10*time.Second, 20*time.Millisecond)
		assert.Equal(t, agent.PhaseIdle, a.status().State.Phase)
		// The sentinel file is still there (a real reboot clears /run): it does not ask again.
		testenv.Never(t, func() bool {
			_, _, err := s.Requests.Get(context.Background(), target)
			return err == nil
		}, time.Second, 50*time.Millisecond, "the handled sentinel asked again")
		assert.Len(t, a.runs(), 1, "the reboot command ran exactly once")
	})
}

// TestKilledWhileDeferred: an agent killed (SIGKILL) while its reboot is deferred comes back
// from its state file still deferred, and runs the command only at COMPLETE.
func TestKilledWhileDeferred(t *testing.T) {
	t.Parallel()
	s := newScene(t, "killed", 3)
	target := s.deploy("slow", 4, 20) // pods take 20 s to go: the drain stays CORDONED a while
	s.runCoordinator(func(c *coordinator.Config) { c.Limits.DrainAttemptTimeout = time.Minute })
	a := s.newAgent(target)
	a.start()
	out, err := a.cli("request", "reboot", "--context", "kernel 6.12")
	require.NoError(t, err, out)
	assert.Contains(t, out, "reboot deferred until the node is drained")
	req := s.request(target, "")
	s.waitFor(target, drainTimeout, "evicting", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusCordoned && strings.HasPrefix(st.Message, "evicting")
	})

	a.proc.Kill()
	assert.Empty(t, a.runs())
	state, err := os.ReadFile(filepath.Join(a.stateDir, agent.StateFileName))
	require.NoError(t, err)
	assert.Contains(t, string(state), `"phase": "deferred"`)

	a.start()
	st := a.status()
	assert.Equal(t, agent.PhaseDeferred, st.State.Phase)
	assert.Equal(t, req.RequestID, st.State.RequestID, "the same request, not a new one")
	assert.Equal(t, 1.0, a.metric(`edgedrain_agent_deferred_operations{operation="reboot"}`))
	human, err := a.cli("status")
	require.NoError(t, err, human)
	assert.Contains(t, human, "reboot, deferred (request "+req.RequestID)
	assert.Contains(t, human, `context "kernel 6.12"`)

	complete := waitDeferredUntilComplete(a, req.RequestID)
	runs := a.waitRuns(1, 10*time.Second)
	assert.Equal(t, req.RequestID, runs[0].request)
	assert.Equal(t, "kernel 6.12", runs[0].context)
	assert.False(t, runs[0].at.Before(complete.UpdatedAt))
	r, _, err := s.Requests.Get(context.Background(), target)
	require.NoError(t, err)
	assert.Equal(t, req.RequestID, r.RequestID, "the restart did not replace the request")
	assert.Len(t, a.runs(), 1)
}

// TestPDBFailsThenRetries: a PodDisruptionBudget blocks the drain → FAILEDDRAIN → the agent
// withdraws (the coordinator uncordons) and keeps the reboot deferred; once the budget is
// relaxed, the agent's next request completes and the command runs.
func TestPDBFailsThenRetries(t *testing.T) {
	t.Parallel()
	s := newScene(t, "pdb", 3)
	target := s.deploy("db", 3, 1)
	ctx := context.Background()
	three := intstr.FromInt32(3)
	pdb, err := s.c.Client.PolicyV1().PodDisruptionBudgets(s.ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &three,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	s.runCoordinator(func(c *coordinator.Config) {
		// Long enough for pods that are let go (1 s grace period) to be gone within an attempt.
		c.Limits.DrainAttempts, c.Limits.DrainAttemptTimeout = 2, 5*time.Second
	})
	a := s.newAgent(target, "--drain-retry-backoff", "3s", "--drain-retry-backoff-max", "3s")
	a.start()
	require.NoError(t, os.WriteFile(a.sentinel, nil, 0o644))
	first := s.request(target, "")
	failed := s.waitStatus(target, nodedrain.StatusFailedDrain, first.RequestID, drainTimeout)
	assert.Contains(t, failed.Blockers[0].Reason, "PodDisruptionBudget")

	s.waitWithdrawn(target)
	s.waitFor(target, 30*time.Second, "uncordoned after the withdrawal", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.False(t, s.unschedulable(target))
	assert.Empty(t, a.runs(), "ran after FAILEDDRAIN")
	st := a.status()
	assert.Equal(t, agent.PhaseBackoff, st.State.Phase)
	assert.Equal(t, 1.0, a.metric(`edgedrain_agent_deferred_operations{operation="reboot"}`), "still deferred")
	assert.Equal(t, 1.0, a.metric(`edgedrain_agent_drain_failures_total{operation="reboot",status="FAILEDDRAIN"}`))

	_, err = s.c.Client.PolicyV1().PodDisruptionBudgets(s.ns).Patch(ctx, pdb.Name, types.MergePatchType,
		[]byte(`{"spec":{"minAvailable":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	second := s.request(target, first.RequestID)
	assert.NotEqual(t, first.RequestID, second.RequestID)
	waitDeferredUntilComplete(a, second.RequestID)
	runs := a.waitRuns(1, 10*time.Second)
	assert.Equal(t, second.RequestID, runs[0].request)
	assert.Len(t, a.runs(), 1)
}

// TestSingleNodeNotSupported: on a one-node cluster the coordinator answers NOTSUPPORTED and
// the agent runs the operation at once.
func TestSingleNodeNotSupported(t *testing.T) {
	t.Parallel()
	s := newScene(t, "single", 1)
	s.runCoordinator(nil)
	a := s.newAgent(s.nodes[0])
	a.start()
	out, err := a.cli("request", "shutdown", "--context", "site power work")
	require.NoError(t, err, out)
	req := s.request(s.nodes[0], "")
	ns := s.waitStatus(s.nodes[0], nodedrain.StatusNotSupported, req.RequestID, 30*time.Second)
	runs := a.waitRuns(1, 10*time.Second)
	assert.Equal(t, "shutdown", runs[0].op)
	assert.Equal(t, "site power work", runs[0].context)
	assert.False(t, runs[0].at.Before(ns.UpdatedAt))
	assert.False(t, s.unschedulable(s.nodes[0]), "nothing was cordoned")
}

// TestUpdateThroughTheSocket: `agent request update --context v1.2.3` defers the update until
// COMPLETE, runs it with its context, then withdraws so the coordinator uncordons at once.
func TestUpdateThroughTheSocket(t *testing.T) {
	t.Parallel()
	s := newScene(t, "update", 2)
	target := s.deploy("app", 2, 1)
	s.runCoordinator(nil)
	a := s.newAgent(target)
	a.start()
	out, err := a.cli("request", "update", "--context", "v1.2.3")
	require.NoError(t, err, out)
	out, err = a.cli("request", "reboot")
	require.Error(t, err, "another operation while the update is pending")
	assert.Contains(t, out, "an update is already")

	req := s.request(target, "")
	assert.Equal(t, nodedrain.RequesterUpdate, req.RequestedBy)
	assert.Equal(t, "v1.2.3", req.Context)
	complete := waitDeferredUntilComplete(a, req.RequestID)
	runs := a.waitRuns(1, 10*time.Second)
	assert.Equal(t, ranLine{at: runs[0].at, op: "update", request: req.RequestID, context: "v1.2.3"}, runs[0])
	t.Logf("COMPLETE published -> update command started: %s", runs[0].at.Sub(complete.UpdatedAt))

	s.waitWithdrawn(target)
	s.waitFor(target, 30*time.Second, "uncordoned", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.False(t, s.unschedulable(target))
	require.Eventually(t, func() bool { return a.status().State.Phase == agent.PhaseIdle }, 10*time.Second, 20*time.Millisecond)
	assert.Len(t, a.runs(), 1)
}

// TestOverride: a forced COMPLETE (by number, then by name) runs the operation within about a
// second and is consumed; an invalid file is reported and changes nothing. The coordinator's
// drain is held back meanwhile (slow pods, one drain at a time).
func TestOverride(t *testing.T) {
	t.Parallel()
	s := newScene(t, "override", 2)
	busy := s.deploy("slow", 2, 60) // its pods take a minute to go: the drain of busy stays CORDONED
	other := s.nodes[0]
	if other == busy {
		other = s.nodes[1]
	}
	s.runCoordinator(func(c *coordinator.Config) { c.Limits.DrainAttemptTimeout = 2 * time.Minute })
	first := s.newAgent(busy)
	second := s.newAgent(other)
	first.start()
	second.start()
	_, err := first.cli("request", "reboot")
	require.NoError(t, err)
	r1 := s.request(busy, "")
	s.waitStatus(busy, nodedrain.StatusCordoned, r1.RequestID, drainTimeout)
	_, err = second.cli("request", "reboot")
	require.NoError(t, err)
	r2 := s.request(other, "")
	s.waitStatus(other, nodedrain.StatusRequested, r2.RequestID, 30*time.Second) // queued behind the first

	t.Run("COMPLETE by number", func(t *testing.T) {
		written := time.Now()
		require.NoError(t, os.WriteFile(first.override, []byte(`{"Status":9,"RequestedBy":2}`), 0o644))
		runs := first.waitRuns(1, 2*time.Second)
		t.Logf("override written -> command started: %s", runs[0].at.Sub(written))
		assert.Equal(t, r1.RequestID, runs[0].request)
		require.Eventually(t, func() bool { _, err := os.Stat(first.override); return os.IsNotExist(err) }, 2*time.Second,
			10*time.Millisecond, "override not consumed")
		assert.Equal(t, 0.0, first.metric("edgedrain_agent_override_active"))
	})
	t.Run("invalid file is reported and ignored", func(t *testing.T) {
		require.NoError(t, os.WriteFile(second.override, []byte(`{"Status":"DONE"}`), 0o644))
		require.Eventually(t, func() bool { return second.metric("edgedrain_agent_override_errors_total") == 1 }, 5*time.Second,
			20*time.Millisecond)
		assert.Contains(t, second.proc.Log(), "ignoring the override file")
		assert.Contains(t, second.proc.Log(), `unknown status \"DONE\"`)
		st := second.status()
		assert.Equal(t, agent.SourceBus, st.Source)
		assert.Equal(t, nodedrain.StatusRequested, st.Status)
		assert.Empty(t, second.runs())
		assert.False(t, second.proc.Exited(), "an invalid override is never fatal")
	})
	t.Run("COMPLETE by name", func(t *testing.T) {
		written := time.Now()
		require.NoError(t, os.WriteFile(second.override, []byte(`{"Status":"COMPLETE","RequestedBy":"DEVICEOP"}`), 0o644))
		runs := second.waitRuns(1, 2*time.Second)
		t.Logf("override written -> command started: %s", runs[0].at.Sub(written))
		assert.Equal(t, r2.RequestID, runs[0].request)
		require.Eventually(t, func() bool { _, err := os.Stat(second.override); return os.IsNotExist(err) }, 2*time.Second,
			10*time.Millisecond, "override not consumed")
	})
	assert.Len(t, first.runs(), 1)
	assert.Len(t, second.runs(), 1)
}
