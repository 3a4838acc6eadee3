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

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A coordinator whose --node-selector selects one node of the cluster drains it to the others:
// the nodes it does not manage are still where workloads can move. It once took the selected
// node for a single-node cluster and answered NOTSUPPORTED, letting its agent go down undrained.
func TestOneSelectedNodeIsDrainedToTheOthers(t *testing.T) {
	h := newHarness(t, "selected-one", 2)
	managed := h.nodes[0]
	patch := []byte(`{"metadata":{"labels":{"edgedrain.test/managed":"yes"}}}`)
	_, err := h.c.Client.CoreV1().Nodes().Patch(context.Background(), managed, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	cfg := h.config(h.c.Client)
	cfg.NodeSelector = testenv.GroupLabel + "=" + h.group + ",edgedrain.test/managed=yes"
	h.run(cfg)

	h.request(managed, "r1", time.Now())
	st := h.waitFor(managed, 30*time.Second, "COMPLETE or NOTSUPPORTED", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusComplete || s.Status == nodedrain.StatusNotSupported
	})
	require.Equal(t, nodedrain.StatusComplete, st.Status, "drained, not let go undrained: %s", st.Message)
	assert.True(t, h.node(managed).Spec.Unschedulable, "cordoned")
	assert.Contains(t, h.history(managed), nodedrain.StatusCordoned)

	// A request under the name of the node it does not manage is not served.
	other := h.nodes[1]
	h.request(other, "r2", time.Now())
	h.waitFor(other, 20*time.Second, "not managed", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, "not (yet) one this coordinator manages")
	})
	assert.False(t, h.node(other).Spec.Unschedulable)
}
