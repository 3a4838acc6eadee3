package volumes

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

func volumeAttachment(name, node, pv string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "driver.longhorn.io", NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}}
}

// attachedLonghornVolume is a Longhorn volume attached to node, as Longhorn's volume controller
// writes it (status.state attached, status.currentNodeID).
func attachedLonghornVolume(name, node, pvcNS, pvcName string) *unstructured.Unstructured {
	v := lhVolume(name, 2, "attached", pvcNS, pvcName)
	_ = unstructured.SetNestedField(v.Object, node, "status", "currentNodeID")
	return v
}

type detachFixture struct {
	g   *Gate
	now time.Time
	ev  *events
}

func newDetachFixture(t *testing.T, timeout time.Duration, objs ...*unstructured.Unstructured) *detachFixture {
	f := &detachFixture{now: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), ev: &events{}}
	f.g = offlineGate(t, PolicyWait, []*corev1.Node{{ObjectMeta: metaName("a")}, {ObjectMeta: metaName("b")}}, objs...)
	f.g.cfg.Now, f.g.cfg.DetachTimeout, f.g.cfg.Recorder = func() time.Time { return f.now }, timeout, recorder{f.ev}
	return f
}

func (f *detachFixture) check(t *testing.T, node string, opts coordinator.GateOptions) coordinator.GateResult {
	t.Helper()
	r, err := f.g.Check(context.Background(), node, opts)
	require.NoError(t, err)
	return r
}

// A volume still attached to the node blocks COMPLETE (the check after eviction), not the check
// before eviction, and only on its node.
func TestStillAttachedBlocksTheCheckAfterEviction(t *testing.T) {
	f := newDetachFixture(t, 0)
	require.NoError(t, f.g.vaIndex.Add(volumeAttachment("csi-1", "a", "pv-1")))
	require.NoError(t, f.g.pvIndex.Add(&corev1.PersistentVolume{ObjectMeta: metaName("pv-1"),
		Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "shop", Name: "data-0"}}}))

	assert.True(t, f.check(t, "a", beforeEviction).Safe, "pods still run before eviction: their volumes are attached")
	r := f.check(t, "a", afterEviction)
	require.False(t, r.Safe)
	require.Len(t, r.Blockers, 1)
	assert.Equal(t, nodedrain.Blocker{Kind: nodedrain.BlockerVolume, Namespace: "shop", Name: "pv-1",
		Reason: "attached volume (PVC shop/data-0): still attached to this node (VolumeAttachment csi-1); waiting for it to detach"}, r.Blockers[0])
	assert.True(t, f.check(t, "b", afterEviction).Safe, "another node's attachments do not concern it")

	f.now = f.now.Add(24 * time.Hour)
	assert.False(t, f.check(t, "a", afterEviction).Safe, "--detach-timeout 0: no limit")
	require.NoError(t, f.g.vaIndex.Delete(volumeAttachment("csi-1", "a", "pv-1")))
	assert.True(t, f.check(t, "a", afterEviction).Safe, "detached")
}

// The wait is bounded: after --detach-timeout the volumes are reported without blocking, with
// one warning Event; a new drain of the node starts a new wait.
func TestStillAttachedAfterTheTimeoutIsOnlyReported(t *testing.T) {
	f := newDetachFixture(t, 5*time.Minute, attachedLonghornVolume("vol-1", "a", "shop", "data-1"))
	r := f.check(t, "a", afterEviction)
	require.False(t, r.Safe)
	require.Len(t, r.Blockers, 1)
	assert.Contains(t, r.Blockers[0].Reason, "still attached to this node (Longhorn volume attached here); waiting for it to detach, at most 5m0s")

	f.now = f.now.Add(5*time.Minute - time.Second)
	assert.False(t, f.check(t, "a", afterEviction).Safe)
	f.now = f.now.Add(time.Second)
	r = f.check(t, "a", afterEviction)
	assert.True(t, r.Safe)
	require.Len(t, r.Blockers, 1)
	assert.Contains(t, r.Blockers[0].Reason, "not blocking: still attached to this node (Longhorn volume attached here) after --detach-timeout 5m0s")
	f.check(t, "a", afterEviction)
	assert.Equal(t, 1, f.ev.count("VolumesStillAttached"), "one warning, not one per check:\n%s", f.ev)

	require.NoError(t, f.g.Release(context.Background(), "a"))
	assert.False(t, f.check(t, "a", afterEviction).Safe, "the next drain waits again")
}

