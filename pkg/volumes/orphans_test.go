package volumes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// runGate runs g.Run until the test ends.
func runGate(t *testing.T, g *gateFixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// statefulSetWithLocalPVs creates a StatefulSet whose claims data-<name>-<i> bind to local PVs
// on nodes[i], and waits until its pods run.
func statefulSetWithLocalPVs(t *testing.T, c *testenv.Cluster, ns, name, group string, nodes []string, replicas int32, annotations map[string]string) {
	t.Helper()
	for i, node := range nodes {
		claim := fmt.Sprintf("data-%s-%d", name, i)
		createLocalPV(t, c, "pv-"+ns+"-"+claim, node, ns, claim)
	}
	sts := statefulSet(ns, name, replicas, "", group)
	sts.Annotations = annotations
	_, err := c.Client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{})
	require.NoError(t, err)
	waitRunning(t, c, ns, name, int(replicas))
}

func waitRunning(t *testing.T, c *testenv.Cluster, ns, name string, n int) {
	t.Helper()
	var pods []corev1.Pod
	require.Eventually(t, func() bool {
		var err error
		pods, err = c.RunningPods(context.Background(), ns, "app="+name)
		return err == nil && len(pods) == n
	}, 60*time.Second, 50*time.Millisecond, "pods of %s: %s", name, testenv.Describe(pods))
}

func scale(t *testing.T, c *testenv.Cluster, ns, name string, replicas int) {
	t.Helper()
	_, err := c.Client.AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{})
	require.NoError(t, err)
}

func drainedLabel(t *testing.T, c *testenv.Cluster, ns, name string) string {
	t.Helper()
	return getPVC(t, c, ns, name).Labels[DrainStatusLabel]
}

func TestOrphanedPVCDrainedOnceAndUnlabelledWhenUsedAgain(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "orphan", 3)
	ns := c.Namespace(t)
	pods := watchDrainerPods(t, c, ns)
	g := startGate(t, c, nil)
	runGate(t, g)
	statefulSetWithLocalPVs(t, c, ns, "web", "orphan", nodes, 3, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	assert.Empty(t, pods(), "no orphans, no drainer")

	scale(t, c, ns, "web", 2)
	require.Eventually(t, func() bool { return drainedLabel(t, c, ns, "data-web-2") == DrainStatusDrained }, 30*time.Second, 50*time.Millisecond,
		"the orphan is drained; events:\n%s", g.events)
	seen := pods()
	require.Len(t, seen, 1)
	for _, pod := range seen {
		assert.Equal(t, nodes[2], pod.Spec.NodeName, "the drainer runs where the orphan's data is")
	}
	// The label lands before the metrics are updated (clean-clone make test saw them at 0).
	succeeded := func() float64 { return testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultSucceeded)) }
	require.Eventually(t, func() bool { return succeeded() == 1 }, 10*time.Second, 20*time.Millisecond, "the drainer's success is counted")
	testenv.Never(t, func() bool { return succeeded() != 1 }, 1500*time.Millisecond, 100*time.Millisecond, "drained once")
	assert.Len(t, pods(), 1)
	require.Eventually(t, func() bool { return testutil.ToFloat64(g.metrics.OrphanedPVCs.WithLabelValues("drained")) == 1 },
		10*time.Second, 20*time.Millisecond, "the orphan counted as drained")
	assert.Empty(t, drainedLabel(t, c, ns, "data-web-0"), "claims in use are left alone")

	scale(t, c, ns, "web", 3)
	require.Eventually(t, func() bool { return drainedLabel(t, c, ns, "data-web-2") == "" }, 30*time.Second, 50*time.Millisecond,
		"the PVC in use again loses its label")
	// The Event follows the label's removal.
	require.Eventually(t, func() bool { return g.events.count("Normal InUseAgain PersistentVolumeClaim "+ns+"/data-web-2") == 1 },
		10*time.Second, 50*time.Millisecond, "events:\n%s", g.events)
	waitRunning(t, c, ns, "web", 3)
	assert.Equal(t, 1, g.events.count("Normal InUseAgain PersistentVolumeClaim "+ns+"/data-web-2"), "once: %s", g.events)
	assert.Equal(t, 0.0, testutil.ToFloat64(g.metrics.OrphanedPVCs.WithLabelValues("drained")))
}

func TestDrainedOrphanDeletedWhenAsked(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "orphan-del", 2)
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	runGate(t, g)
	statefulSetWithLocalPVs(t, c, ns, "db", "orphan-del", nodes, 2,
		map[string]string{DrainerTemplateAnnotation: jobSpecTemplate, DeleteDrainedOrphansAnnotation: "true"})
	scale(t, c, ns, "db", 1)
	require.Eventually(t, func() bool {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data-db-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)
	}, 30*time.Second, 50*time.Millisecond, "the drained orphan is deleted; events:\n%s", g.events)
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultSucceeded)))
	require.Eventually(t, func() bool { return g.events.count("Normal DrainedOrphanDeleted StatefulSet "+ns+"/db") == 1 },
		10*time.Second, 50*time.Millisecond, "the Event follows the deletion; events:\n%s", g.events)
	assert.Empty(t, drainedLabel(t, c, ns, "data-db-0"))
}

