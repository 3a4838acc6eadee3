package volumes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
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
	assert.Never(t, func() bool { return testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultSucceeded)) != 1 },
		1500*time.Millisecond, 100*time.Millisecond, "drained once")
	assert.Len(t, pods(), 1)
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.OrphanedPVCs.WithLabelValues("drained")))
	assert.Empty(t, drainedLabel(t, c, ns, "data-web-0"), "claims in use are left alone")

	scale(t, c, ns, "web", 3)
	require.Eventually(t, func() bool { return drainedLabel(t, c, ns, "data-web-2") == "" }, 30*time.Second, 50*time.Millisecond,
		"the PVC in use again loses its label")
	assert.Equal(t, 1, g.events.count("Normal InUseAgain PersistentVolumeClaim "+ns+"/data-web-2"), g.events)
	waitRunning(t, c, ns, "web", 3)
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
	assert.Equal(t, 1, g.events.count("Normal DrainedOrphanDeleted StatefulSet "+ns+"/db"), g.events)
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
	assert.Never(t, func() bool { return g.events.count("InvalidDrainerTemplate") > 1 }, time.Second, 100*time.Millisecond, "reported once")
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.OrphanedPVCs.WithLabelValues("pending")))
	assert.Empty(t, drainerPods(t, c, ns))
}
