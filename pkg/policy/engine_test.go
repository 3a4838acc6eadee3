package policy

// The maintenance policy end to end: the real coordinator Engine asking a real Evaluator on a
// Source that watches a real ConfigMap, on simulated nodes of the local cluster, with requests
// and statuses on a real bus (README, "Maintenance policy").

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/preflight"
)

// A request outside its window waits in REQUESTED, saying when the window opens, with its node
// untouched; an operator's edit of the ConfigMap to a window open now admits it, without a
// restart.
func TestWindowClosedHoldsThenAdmits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "window-edit", 2)
	now := time.Now()
	w.start(windowPolicy(now.Add(2*time.Hour), now.Add(3*time.Hour)))
	w.heldUntil(w.nodes[0], "held by the window", saying("the DEVICEOP maintenance window", "is closed; it opens at"), func() {
		w.setPolicy(windowPolicy(time.Now().Add(-time.Hour), time.Now().Add(time.Hour)))
	})
}

// A window that opens a few seconds from now: the request waits and starts when it opens, not
// before (the engine notices the time, nothing else changes).
func TestWindowOpensOnTime(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "window-time", 2)
	w.start("")
	// Windows have minute granularity: the next minute boundary, at least 5 s away so that the
	// hold is seen first.
	now := time.Now()
	opens := now.Truncate(time.Minute).Add(time.Minute)
	if opens.Sub(now) < 5*time.Second {
		opens = opens.Add(time.Minute)
	}
	w.setPolicy(windowPolicy(opens, opens.Add(30*time.Minute)))
	w.requestInOrder(w.nodes[0])
	held := w.waitHeld(w.nodes[0], "held until the window opens", saying("maintenance window",
		"it opens at "+opens.UTC().Format("Mon 2006-01-02 15:04 MST")))
	require.True(t, held.UpdatedAt.Before(opens), "the hold was published only at %s", held.UpdatedAt)

	starting := w.WaitStatus(t, w.nodes[0], nodedrain.StatusStarting, time.Until(opens)+waitLong)
	notBefore(t, starting, opens, "the window opened")
	w.completes(w.nodes[0])
}

// A pod on the node matching the policy's pod selector holds the drain, named as its blocker (a
// matching pod elsewhere does not); once it is gone the drain is admitted.
func TestBlockingPodHoldsNamingIt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "blocking-pod", 2)
	const sel = "edgedrain.test/blocks=yes"
	blocks := map[string]string{"edgedrain.test/blocks": "yes"}
	w.bindPod(w.nodes[0], "batch", blocks, 1)
	w.bindPod(w.nodes[1], "batch-elsewhere", blocks, 1)
	w.start(fmt.Sprintf("blockers: {podSelector: %q}", sel))
	st := w.heldUntil(w.nodes[0], "held by the pod", blockedBy(nodedrain.BlockerPod, w.ns, "batch"), func() { w.deletePod("batch") })
	assert.Equal(t, []nodedrain.Blocker{podBlocker(w.ns, "batch", sel)}, st.Blockers)
	assert.Contains(t, st.Message, "1 blocker(s) of the maintenance policy")
}

