package coordinator

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Issue 23, defect 4b: a Node deleted while its drain is under way (kubectl delete node during
// eviction) held the drain, and the admission slot, for ever: the check before COMPLETE found
// it "not found" and asked again, and the stale-holder rule covers COMPLETE holders only.

// skewedClock is the engine's clock, which the test moves forward (the one-minute grace of a
// missing Node passes without waiting a minute).
type skewedClock struct{ ahead atomic.Int64 }

func (c *skewedClock) now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *skewedClock) forward(d time.Duration) { c.ahead.Add(int64(d)) }

// collectOrphans force-deletes the pods bound to node, as the controller-manager's pod garbage
// collector does once their Node object is gone (it waits a quarantine of 40 s first).
func collectOrphans(t *testing.T, h *harness, node string) {
	t.Helper()
	ctx := context.Background()
	pods, err := h.c.PodsOnNode(ctx, h.ns, node)
	require.NoError(t, err)
	zero := int64(0)
	for _, p := range pods {
		err := h.c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
	}
}

// The drain of a Node deleted during its eviction (its pods then collected, the eviction done)
// ends, failed and naming the reason, never COMPLETE; the node queued behind it is admitted.
func TestDeletedNodeEndsItsDrainAndFreesItsSlot(t *testing.T) {
	h := newHarness(t, "vanished", 3)
	target := h.deploy("slow", 4, 60) // pods take a minute to terminate
	next := h.nodes[0]
	if next == target {
		next = h.nodes[1]
	}
	clock := &skewedClock{}
	cfg := h.config(h.c.Client)
	cfg.Now = clock.now
	h.run(cfg)
	h.request(target, "r1", time.Now())
	h.waitFor(target, 30*time.Second, "evicting", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && strings.HasPrefix(s.Message, "evicting")
	})
	h.request(next, "r2", time.Now())
	h.waitFor(next, 10*time.Second, "queued behind the drain", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, "max-concurrent-drains")
	})
	require.NoError(t, h.c.Client.CoreV1().Nodes().Delete(context.Background(), target, metav1.DeleteOptions{}))
	collectOrphans(t, h, target)

	ended := func(s nodedrain.NodeDrainStatus) bool {
		return s.Status.Failed() || s.Status == nodedrain.StatusComplete
	}
	deadline := time.Now().Add(30 * time.Second)
	for st, _ := h.last(target); !ended(st); st, _ = h.last(target) {
		require.True(t, time.Now().Before(deadline), "the drain of the deleted node never ended; last: %s %q; history %v",
			st.Status, st.Message, h.history(target))
		clock.forward(5 * time.Second)
		time.Sleep(50 * time.Millisecond) // (a pace for the forwarded clock, not an assertion)
	}
	st, _ := h.last(target)
	assert.Equal(t, nodedrain.StatusFailedDrain, st.Status, "message %q", st.Message)
	assert.Contains(t, st.Message, "Node object has been gone")
	assert.NotContains(t, h.history(target), nodedrain.StatusComplete, "COMPLETE for a node that vanished")
	assert.False(t, st.HoldsSlot())
	h.waitStatus(next, nodedrain.StatusStarting, 10*time.Second)
}

// A Node deleted and registered again (same name, new UID) before the check before COMPLETE is
// a new node: the drain starts over on it, even when it came back cordoned (here by its
// operator, as the first one was), instead of taking its cordon for the drained node's.
func TestNodeRegisteredAgainDuringTheDrainIsDrainedAnew(t *testing.T) {
	h := newHarness(t, "reregistered", 2)
	target := h.nodes[0]
	op := newOperator(t, h)
	op.cordon(target)
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(h.c.Client)
	cfg.Gate = gate
	h.run(cfg)
	h.request(target, "r1", time.Now())
	h.waitFor(target, 20*time.Second, "cordoned, the volume gate blocking", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) > 0
	})
	old := h.node(target)
	ctx := context.Background()
	require.NoError(t, h.c.Client.CoreV1().Nodes().Delete(ctx, target, metav1.DeleteOptions{}))
	_, err := h.c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: target, Labels: old.Labels, Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"}},
		Spec:       corev1.NodeSpec{Unschedulable: true},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEqual(t, old.UID, h.node(target).UID)
	gate.set(target, true)

	h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
	assert.Equal(t, []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusStarting, nodedrain.StatusCordoned,
		nodedrain.StatusStarting, nodedrain.StatusCordoned, nodedrain.StatusComplete}, h.history(target))
	h.waitFor(target, time.Second, "a status saying the Node was replaced", func(s nodedrain.NodeDrainStatus) bool {
		return strings.Contains(s.Message, "Node object was replaced")
	})
}