// Each eviction round waits for its own volumes: after a check before eviction (the drain
// cordoned again after an uncordon and evicts again), the detach wait starts afresh (review:
// the second round's volumes were let go at once as "after --detach-timeout").
func TestStillAttachedWaitStartsAgainWithEachEvictionRound(t *testing.T) {
	f := newDetachFixture(t, 5*time.Minute)
	require.NoError(t, f.g.vaIndex.Add(volumeAttachment("csi-1", "a", "pv-1")))
	require.False(t, f.check(t, "a", afterEviction).Safe)
	f.now = f.now.Add(5 * time.Minute)
	require.True(t, f.check(t, "a", afterEviction).Safe, "timed out: only reported")

	f.check(t, "a", beforeEviction) // the next round
	require.NoError(t, f.g.vaIndex.Add(volumeAttachment("csi-2", "a", "pv-2")))
	f.now = f.now.Add(time.Minute)
	r := f.check(t, "a", afterEviction)
	assert.False(t, r.Safe, "the second round waits for its volumes: %v", r.Blockers)
}

// Volumes of pods the drain leaves on the node (DaemonSet and static pods) stay attached by
// design; a Longhorn volume with a VolumeAttachment is listed once.
func TestStillAttachedSkipsPodsThatStayAndCountsOnce(t *testing.T) {
	f := newDetachFixture(t, 0, attachedLonghornVolume("pv-ds", "a", "kube-system", "logs"),
		attachedLonghornVolume("pv-app", "a", "shop", "data-0"))
	for _, va := range []*storagev1.VolumeAttachment{volumeAttachment("csi-ds", "a", "pv-ds"), volumeAttachment("csi-app", "a", "pv-app")} {
		require.NoError(t, f.g.vaIndex.Add(va))
	}
	for pv, claim := range map[string][2]string{"pv-ds": {"kube-system", "logs"}, "pv-app": {"shop", "data-0"}} {
		require.NoError(t, f.g.pvIndex.Add(&corev1.PersistentVolume{ObjectMeta: metaName(pv),
			Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: claim[0], Name: claim[1]}}}))
	}
	ds := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "logger-x",
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "logger", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "a", Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "logs"}}}}}}
	trimmed, err := trimPod(ds)
	require.NoError(t, err)
	require.NoError(t, f.g.podIndex.Add(trimmed))

	r := f.check(t, "a", afterEviction)
	require.Len(t, r.Blockers, 1, "%v", r.Blockers)
	assert.Equal(t, "pv-app", r.Blockers[0].Name)
	assert.Contains(t, r.Blockers[0].Reason, "VolumeAttachment csi-app")
}

// On the local cluster: a VolumeAttachment that lingers after eviction holds COMPLETE back until
// it is removed, with the attachment named in the status.
func TestCoordinatorWaitsForALingeringVolumeAttachment(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "e2e-detach", 2)
	g := startGate(t, c, func(cfg *Config) { cfg.DetachTimeout = 0 })
	ctx := context.Background()
	va, err := c.Client.StorageV1().VolumeAttachments().Create(ctx, volumeAttachment("csi-e2e-detach", nodes[0], "pv-e2e-detach"), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}) })
	w := startDrainWorld(t, c, "e2e-detach", g, func(cfg *coordinator.Config) { cfg.Limits.GateRecheck = time.Hour })

	w.request(nodes[0])
	st := w.waitFor(nodes[0], "CORDONED, waiting for the attachment", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1 && s.Blockers[0].Name == "pv-e2e-detach"
	})
	assert.Contains(t, st.Blockers[0].Reason, "still attached to this node (VolumeAttachment csi-e2e-detach)")
	assert.Contains(t, st.Message, "1 volume(s)")

	require.NoError(t, c.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}))
	st = w.waitFor(nodes[0], "COMPLETE once detached (seen by the gate's informer: the recheck timer is an hour)",
		func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	assert.Empty(t, st.Blockers)
}