// Firing alerts of a real Prometheus hold a drain before admission and again before COMPLETE,
// and a query Prometheus refuses fails closed. One Prometheus; each case its own alert.
func TestPrometheusBlockers(t *testing.T) {
	t.Parallel()
	testenv.RequireCluster(t, cluster)
	p := testenv.StartPrometheus(t, testenv.PrometheusOptions{})
	p.WaitScraped(15 * time.Second)
	alertPolicy := func(alert string) string {
		return fmt.Sprintf("blockers:\n  prometheus: {url: %q, timeout: 2s, alerts: {include: %q}}\n", p.URL, "^"+alert+"$")
	}
	firing := func(t *testing.T, alert string) {
		t.Helper()
		require.Eventually(t, func() bool { return rawAlerts(t, p.URL)[alert] == v1.AlertStateFiring },
			promWait, promTick, "%s never fired", alert)
	}

	t.Run("a firing alert holds admission until it resolves", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "alert-admit", 2)
		p.Set("TestAlert", 1)
		firing(t, "TestAlert")
		w.start(alertPolicy("TestAlert"))
		st := w.heldUntil(w.nodes[0], "held by the alert", blockedBy(BlockerAlert, "", "TestAlert"), func() { p.Set("TestAlert", 0) })
		assert.Len(t, st.Blockers, 1)
	})

	t.Run("an alert firing after admission holds COMPLETE", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "alert-final", 2)
		// A pod that takes a minute to stop keeps the drain in CORDONED while the alert starts
		// firing; the test then removes it at once.
		w.bindPod(w.nodes[0], "slow", nil, 60)
		w.waitRunning("slow")
		w.start(alertPolicy("OtherAlert"), func(s *settings) { s.engine.Limits.DrainAttemptTimeout = 2 * time.Minute })
		w.requestInOrder(w.nodes[0])
		w.WaitStatus(t, w.nodes[0], nodedrain.StatusCordoned, waitLong)
		require.Eventually(t, func() bool {
			pod, err := w.c.Client.CoreV1().Pods(w.ns).Get(context.Background(), "slow", metav1.GetOptions{})
			return err == nil && pod.DeletionTimestamp != nil
		}, waitLong, tick, "the slow pod was never evicted")
		p.Set("OtherAlert", 1)
		firing(t, "OtherAlert")
		w.deletePod("slow")

		st := w.WaitFor(t, w.nodes[0], waitLong, "CORDONED held by the alert", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusCordoned && blockedBy(BlockerAlert, "", "OtherAlert")(s)
		})
		assert.Contains(t, st.Message, "before COMPLETE")
		w.stays(w.nodes[0], nodedrain.StatusCordoned, nil)

		resolved := time.Now()
		p.Set("OtherAlert", 0)
		_, complete := w.completes(w.nodes[0])
		notBefore(t, complete, resolved, "the alert resolved")
	})

	t.Run("a Prometheus slower than the answer age still lets COMPLETE through", func(t *testing.T) {
		// The answers before COMPLETE must be at most nodedrain.MaxAnswerAge old: the policy's
		// query before COMPLETE must not count in the volumes' answer, or every answer would be
		// too old and the check asked again for ever.
		t.Parallel()
		w := newWorld(t, "alert-slow", 2)
		slow := testenv.StartProxy(t, strings.TrimPrefix(p.URL, "http://"))
		slow.Delay(false, nodedrain.MaxAnswerAge+200*time.Millisecond)
		w.start(fmt.Sprintf("blockers:\n  prometheus: {url: %q, timeout: 5s, alerts: {include: %q}}\n", "http://"+slow.Addr(), "^NeverFires$"),
			func(s *settings) { s.eval.Every = 5 * time.Second }) // (admission's checks, as by default, may be 3 × that old)
		w.requestInOrder(w.nodes[0])
		w.completes(w.nodes[0])
	})

	t.Run("a query Prometheus refuses fails closed", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "bad-query", 2)
		w.start(fmt.Sprintf("blockers:\n  prometheus: {url: %q, timeout: 2s, queries: ['sum(']}\n", p.URL))
		w.heldUntil(w.nodes[0], "failing closed on the query", saying("failing closed", p.URL, `query "sum("`), func() {
			w.setPolicy(fmt.Sprintf("blockers:\n  prometheus: {url: %q, timeout: 2s, queries: ['sum(up) < 0']}\n", p.URL))
		})
	})
}

// A Prometheus that does not answer holds every drain with the error in the message (fail
// closed); dropping it from the policy lets the drain go.
func TestPrometheusErrorFailsClosed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "prom-down", 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	w.start(fmt.Sprintf("blockers:\n  prometheus: {url: %q, timeout: 1s, alerts: {}}\n", url))
	st := w.heldUntil(w.nodes[0], "failing closed", saying("cannot check the maintenance policy, failing closed",
		"prometheus "+url, "connection refused"), func() { w.setPolicy("blockers: {}") })
	assert.Empty(t, st.Blockers)
}

