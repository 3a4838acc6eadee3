package volumes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A decommission on the local cluster, through the coordinator and the real gate: a node with a
// Longhorn volume (volume policy wait) and a node-local PVC of each kind ends with its replicas
// replaced, its graceful PVC drained then deleted, its forced PVC deleted, the unannotated one
// kept (blocking) until the operator decides, the Node object deleted before COMPLETE, and the
// node's keys removed once the request is withdrawn.
func TestCoordinatorDecommissionsANode(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "e2e-retire", 3)
	ns := c.Namespace(t)
	drainers := watchDrainerPods(t, c, ns)
	g := startGate(t, c, nil)
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-retire-e2e", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	graceful := createLocalVolume(t, c, ns, "graceful", nodes[0], map[string]string{
		DecommissionAnnotation: DecommissionGraceful, DrainerTemplateAnnotation: jobSpecTemplate})
	force := createLocalVolume(t, c, ns, "force", nodes[0], map[string]string{DecommissionAnnotation: DecommissionForce})
	kept := createLocalVolume(t, c, ns, "kept", nodes[0], nil)
	off := startDrainWorld(t, c, "e2e-retire", g)
	off.RequestWithContext(t, nodes[0], "d-0", time.Now(), "decommission the old box")
	st := off.waitFor(nodes[0], "held while decommission is off", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, "--allow-decommission")
	})
	assert.Equal(t, coordinator.DecommissionOff, st.Message)
	// Another coordinator, on a bus of its own, allows them. The first stops: two coordinators
	// managing the same nodes from two buses is no configuration, and the first, finding on a
	// node it does not drain a cordon record of edgedrain's, would undo the second's cordon (a
	// cordon that landed late is undone so).
	off.stop()
	w := startDrainWorld(t, c, "e2e-retire", g, func(cfg *coordinator.Config) {
		cfg.AllowDecommission, cfg.Limits.DecommissionLinger = true, time.Second
	})

	w.RequestWithContext(t, nodes[0], "d-1", time.Now(), "decommission the old box")
	st = w.waitFor(nodes[0], "blocked by the unannotated PVC and the volume's replacement", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && strings.Contains(s.Message, "waiting") &&
			blockerNamed(s, "kept") != "" && blockerNamed(s, vol.name) != ""
	})
	assert.True(t, st.Decommission)
	assert.Contains(t, blockerNamed(st, "kept"), "would be lost with the decommissioned node")
	assert.Contains(t, blockerNamed(st, vol.name), "1 of 2 healthy on other nodes", "replicas are evicted though the policy is wait")
	requested, _, _ := unstructured.NestedBool(getLonghornNode(t, c, nodes[0]).Object, "spec", "evictionRequested")
	assert.True(t, requested, "Longhorn is asked to evict the node's replicas")

	// Longhorn places the replacement on the third node and detaches the volume from the first.
	vol.nodes = nodes[1:]
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	st = w.waitFor(nodes[0], "only the undecided PVC left", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1 && blockerNamed(s, vol.name) == ""
	})
	// Nothing is evicted or deleted while one PVC's fate is undecided.
	assert.Contains(t, blockerNamed(st, "kept"), "would be lost")
	testenv.Never(t, func() bool {
		return w.last(nodes[0]).Status == nodedrain.StatusComplete || pvcGone(c, ns, "kept", kept.UID) ||
			pvcGone(c, ns, "force", force.UID) || pvcGone(c, ns, "graceful", graceful.UID)
	}, time.Second, 50*time.Millisecond, "COMPLETE, or a PVC deleted, while one's data would be lost")
	_, err := c.Client.CoreV1().Nodes().Get(context.Background(), nodes[0], metav1.GetOptions{})
	require.NoError(t, err, "the Node is not deleted while something blocks")

	// The operator moves its data off too.
	_, err = c.Client.CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), "kept", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+DecommissionAnnotation+`":"graceful","`+DrainerTemplateAnnotation+`":`+
			jsonValue(jobSpecTemplate)+`}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	st = w.waitFor(nodes[0], "COMPLETE", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	assert.True(t, st.Decommission)
	assert.True(t, st.SlotReleased, "a node out of the cluster holds no slot")
	assert.Contains(t, st.Message, "Node object deleted")
	_, err = c.Client.CoreV1().Nodes().Get(context.Background(), nodes[0], metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the Node object is deleted before COMPLETE: %v", err)
	assert.True(t, pvcGone(c, ns, "kept", kept.UID), "drained, then deleted")
	assert.True(t, pvcGone(c, ns, "force", force.UID), "deleted once the pods were gone")
	assert.True(t, pvcGone(c, ns, "graceful", graceful.UID), "drained, then deleted")
	assert.Equal(t, 1, g.events.count("Normal Drained PersistentVolumeClaim "+ns+"/graceful"), g.events)
	assert.Len(t, drainers(), 2, "one drainer for each graceful PVC")
	assert.Equal(t, []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusStarting, nodedrain.StatusCordoned,
		nodedrain.StatusComplete}, w.History(nodes[0]))

	// The agent ran its command and withdraws: NOTREQUESTED names the request, then the node's
	// status goes from the bus.
	w.withdraw(nodes[0])
	st = w.waitFor(nodes[0], "the withdrawal answered", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusNotRequested })
	assert.Equal(t, "d-1", st.RequestID)
	require.Eventually(t, func() bool {
		_, _, err := w.Statuses.Get(context.Background(), nodes[0])
		return errors.Is(err, pubsub.ErrNotFound)
	}, 10*time.Second, 50*time.Millisecond, "the decommissioned node's status is removed")
	require.Eventually(t, func() bool {
		requested, _, _ := unstructured.NestedBool(getLonghornNode(t, c, nodes[0]).Object, "spec", "evictionRequested")
		return !requested
	}, 10*time.Second, 50*time.Millisecond, "the gate's eviction request is withdrawn with the request")
}

// blockerNamed returns the reason of st's blocker whose name or reason names name, or "".
func blockerNamed(st nodedrain.NodeDrainStatus, name string) string {
	for _, b := range st.Blockers {
		if b.Name == name || strings.Contains(b.Reason, "/"+name+")") {
			return b.Reason
		}
	}
	return ""
}
