package testenv

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/drain"
)

var cluster *Cluster

func TestMain(m *testing.M) { Main(m, &cluster) }

func drainHelper(ctx context.Context, c *Cluster) *drain.Helper {
	return &drain.Helper{
		Ctx:                  ctx,
		Client:               c.Client,
		GracePeriodSeconds:   -1, // the pod's own grace period, as kubectl does
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   true,
		Timeout:              60 * time.Second,
		EvictErrorRetryDelay: 200 * time.Millisecond,
		Out:                  io.Discard,
		ErrOut:               io.Discard,
	}
}

func waitRunning(t *testing.T, c *Cluster, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	require.Eventually(t, func() bool {
		var err error
		pods, err = c.RunningPods(context.Background(), ns, selector)
		return err == nil && len(pods) == n
	}, 60*time.Second, 50*time.Millisecond, "want %d running pods %s, have: %s", n, selector, func() string { return Describe(pods) })
	return pods
}

func TestDeploymentRunsOnSimulatedNodes(t *testing.T) {
	c := RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "run", 2)
	ns := c.Namespace(t)
	c.CreateDeployment(t, DeploymentSpec{Namespace: ns, Name: "web", Group: "run", Replicas: 4})

	pods := waitRunning(t, c, ns, "app=web", 4)
	for _, p := range pods {
		assert.Contains(t, nodes, p.Spec.NodeName, "pod %s scheduled outside the test's nodes", p.Name)
	}
}

func TestCordonAndEvictMovesPods(t *testing.T) {
	c := RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "evict", 3)
	ns := c.Namespace(t)
	c.CreateDeployment(t, DeploymentSpec{Namespace: ns, Name: "web", Group: "evict", Replicas: 6, TerminationSeconds: 1})
	running := waitRunning(t, c, ns, "app=web", 6)

	ctx := context.Background()
	target := running[0].Spec.NodeName
	assert.Contains(t, nodes, target)

	h := drainHelper(ctx, c)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, drain.RunCordonOrUncordon(h, node, true))
	require.NoError(t, drain.RunNodeDrain(h, target))

	left, err := c.PodsOnNode(ctx, ns, target)
	require.NoError(t, err)
	assert.Empty(t, left, "pods still on the drained node")
	pods := waitRunning(t, c, ns, "app=web", 6)
	for _, p := range pods {
		assert.NotEqual(t, target, p.Spec.NodeName, "pod %s rescheduled onto the cordoned node", p.Name)
	}
	node, err = c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, node.Spec.Unschedulable, "node not cordoned")
}

func TestPodDisruptionBudgetBlocksEviction(t *testing.T) {
	c := RequireCluster(t, cluster)
	c.AddNodes(t, "pdb", 2)
	ns := c.Namespace(t)
	c.CreateDeployment(t, DeploymentSpec{Namespace: ns, Name: "db", Group: "pdb", Replicas: 2})
	pods := waitRunning(t, c, ns, "app=db", 2)

	ctx := context.Background()
	minAvailable := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		},
	}
	_, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	require.NoError(t, err)
	waitDisruptionsAllowed(t, c, ns, "db", 0, 2)

	h := drainHelper(ctx, c)
	err = h.EvictPod(pods[0], policyv1.SchemeGroupVersion)
	require.Error(t, err, "eviction allowed despite a PodDisruptionBudget allowing 0 disruptions")
	assert.True(t, apierrors.IsTooManyRequests(err), "want 429 from the PDB, got %v", err)

	pdb, err = c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "db", metav1.GetOptions{})
	require.NoError(t, err)
	one := intstr.FromInt32(1)
	pdb.Spec.MinAvailable = &one
	_, err = c.Client.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitDisruptionsAllowed(t, c, ns, "db", 1, 2)
	require.NoError(t, h.EvictPod(pods[0], policyv1.SchemeGroupVersion), "eviction refused although the PDB allows one")
}

func waitDisruptionsAllowed(t *testing.T, c *Cluster, ns, name string, allowed, healthy int32) {
	t.Helper()
	var last policyv1.PodDisruptionBudgetStatus
	require.Eventually(t, func() bool {
		pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = pdb.Status
		return pdb.Status.ObservedGeneration == pdb.Generation &&
			pdb.Status.DisruptionsAllowed == allowed && pdb.Status.CurrentHealthy == healthy
	}, 30*time.Second, 50*time.Millisecond, "PDB status never reached allowed=%d healthy=%d: %+v", allowed, healthy, &last)
}

// The simulated kubelet finishes a deletion when the pod's grace period ends, or after the
// duration in TerminateAfterAnnotation: drains take the time they take on a real node.
// (kwok's delay is until metadata.deletionTimestamp, which has whole seconds.)
func TestPodTerminationTakesItsTime(t *testing.T) {
	c := RequireCluster(t, cluster)
	c.AddNodes(t, "term", 1)
	ns := c.Namespace(t)
	ctx := context.Background()
	pod := func(name string, grace int64, annotations map[string]string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{GroupLabel: "term"},
				TerminationGracePeriodSeconds: &grace,
				Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
			},
		}
		_, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	pod("graceful", 2, nil)
	pod("quick", 600, map[string]string{TerminateAfterAnnotation: "300ms"})
	require.Eventually(t, func() bool {
		pods, err := c.RunningPods(ctx, ns, "")
		return err == nil && len(pods) == 2
	}, 30*time.Second, 50*time.Millisecond)
	gone := func(name string) bool {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	deleted := time.Now()
	for _, name := range []string{"graceful", "quick"} {
		require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool { return gone("quick") }, 10*time.Second, 20*time.Millisecond,
		"the annotation's 300ms did not override a 600 s grace period")
	// deletionTimestamp has a resolution of one second, so a 2 s grace period ends 1 to 2 s later.
	Never(t, func() bool { return gone("graceful") && time.Since(deleted) < 900*time.Millisecond },
		time.Until(deleted.Add(900*time.Millisecond)), 20*time.Millisecond, "pod went before its grace period")
	require.Eventually(t, func() bool { return gone("graceful") }, 15*time.Second, 20*time.Millisecond)
	t.Logf("graceful pod gone %s after its deletion", time.Since(deleted).Round(10*time.Millisecond))
}