// --preflight=hold: a PodDisruptionBudget that allows no disruption of the node's pod holds the
// drain before anything is cordoned, naming the budget; once it allows one, the drain runs.
func TestPreflightHoldPredictsPDB(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "preflight", 2)
	_, node := w.c.Deploy(t, testenv.DeploymentSpec{Namespace: w.ns, Name: "web", Group: w.group, Replicas: 1})
	w.setBudget("web", 0, 0)
	w.start("", func(s *settings) {
		pcfg := preflight.Config{Client: w.c.Client, EvictUnmanagedPods: s.engine.EvictUnmanagedPods}
		s.eval.Preflight = coordinator.PreflightHold
		s.eval.Predict = func(ctx context.Context, node string, _ nodedrain.NodeDrainRequest) ([]nodedrain.Blocker, error) {
			p, err := preflight.Predict(ctx, pcfg, node)
			return p.Blockers, err
		}
	})
	st := w.heldUntil(node, "held by the prediction", saying("pre-flight predicts 1 blocker(s)", "--preflight=hold"),
		func() { w.setBudget("web", 1, 1) })
	require.Len(t, st.Blockers, 1)
	assert.Equal(t, nodedrain.BlockerPod, st.Blockers[0].Kind)
	assert.Contains(t, st.Blockers[0].Reason, "PodDisruptionBudget "+w.ns+"/web allows 0 disruptions")
}

// returning drains the first of two nodes (one at a time), brings it back with a pod bound to
// it that is not Ready, and checks that it holds its slot: NOTREQUESTED with ReturningSince and
// the pod as blocker, the second node still waiting behind it.
func returning(w *world, tune ...func(*settings)) {
	w.t.Helper()
	first, second := w.nodes[0], w.nodes[1]
	w.start("", tune...)
	w.requestInOrder(first, second)
	w.completes(first)
	// Back from its reboot: a pod scheduled to it again is not Ready yet.
	w.bindPod(first, "back", nil, 1)
	w.setPodReady("back", false)
	w.Withdraw(w.t, first)
	st := w.WaitFor(w.t, first, waitLong, "returning, waiting for the pod", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.ReturningSince.IsZero() && blockedBy(nodedrain.BlockerPod, w.ns, "back")(s)
	})
	assert.Contains(w.t, st.Message, "holding its admission slot until it is healthy again")
	w.waitHeld(second, "behind the returning node", saying(first+" in maintenance"))
	w.staysHeld(second)
	require.False(w.t, w.cordoned(first), "the returning node is uncordoned at once")
}

// The return gate: a node back from its operation keeps its slot until it is healthy again,
// then the next node goes; or, past the return timeout, the slot is released anyway.
func TestReturnGateHoldsNextNode(t *testing.T) {
	t.Parallel()
	t.Run("until healthy", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "return", 2)
		returning(w)
		healthy := time.Now()
		w.setPodReady("back", true)
		st := w.WaitFor(t, w.nodes[0], waitLong, "idle and healthy", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusNotRequested && s.ReturningSince.IsZero()
		})
		assert.Contains(t, st.Message, "back from its operation and healthy again")
		assert.Empty(t, st.Blockers)
		starting, _ := w.completes(w.nodes[1])
		notBefore(t, starting, healthy, "the returning node was healthy")
		assert.Equal(t, uint64(1), w.observations("edgedrain_return_gate_seconds", "result", nodedrain.ReturnHealthy))
		assert.Zero(t, w.observations("edgedrain_return_gate_seconds", "result", nodedrain.ReturnTimedOut))
	})

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "return-timeout", 2)
		returning(w, func(s *settings) { s.engine.Limits.ReturnTimeout = 4 * time.Second })
		st := w.WaitFor(t, w.nodes[0], waitLong, "return gate timed out", saying("timed out"))
		assert.Equal(t, nodedrain.StatusNotRequested, st.Status)
		assert.True(t, st.ReturningSince.IsZero(), "still returning after the timeout")
		starting, _ := w.completes(w.nodes[1])
		notBefore(t, starting, st.UpdatedAt, "the return gate timed out")
		assert.Equal(t, uint64(1), w.observations("edgedrain_return_gate_seconds", "result", nodedrain.ReturnTimedOut))
		assert.Zero(t, w.observations("edgedrain_return_gate_seconds", "result", nodedrain.ReturnHealthy))
	})
}

