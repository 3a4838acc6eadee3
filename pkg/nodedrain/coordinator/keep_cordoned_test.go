package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Issue 23, defect 4c: kubectl cordon on a node edgedrain already cordoned changes nothing, so
// an operator had no way to keep the node out of service after its drain. The annotation
// edgedrain.io/keep-cordoned (its name spelt out here: it is a documented contract) asks for
// that: the withdrawal leaves the node cordoned, hands the cordon over (both of edgedrain's
// annotations go), and says so. It is honoured once: the node's next drain uncordons it as usual.
func TestKeepCordonedOutlastsTheDrain(t *testing.T) {
	h := newHarness(t, "keep", 2)
	target := h.nodes[0]
	h.run(h.config(h.c.Client))
	h.request(target, "r1", time.Now())
	st := h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
	require.True(t, st.CordonedByUs)
	op := newOperator(t, h)
	op.cordon(target) // changes nothing: the node is cordoned already
	_, err := op.client.CoreV1().Nodes().Patch(context.Background(), target, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"edgedrain.io/keep-cordoned":"disk errors, RMA 4411"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	h.withdraw(target)
	h.waitFor(target, 20*time.Second, "the withdrawal settled", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && s.RequestID == "r1" && strings.HasPrefix(s.Message, "idle;")
	})
	n := h.node(target)
	assert.True(t, n.Spec.Unschedulable, "the node was uncordoned although its operator asked to keep it cordoned")
	assert.NotContains(t, n.Annotations, CordonAnnotation, "the cordon is the operator's now")
	assert.NotContains(t, n.Annotations, "edgedrain.io/keep-cordoned", "the request to keep it cordoned was answered")
	h.waitFor(target, time.Second, "a status saying why the node was left cordoned", func(s nodedrain.NodeDrainStatus) bool {
		return strings.Contains(s.Message, "left cordoned") && strings.Contains(s.Message, "disk errors, RMA 4411")
	})

	// The operator is done: the next drain cordons and uncordons as usual.
	op.uncordon(target)
	h.request(target, "r2", time.Now())
	h.waitFor(target, 30*time.Second, "COMPLETE for r2", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusComplete && s.RequestID == "r2"
	})
	h.withdraw(target)
	h.waitFor(target, 20*time.Second, "r2's withdrawal settled", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && s.RequestID == "r2" && strings.HasPrefix(s.Message, "idle;")
	})
	assert.False(t, h.node(target).Spec.Unschedulable, "a request to keep the node cordoned outlived the drain it was for")
}
