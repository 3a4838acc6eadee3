package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// What each status puts on the node: one lifecycle condition per phase of the drain, and
// MaintenanceInProgress from admission until the node is back.
func TestLifecycleConditionsOfEachStatus(t *testing.T) {
	types := func(st nodedrain.NodeDrainStatus) []string {
		var out []string
		for _, ct := range conditionTypes {
			if _, ok := wanted(st, false, true)[ct]; ok {
				out = append(out, string(ct))
			}
		}
		return out
	}
	for _, tc := range []struct {
		st   nodedrain.NodeDrainStatus
		want []string
	}{
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusNotRequested}, nil},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusRequested}, []string{"MaintenancePlanned"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusRequested, CordonedByUs: true}, []string{"MaintenancePlanned", "MaintenanceInProgress"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusStarting}, []string{"MaintenanceInProgress", "DrainInProgress"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusCordoned, CordonedByUs: true}, []string{"MaintenanceInProgress", "DrainInProgress"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusDrainRetrying, CordonedByUs: true}, []string{"MaintenanceInProgress", "DrainInProgress"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusFailedDrain, CordonedByUs: true}, []string{"MaintenanceInProgress"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusComplete, CordonedByUs: true}, []string{"MaintenanceInProgress", "Drained"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusNotSupported}, []string{"MaintenanceInProgress"}},
		{nodedrain.NodeDrainStatus{Status: nodedrain.StatusNotRequested, ReturningSince: time.Unix(1, 0)}, []string{"MaintenanceInProgress"}},
	} {
		assert.Equal(t, tc.want, types(tc.st), "%s cordoned=%v returning=%v", tc.st.Status, tc.st.CordonedByUs, !tc.st.ReturningSince.IsZero())
	}
}

// The writer patches only what changed, never another writer's condition, and nothing when the
// Node shows what the status wants: a status published again writes nothing.
func TestConditionWriterWritesOnlyChanges(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
		{Type: corev1.NodeDrained, Status: corev1.ConditionTrue, Reason: "SomeoneElse"},
	}}}
	client := fake.NewClientset(node)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, idx.Add(node))
	now := time.Unix(1000, 0)
	c := newConditions(client, listersv1.NewNodeLister(idx), nil, func() time.Time { return now }, true, true)
	ctx := context.Background()
	// sync writes st and mirrors the result into the lister, as the informer would.
	sync := func(st nodedrain.NodeDrainStatus) int {
		before := len(client.Actions())
		wait, err := c.write(ctx, st)
		require.NoError(t, err)
		assert.Zero(t, wait)
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, idx.Update(n))
		return len(client.Actions()) - before - 1 // the Get
	}
	st := nodedrain.NodeDrainStatus{Node: "n1", Status: nodedrain.StatusCordoned, CordonedByUs: true, Message: "evicting"}
	assert.Equal(t, 1, sync(st))
	assert.Equal(t, 0, sync(st), "the same status again writes nothing")
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	assert.Equal(t, "DrainInProgress=EdgedrainDraining Drained=SomeoneElse EdgedrainMaintenance=CORDONED MaintenanceInProgress=EdgedrainMaintenance", ourConditions(n))

	st.Status, st.Message = nodedrain.StatusComplete, "drained"
	assert.Equal(t, 1, sync(st))
	n, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	assert.Equal(t, "SomeoneElse", findCondition(n, corev1.NodeDrained).Reason, "another writer's Drained is left as it is")
	assert.Nil(t, findCondition(n, corev1.NodeDrainInProgress))
	assert.Equal(t, 0, sync(st))

	assert.Equal(t, 1, sync(nodedrain.NodeDrainStatus{Node: "n1", Status: nodedrain.StatusNotRequested}))
	n, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	assert.Equal(t, "Drained=SomeoneElse", ourConditions(n))
	assert.NotNil(t, findCondition(n, corev1.NodeReady))
	assert.Equal(t, 0, sync(nodedrain.NodeDrainStatus{Node: "n1", Status: nodedrain.StatusNotRequested}), "idle stays unwritten")
}