// A COMPLETE node that never comes back releases its slot after the stale-holder timeout,
// whether it stays NotReady or its Node object is deleted (min(timeout, DeletedGrace)): its
// status stays COMPLETE with SlotReleased and the reason, and the next node is admitted only
// then.
func TestDeletedCompleteNodeFreesItsSlot(t *testing.T) {
	t.Parallel()
	const stale = 2 * time.Second
	for _, tc := range []struct {
		name, group, reason string
		gone                func(w *world, node string)
	}{
		{"NotReady", "stale-down", "NotReady since", (*world).shutDown},
		{"deleted", "stale-deleted", "the Node object has been gone", func(w *world, node string) {
			require.NoError(w.t, w.c.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.group, 3) // the third takes the second's workloads
			first, second := w.nodes[0], w.nodes[1]
			var metrics *coordinator.Metrics
			w.start("", func(s *settings) {
				s.engine.StaleHolderTimeout = stale
				metrics = s.engine.Metrics
			})
			w.requestInOrder(first, second)
			w.completes(first)
			w.waitHeld(second, "behind the first", saying(first+" in maintenance"))
			gone := time.Now()
			tc.gone(w, first)
			st := w.WaitFor(t, first, waitLong, "slot released", func(s nodedrain.NodeDrainStatus) bool { return s.SlotReleased })
			// Not before the timeout (less a second: the Ready condition's time is in seconds).
			notBefore(t, st, gone.Add(stale-time.Second), "the stale-holder timeout passed")
			assert.Equal(t, nodedrain.StatusComplete, st.Status)
			assert.Contains(t, st.Message, tc.reason)
			assert.Contains(t, st.Message, "admission slot released")
			starting, _ := w.completes(second)
			notBefore(t, starting, st.UpdatedAt, "the stale slot was released")
			assert.Equal(t, 1.0, testutil.ToFloat64(metrics.StaleReleases))
		})
	}
}

// An invalid edit keeps the last valid policy in force (the window still holds); a ConfigMap
// that never held a valid policy holds every admission until it is fixed.
func TestInvalidPolicyKeepsLastValid(t *testing.T) {
	t.Parallel()
	const invalid = "windows: {DEVICEOP: {start: \"26:00\", end: \"02:00\"}}"
	t.Run("invalid edit", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "invalid-edit", 2)
		now := time.Now()
		w.start(windowPolicy(now.Add(2*time.Hour), now.Add(3*time.Hour)))
		w.requestInOrder(w.nodes[0])
		w.waitHeld(w.nodes[0], "held by the window", saying("maintenance window"))
		st := w.setPolicy(invalid)
		require.ErrorIs(t, st.Err, ErrInvalid)
		require.NotNil(t, st.Config, "the last valid policy was dropped")
		w.staysHeld(w.nodes[0])
		last, _ := w.Last(w.nodes[0])
		assert.Contains(t, last.Message, "maintenance window", "no longer held by the window")
	})

	t.Run("never valid", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t, "invalid-never", 2)
		w.start(invalid)
		w.heldUntil(w.nodes[0], "held by the unusable policy", saying("the maintenance policy cannot be used", "windows.DEVICEOP.start"),
			func() { w.setPolicy("windows: {}") })
	})
}

// Failure domains: two nodes of one zone are never in maintenance at once, even when the
// concurrency limit would allow it; a node of another zone goes meanwhile.
func TestFailureDomainOneAtATime(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "zones", 3)
	const zone = "topology.kubernetes.io/zone"
	w.label(zone, "a", w.nodes[0], w.nodes[1])
	w.label(zone, "b", w.nodes[2])
	w.start("order: {failureDomainLabel: "+zone+"}", func(s *settings) { s.engine.MaxConcurrentDrains = 3 })
	w.requestInOrder(w.nodes...)
	w.completes(w.nodes[0])
	w.waitHeld(w.nodes[1], "behind its zone", saying(w.nodes[0]+" of the same failure domain \"a\" in maintenance"))
	w.completes(w.nodes[2])
	w.staysHeld(w.nodes[1])

	back := time.Now()
	w.Withdraw(t, w.nodes[0])
	starting, _ := w.completes(w.nodes[1])
	notBefore(t, starting, back, "the first node of its zone was back")
}
