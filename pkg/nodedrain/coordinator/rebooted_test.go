package coordinator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A node whose kubelet reports a new boot while its drain is still under way went down
// undrained: a Warning Event on the Node and the metric say so. A request made in the new boot is
// no such thing.
func TestUndrainedRebootIsRecorded(t *testing.T) {
	h := newHarness(t, "undrained", 3)
	target := h.deploy("db", 3, 1)
	h.pdbAllowingNone("db-pdb", "db", 3) // the drain stays under way
	for _, n := range h.nodes {
		setBootID(t, h, n, "boot-1")
	}
	cfg := h.config(h.c.Client)
	cfg.Recorder = h.eventRecorder()
	h.run(cfg)

	var idle string
	for _, n := range h.nodes {
		if n != target {
			idle = n
		}
	}

	h.request(target, "r1", time.Now())
	h.waitStatus(target, nodedrain.StatusDrainRetrying, 30*time.Second)
	// The idle node's agent asks from its new boot before the coordinator sees that boot.
	_, err := h.Requests.Publish(context.Background(), idle, nodedrain.NodeDrainRequest{Node: idle, RequestID: "r2",
		RequestedAt: time.Now(), RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot", BootID: "boot-2"})
	require.NoError(t, err)
	h.waitStatus(idle, nodedrain.StatusRequested, 30*time.Second)
	setBootID(t, h, idle, "boot-2")
	setBootID(t, h, target, "boot-2")
	ev := waitEvent(t, h, target, EventUndrainedReboot)
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	assert.Contains(t, ev.Message, "request r1")
	assert.Contains(t, ev.Message, "was DRAINRETRYING, before COMPLETE")
	// One: the idle node's new boot, seen first, is its request's own.
	assert.Equal(t, 1.0, testutil.ToFloat64(cfg.Metrics.UndrainedReboots))
	assert.Empty(t, events(t, h, idle, EventUndrainedReboot))
}

// setBootID writes the boot ID the kubelet of node reports.
func setBootID(t *testing.T, h *harness, node, boot string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"bootID": boot}}})
	require.NoError(t, err)
	_, err = h.c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// events lists the Events of reason on node.
func events(t *testing.T, h *harness, node, reason string) []corev1.Event {
	t.Helper()
	evs, err := h.c.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + node + ",reason=" + reason})
	require.NoError(t, err)
	return evs.Items
}

// waitEvent waits for one Event of reason on node and returns it.
func waitEvent(t *testing.T, h *harness, node, reason string) corev1.Event {
	t.Helper()
	var got []corev1.Event
	require.Eventually(t, func() bool { got = events(t, h, node, reason); return len(got) > 0 },
		10*time.Second, 50*time.Millisecond, "no %s Event on %s", reason, node)
	return got[0]
}
