package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func histogramCount(t *testing.T, m *Metrics, requester, result string) uint64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(m.CompletionTime))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["requester"] == requester && labels["result"] == result {
				return metric.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func TestHappyPathDrainsAndUncordons(t *testing.T) {
	h := newHarness(t, "happy", 3)
	target := h.deploy("web", 6, 1)
	cordons := h.countCordons(target)
	cfg := h.config(h.c.Client)
	cfg.Recorder = h.eventRecorder()
	h.run(cfg)

	h.request(target, "r1", time.Now())
	st := h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	assert.Equal(t, []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusStarting,
		nodedrain.StatusCordoned, nodedrain.StatusComplete}, h.history(target))
	assert.Equal(t, "r1", st.RequestID)
	assert.True(t, st.CordonedByUs)
	assert.Empty(t, podsLeft(h, target), "pods left on the drained node")
	h.waitRunning("web", 6) // all six run again, elsewhere (the node is cordoned)
	assert.Empty(t, podsLeft(h, target))
	node := h.node(target)
	assert.True(t, node.Spec.Unschedulable)
	assert.Contains(t, node.Annotations, CordonAnnotation)
	assert.Equal(t, uint64(1), histogramCount(t, cfg.Metrics, "DEVICEOP", "COMPLETE"))
	assert.Equal(t, float64(nodedrain.StatusComplete), testutil.ToFloat64(cfg.Metrics.Status.WithLabelValues(target)))
	assert.Equal(t, float64(1), testutil.ToFloat64(cfg.Metrics.CordonedByEdgedrain.WithLabelValues(target)))
	require.Eventually(t, func() bool {
		evs, err := h.c.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + target + ",reason=DrainCOMPLETE"})
		return err == nil && len(evs.Items) == 1
	}, 10*time.Second, 50*time.Millisecond, "no DrainCOMPLETE event on the node")
	evs, err := h.c.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + target + ",reason=DrainCORDONED"})
	require.NoError(t, err)
	require.Len(t, evs.Items, 1)
	assert.Equal(t, int32(1), evs.Items[0].Count, "one Event per transition, not one per progress update")

	// The node is back: the agent withdraws the request.
	h.withdraw(target)
	h.waitFor(target, 10*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	node = h.node(target)
	assert.False(t, node.Spec.Unschedulable, "node left cordoned")
	assert.Equal(t, float64(0), testutil.ToFloat64(cfg.Metrics.CordonedByEdgedrain.WithLabelValues(target)))
	assert.NotContains(t, node.Annotations, CordonAnnotation)
	assert.Equal(t, 1, cordons())
}

func TestPDBFailsTheDrainNamingIt(t *testing.T) {
	h := newHarness(t, "pdb", 3)
	target := h.deploy("db", 3, 1)
	h.pdbAllowingNone("db-pdb", "db", 3)
	cfg := h.config(h.c.Client)
	cfg.Limits.DrainAttemptTimeout = time.Second
	h.run(cfg)

	h.request(target, "r1", time.Now())
	h.waitStatus(target, nodedrain.StatusDrainRetrying, 30*time.Second)
	st := h.waitStatus(target, nodedrain.StatusFailedDrain, 60*time.Second)
	assert.Contains(t, st.Message, "after 5 attempts")
	require.NotEmpty(t, st.Blockers)
	assert.Equal(t, nodedrain.BlockerPod, st.Blockers[0].Kind)
	assert.Contains(t, st.Blockers[0].Reason, "PodDisruptionBudget "+h.ns+"/db-pdb allows 0 disruptions")
	assert.Equal(t, 5, st.Attempt)
	assert.True(t, h.node(target).Spec.Unschedulable, "a failed drain leaves the node cordoned")
	assert.Equal(t, float64(5), testutil.ToFloat64(cfg.Metrics.EvictionAttempts.WithLabelValues("error")))
	assert.NotEmpty(t, podsLeft(h, target), "the PDB kept its pod")
	assert.Equal(t, float64(len(st.Blockers)), testutil.ToFloat64(cfg.Metrics.BlockedPods.WithLabelValues(target)))
}

