package volumes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

var (
	decommissionBefore = coordinator.GateOptions{Decommission: true}
	decommissionAfter  = coordinator.GateOptions{Decommission: true, AfterEviction: true}
)

// blockerOf returns the reason of the blocker naming PVC ns/name, or "".
func blockerOf(r coordinator.GateResult, ns, name string) string {
	for _, b := range r.Blockers {
		if b.Namespace == ns && strings.Contains(b.Reason, "PVC "+ns+"/"+name+")") {
			return b.Reason
		}
	}
	return ""
}

func pvcGone(c *testenv.Cluster, ns, name string, uid types.UID) bool {
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && (pvc.UID != uid || pvc.DeletionTimestamp != nil))
}

// A decommission handles each node-local PVC by its annotation: graceful runs the drainer and
// then deletes it, force deletes it once the pods are gone, none blocks, saying the data would
// be lost; a reboot's drain waits for none of them before eviction.
func TestDecommissionNodeLocalVolumes(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "retire", 2)
	ns := c.Namespace(t)
	pods := watchDrainerPods(t, c, ns)
	g := startGate(t, c, nil)
	graceful := createLocalVolume(t, c, ns, "graceful", nodes[0], map[string]string{
		DecommissionAnnotation: DecommissionGraceful, DrainerTemplateAnnotation: jobSpecTemplate})
	force := createLocalVolume(t, c, ns, "force", nodes[0], map[string]string{DecommissionAnnotation: DecommissionForce})
	kept := createLocalVolume(t, c, ns, "kept", nodes[0], nil)
	odd := createLocalVolume(t, c, ns, "odd", nodes[0], map[string]string{DecommissionAnnotation: "yes"})
	cordon(t, c, nodes[0], true)

	assert.True(t, g.check(t, nodes[0], beforeEviction).Safe, "a reboot does not wait for node-local data before eviction")
	r := g.eventually(t, nodes[0], decommissionBefore, "the undecided PVCs block before eviction", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 2
	})
	assert.Contains(t, blockerOf(r, ns, "kept"), "would be lost with the decommissioned node")
	assert.Contains(t, blockerOf(r, ns, "kept"), DecommissionAnnotation+"=force")
	assert.Contains(t, blockerOf(r, ns, "odd"), `"yes": want graceful or force`)
	assert.False(t, pvcGone(c, ns, "force", force.UID), "nothing is deleted before the pods are gone")

	// After eviction: force goes at once, graceful once its drainer succeeded.
	g.eventually(t, nodes[0], decommissionAfter, "the forced PVC deleted", func(coordinator.GateResult) bool {
		return pvcGone(c, ns, "force", force.UID)
	})
	g.eventually(t, nodes[0], decommissionAfter, "the graceful PVC deleted after its drainer", func(coordinator.GateResult) bool {
		return pvcGone(c, ns, "graceful", graceful.UID)
	})
	assert.Equal(t, 1, g.events.count("Normal Drained PersistentVolumeClaim "+ns+"/graceful"), "its drainer succeeded first: %s", g.events)
	ran := pods()
	require.Len(t, ran, 1, "one drainer ran")
	for _, pod := range ran {
		assert.Equal(t, nodes[0], pod.Spec.NodeName, "the drainer runs on the node it drains")
		assert.Equal(t, "graceful", pod.Spec.Volumes[len(pod.Spec.Volumes)-1].PersistentVolumeClaim.ClaimName)
	}
	r = g.eventually(t, nodes[0], decommissionAfter, "only the unannotated and the invalid PVC left", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 2
	})
	assert.False(t, r.Safe)
	assert.False(t, pvcGone(c, ns, "kept", kept.UID), "a PVC without the annotation is never deleted")
	assert.False(t, pvcGone(c, ns, "odd", odd.UID), "nor one with an invalid value")
	assert.Equal(t, 1, g.events.count("Normal DecommissionDeleted PersistentVolumeClaim "+ns+"/force"), g.events)
	assert.Equal(t, 1, g.events.count("Normal DecommissionDeleted PersistentVolumeClaim "+ns+"/graceful"), g.events)

	// The operator decides: the data of these may go.
	for _, name := range []string{"kept", "odd"} {
		_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+DecommissionAnnotation+`":"force"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	g.eventually(t, nodes[0], decommissionAfter, "safe once every local PVC is gone", func(r coordinator.GateResult) bool { return r.Safe })
}

// A StatefulSet pod that waits, unscheduled, for a claim on the decommissioned node is deleted
// with the claim, so that the StatefulSet makes both again elsewhere.
func TestDecommissionRestartsAStatefulSetPodWaitingForItsClaim(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "retire-sts", 2)
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	cordon(t, c, nodes[0], true)
	old := createLocalVolume(t, c, ns, "data-web-0", nodes[0], map[string]string{DecommissionAnnotation: DecommissionForce})
	_, err := c.Client.AppsV1().StatefulSets(ns).Create(context.Background(), statefulSet(ns, "web", 1, ""), metav1.CreateOptions{})
	require.NoError(t, err)
	var waiting *corev1.Pod
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "web-0", metav1.GetOptions{})
		waiting = p
		return err == nil && p.Spec.NodeName == ""
	}, 30*time.Second, 50*time.Millisecond, "the StatefulSet's pod waits for its claim on the cordoned node")

	g.eventually(t, nodes[0], decommissionAfter, "the claim deleted", func(coordinator.GateResult) bool {
		return pvcGone(c, ns, "data-web-0", old.UID)
	})
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "web-0", metav1.GetOptions{})
		if err != nil || p.UID == waiting.UID {
			return false
		}
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data-web-0", metav1.GetOptions{})
		return err == nil && pvc.UID != old.UID
	}, 30*time.Second, 50*time.Millisecond, "the StatefulSet made the pod and a new claim again")
}

// A decommission evicts the node's Longhorn replicas and waits for their replacements whatever
// the volume policy says: here allow, under which a reboot's drain waits for nothing.
func TestDecommissionEvictsReplicasWhateverThePolicy(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "retire-lh", 3)
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyAllow })
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-retire", nodes: nodes[:1], state: []replicaState{"healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)

	g.eventually(t, nodes[0], beforeEviction, "allow lets a reboot go with the last copy", func(r coordinator.GateResult) bool {
		return r.Safe && len(r.Blockers) == 1
	})
	requested, _, _ := unstructured.NestedBool(getLonghornNode(t, c, nodes[0]).Object, "spec", "evictionRequested")
	assert.False(t, requested, "allow asks Longhorn for nothing")

	r := g.eventually(t, nodes[0], decommissionBefore, "a decommission waits for a copy elsewhere", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 1
	})
	assert.Contains(t, r.Blockers[0].Reason, "last healthy replica")
	requested, _, _ = unstructured.NestedBool(getLonghornNode(t, c, nodes[0]).Object, "spec", "evictionRequested")
	assert.True(t, requested, "Longhorn is asked to evict the node's replicas")

	// Longhorn rebuilds the volume's one replica on another node, then removes the evicted one.
	vol.nodes, vol.state = nodes[1:2], []replicaState{"healthy"}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], decommissionAfter, "safe once replaced", func(r coordinator.GateResult) bool { return r.Safe })
}

// The pre-flight of a decommission says what its drain would do with each node-local PVC, and
// blocks on those whose data would be lost; a reboot's pre-flight says nothing of them.
func TestPredictDecommission(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "predict-retire", 2)
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	claims := []*corev1.PersistentVolumeClaim{
		createLocalVolume(t, c, ns, "graceful", nodes[0], map[string]string{
			DecommissionAnnotation: DecommissionGraceful, DrainerTemplateAnnotation: jobSpecTemplate}),
		createLocalVolume(t, c, ns, "force", nodes[0], map[string]string{DecommissionAnnotation: DecommissionForce}),
		createLocalVolume(t, c, ns, "kept", nodes[0], nil),
		createLocalVolume(t, c, ns, "nodrainer", nodes[0], map[string]string{DecommissionAnnotation: DecommissionGraceful}),
	}

	var p Prediction
	require.Eventually(t, func() bool {
		var err error
		p, err = g.PredictFor(context.Background(), nodes[0], decommissionBefore)
		return err == nil && len(p.Blockers) == 2
	}, 30*time.Second, 50*time.Millisecond, "the two undecided PVCs predicted")
	reasons := map[string]string{}
	for _, b := range p.Blockers {
		reasons[b.Name] = b.Reason
	}
	assert.Contains(t, reasons["pv-"+ns+"-kept"], "would be lost")
	assert.Contains(t, reasons["pv-"+ns+"-nodrainer"], "needs a drainer")
	notes := strings.Join(p.Notes, "\n")
	assert.Contains(t, notes, "PVC "+ns+"/force (local volume pv-"+ns+"-force): would be deleted once the node's pods are gone")
	assert.Contains(t, notes, "PVC "+ns+"/graceful (local volume pv-"+ns+"-graceful): drainer Job")
	assert.Contains(t, notes, "then the PVC would be deleted")

	reboot, err := g.Predict(context.Background(), nodes[0])
	require.NoError(t, err)
	assert.Empty(t, reboot.Blockers, "a reboot leaves node-local data where it is")
	for _, pvc := range claims {
		assert.False(t, pvcGone(c, ns, pvc.Name, pvc.UID), "a prediction deletes nothing")
	}
	assert.Empty(t, drainerPods(t, c, ns), "a prediction runs no drainer")
}
