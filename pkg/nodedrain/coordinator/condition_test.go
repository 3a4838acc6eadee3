package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The node's EdgedrainMaintenance condition follows its drain (reason: the status, message:
// the status's), next to the kubelet's own conditions, and is removed once the node is idle.
func TestNodeConditionFollowsTheDrain(t *testing.T) {
	h := newHarness(t, "condition", 3)
	target := h.deploy("web", 3, 1)
	h.run(h.config(h.c.Client))

	var mu sync.Mutex
	var reasons []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := h.c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", target).String()})
	require.NoError(t, err)
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			reason := "-"
			if c := condition(n); c != nil {
				reason = c.Reason
			}
			mu.Lock()
			if len(reasons) == 0 || reasons[len(reasons)-1] != reason {
				reasons = append(reasons, reason)
			}
			mu.Unlock()
		}
	}()

	h.request(target, "r1", time.Now())
	st := h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	var c *corev1.NodeCondition
	require.Eventually(t, func() bool {
		c = condition(h.node(target))
		return c != nil && c.Reason == "COMPLETE"
	}, 10*time.Second, 50*time.Millisecond, "no COMPLETE condition on the node")
	assert.Equal(t, corev1.ConditionTrue, c.Status)
	assert.Equal(t, st.Message, c.Message)
	assert.False(t, c.LastTransitionTime.IsZero())
	ready := false
	for _, kc := range h.node(target).Status.Conditions {
		ready = ready || (kc.Type == corev1.NodeReady && kc.Status == corev1.ConditionTrue)
	}
	assert.True(t, ready, "the kubelet's Ready condition is kept")

	h.withdraw(target)
	h.waitFor(target, 10*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	require.Eventually(t, func() bool { return condition(h.node(target)) == nil }, 10*time.Second, 50*time.Millisecond,
		"the condition stays on an idle node")
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reasons...)
	}
	require.Eventually(t, func() bool { r := seen(); return r[len(r)-1] == "-" }, 10*time.Second, 20*time.Millisecond,
		"the watch did not see the condition go: %v", seen())
	assert.Contains(t, seen(), "CORDONED", "the condition went through the drain: %v", seen())
	assert.Contains(t, seen(), "COMPLETE", "the condition went through the drain: %v", seen())
}

func condition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == NodeConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