// restrictedClient returns a client for a user RBAC lets do everything the coordinator needs but
// patch nodes.
func restrictedClient(t *testing.T, h *harness) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	name := "edgedrain-no-patch-" + h.group
	_, err := h.c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = h.c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = h.c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = h.c.Client.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	rc, err := h.c.UserConfig(name)
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	return client
}

func TestCordonForbiddenFailsAfterAttempts(t *testing.T) {
	h := newHarness(t, "rbac", 2)
	cfg := h.config(restrictedClient(t, h))
	h.run(cfg)
	h.request(h.nodes[0], "r1", time.Now())
	st := h.waitStatus(h.nodes[0], nodedrain.StatusFailedCordon, 30*time.Second)
	assert.Contains(t, st.Message, "after 10 attempts")
	assert.Contains(t, st.Message, "forbidden")
	assert.Equal(t, float64(10), testutil.ToFloat64(cfg.Metrics.CordonAttempts.WithLabelValues("error")))
	assert.False(t, h.node(h.nodes[0]).Spec.Unschedulable)
	assert.Equal(t, []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusStarting, nodedrain.StatusFailedCordon},
		h.history(h.nodes[0]))
}

func TestWithdrawnMidEvictionStopsAndUncordons(t *testing.T) {
	h := newHarness(t, "withdraw", 3)
	target := h.deploy("slow", 4, 60) // pods take a minute to terminate
	h.run(h.config(h.c.Client))
	h.request(target, "r1", time.Now())
	h.waitFor(target, 30*time.Second, "evicting", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && strings.HasPrefix(s.Message, "evicting")
	})
	withdrawnAt := time.Now()
	h.withdraw(target)
	h.waitFor(target, 5*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	assert.Less(t, time.Since(withdrawnAt), 5*time.Second)
	assert.False(t, h.node(target).Spec.Unschedulable)
	// Nothing resumes the cancelled drain.
	testenv.Never(t, func() bool {
		st, _ := h.last(target)
		return st.Status != nodedrain.StatusNotRequested
	}, time.Second, 50*time.Millisecond)
}

func TestOperatorCordonedNodeStaysCordoned(t *testing.T) {
	h := newHarness(t, "operator", 2)
	ctx := context.Background()
	_, err := h.c.Client.CoreV1().Nodes().Patch(ctx, h.nodes[0], types.MergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	h.run(h.config(h.c.Client))
	h.request(h.nodes[0], "r1", time.Now())
	st := h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 30*time.Second)
	assert.False(t, st.CordonedByUs)
	h.withdraw(h.nodes[0])
	h.waitStatus(h.nodes[0], nodedrain.StatusNotRequested, 10*time.Second)
	testenv.Never(t, func() bool { return !h.node(h.nodes[0]).Spec.Unschedulable }, time.Second, 100*time.Millisecond,
		"edgedrain uncordoned a node an operator cordoned")
	assert.NotContains(t, h.node(h.nodes[0]).Annotations, CordonAnnotation)
}

// pdbAllowingNone makes a PodDisruptionBudget of the app's pods that allows no eviction
// (minAvailable all replicas).
func (h *harness) pdbAllowingNone(name, app string, replicas int32) {
	h.t.Helper()
	minAvailable := intstr.FromInt32(replicas)
	_, err := h.c.Client.PolicyV1().PodDisruptionBudgets(h.ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}, metav1.CreateOptions{})
	require.NoError(h.t, err)
}

// eventRecorder records Events to the test cluster's API server, as the coordinator's does.
func (h *harness) eventRecorder() record.EventRecorder {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.c.Client.CoreV1().Events("")})
	h.t.Cleanup(broadcaster.Shutdown)
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "edgedrain-coordinator"})
}