func TestOrphanWithBadTemplateIsReportedOnTheStatefulSet(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "orphan-bad", 2)
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	runGate(t, g)
	statefulSetWithLocalPVs(t, c, ns, "q", "orphan-bad", nodes, 2, map[string]string{DrainerTemplateAnnotation: `{"template":{"spec":{}}}`})
	scale(t, c, ns, "q", 1)
	require.Eventually(t, func() bool {
		return g.events.count("Warning InvalidDrainerTemplate StatefulSet "+ns+"/q", "template.spec.containers is empty") == 1
	}, 30*time.Second, 50*time.Millisecond, "events:\n%s", g.events)
	testenv.Never(t, func() bool { return g.events.count("InvalidDrainerTemplate") > 1 }, time.Second, 100*time.Millisecond, "reported once")
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.OrphanedPVCs.WithLabelValues("pending")))
	assert.Empty(t, drainerPods(t, c, ns))
}

func TestOrdinalLive(t *testing.T) {
	withStart := func(replicas, start int32) *appsv1.StatefulSet {
		sts := statefulSet("shop", "web", replicas, "")
		sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
		return sts
	}
	noReplicas := statefulSet("shop", "web", 0, "")
	noReplicas.Spec.Replicas = nil
	tests := []struct {
		name       string
		sts        *appsv1.StatefulSet
		live, dead []int
	}{
		{name: "start 0", sts: withStart(2, 0), live: []int{0, 1}, dead: []int{2, 3}},
		{name: "start 3", sts: withStart(2, 3), live: []int{3, 4}, dead: []int{0, 1, 2, 5, 6}},
		{name: "replicas 0", sts: statefulSet("shop", "web", 0, ""), dead: []int{0, 1}},
		{name: "replicas 0 from start 3", sts: withStart(0, 3), dead: []int{2, 3, 4}},
		{name: "nil ordinals", sts: statefulSet("shop", "web", 2, ""), live: []int{0, 1}, dead: []int{2}},
		{name: "nil replicas means 1", sts: noReplicas, live: []int{0}, dead: []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, ord := range tt.live {
				assert.True(t, ordinalLive(tt.sts, ord), "ordinal %d is a pod's", ord)
			}
			for _, ord := range tt.dead {
				assert.False(t, ordinalLive(tt.sts, ord), "ordinal %d is an orphan's", ord)
			}
		})
	}
}

// TestStartOrdinalLiveClaimIsNotAnOrphan is the regression test of orphans of a StatefulSet with
// spec.ordinals.start: its pods are [start, start+replicas), so the claim of one of them whose
// pod was just evicted (mounted by nothing at that instant) is in use, not an orphan to drain and
// delete; claims outside that range, below it too, are orphans.
func TestStartOrdinalLiveClaimIsNotAnOrphan(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "ordinals", 3)
	ns := c.Namespace(t)
	ctx := context.Background()
	g := startGate(t, c, nil)
	runGate(t, g)
	// Pods web-3, web-4 and web-5, their data on ordinals-0, -1 and -2; drained orphans are
	// deleted, so a live claim taken for one would be lost.
	for i, node := range nodes {
		claim := fmt.Sprintf("data-web-%d", 3+i)
		createLocalPV(t, c, "pv-"+ns+"-"+claim, node, ns, claim)
	}
	sts := statefulSet(ns, "web", 3, jobSpecTemplate, "ordinals")
	sts.Annotations[DeleteDrainedOrphansAnnotation] = "true"
	sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 3}
	_, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	require.NoError(t, err)
	waitRunning(t, c, ns, "web", 3)
	// A claim left from before the ordinals started at 3.
	createLocalVolume(t, c, ns, "data-web-1", nodes[2], nil)

	// A drain cordons ordinals-0 and evicts web-3: its new pod cannot be scheduled (its data is
	// on the cordoned node), so nothing mounts data-web-3 while the node is down.
	cordon(t, c, nodes[0], true)
	evicted, err := c.Client.CoreV1().Pods(ns).Get(ctx, "web-3", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-3"}}))
	require.Eventually(t, func() bool {
		pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, "web-3", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pod.UID != evicted.UID && pod.Spec.NodeName == "")
	}, 30*time.Second, 50*time.Millisecond, "web-3 is evicted and its new pod waits for its node")
	scale(t, c, ns, "web", 2) // web-5 goes: data-web-5 is an orphan now

	gone := func(name string) bool {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)
	}
	require.Eventually(t, func() bool { return gone("data-web-5") && gone("data-web-1") }, 30*time.Second, 50*time.Millisecond,
		"the orphans above and below the ordinals are drained and deleted; events:\n%s", g.events)
	for _, live := range []string{"data-web-3", "data-web-4"} {
		assert.Zero(t, g.events.count("DrainerStarted PersistentVolumeClaim "+ns+"/"+live), "no drainer for %s: %s", live, g.events)
		pvc := getPVC(t, c, ns, live)
		assert.Nil(t, pvc.DeletionTimestamp, live)
		assert.Empty(t, pvc.Labels[DrainStatusLabel], live)
	}
	// The Event follows the deletion.
	require.Eventually(t, func() bool { return g.events.count("Normal DrainedOrphanDeleted StatefulSet "+ns+"/web") == 2 },
		10*time.Second, 50*time.Millisecond, "events:\n%s", g.events)
}
