package preflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// group is a fresh name for a test's group of nodes: tests run again (-count) while the pods
// of the last run's nodes are still going away.
func group(prefix string) string { return prefix + "-" + rand.String(5) }

// oneNode gives a test a simulated node of a fresh group and a namespace.
func oneNode(t *testing.T, prefix string) (c *testenv.Cluster, grp, node, ns string) {
	t.Helper()
	c = testenv.RequireCluster(t, cluster)
	grp = group(prefix)
	return c, grp, c.AddNodes(t, grp, 1)[0], c.Namespace(t)
}

// barePod is a pod no controller manages, bound to node.
func barePod(ns, name, node string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
	}
}

func createPod(t *testing.T, c *testenv.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.Client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return got
}

// budget creates a PodDisruptionBudget over app=name with minAvailable or, when min is nil,
// maxUnavailable 0, changed by tune, and waits until the disruption controller has counted
// healthy pods.
func budget(t *testing.T, c *testenv.Cluster, ns, name string, minAvailable *intstr.IntOrString, healthy int32, tune ...func(*policyv1.PodDisruptionBudgetSpec)) {
	t.Helper()
	ctx := context.Background()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
	if minAvailable != nil {
		pdb.Spec.MinAvailable = minAvailable
	} else {
		zero := intstr.FromInt32(0)
		pdb.Spec.MaxUnavailable = &zero
	}
	for _, f := range tune {
		f(&pdb.Spec)
	}
	_, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration >= got.Generation && got.Status.CurrentHealthy == healthy
	}, 30*time.Second, 50*time.Millisecond, "PodDisruptionBudget %s/%s counted by the disruption controller", ns, name)
}

// state records what a prediction must not change: the node's spec, labels and annotations, and
// the resourceVersion of every pod and PodDisruptionBudget of ns.
func state(t *testing.T, c *testenv.Cluster, ns, node string) map[string]string {
	t.Helper()
	ctx := context.Background()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	meta, err := json.Marshal([]any{n.Spec, n.Labels, n.Annotations})
	require.NoError(t, err)
	out := map[string]string{"node": string(meta)}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		out["pod/"+p.Name] = p.ResourceVersion
	}
	pdbs, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pdbs.Items {
		out["pdb/"+p.Name] = p.ResourceVersion
	}
	return out
}

func predict(t *testing.T, cfg Config, node string) Prediction {
	t.Helper()
	p, err := Predict(context.Background(), cfg, node)
	require.NoError(t, err)
	return p
}

// A budget allowing no disruption now blocks each of its pods on the node, named in the reason;
// one allowing some only makes them go in turn. The node stays schedulable and nothing changes.
func TestPredictPodDisruptionBudgets(t *testing.T) {
	c, grp, node, ns := oneNode(t, "pdb")
	c.Deploy(t, testenv.DeploymentSpec{Namespace: ns, Name: "web", Group: grp, Replicas: 2})
	c.Deploy(t, testenv.DeploymentSpec{Namespace: ns, Name: "api", Group: grp, Replicas: 2})
	c.Deploy(t, testenv.DeploymentSpec{Namespace: ns, Name: "db", Group: grp, Replicas: 1})
	budget(t, c, ns, "web", nil, 2)
	one := intstr.FromInt32(1)
	budget(t, c, ns, "api", &one, 2)
	budget(t, c, ns, "db", &one, 1) // minAvailable = replicas

	before := state(t, c, ns, node)
	p := predict(t, Config{Client: c.Client, EvictUnmanagedPods: true}, node)
	assert.Equal(t, before, state(t, c, ns, node), "a prediction changes nothing")

	assert.False(t, p.Clear)
	assert.Equal(t, node, p.Node)
	require.Len(t, p.Blockers, 3, "%+v", p.Blockers)
	assert.Regexp(t, `^db-`, p.Blockers[0].Name)
	assert.Equal(t, "PodDisruptionBudget "+ns+"/db allows 0 disruptions now (needs 1 healthy, has 1)", p.Blockers[0].Reason)
	for _, b := range p.Blockers[1:] {
		assert.Equal(t, nodedrain.BlockerPod, b.Kind)
		assert.Equal(t, ns, b.Namespace)
		assert.Regexp(t, `^web-`, b.Name)
		assert.Equal(t, "PodDisruptionBudget "+ns+"/web allows 0 disruptions now (needs 2 healthy, has 2)", b.Reason)
	}
	assert.Equal(t, []string{"5 pod(s) would be evicted",
		"PodDisruptionBudget " + ns + "/api allows 1 disruption(s) now and selects 2 pods on this node: they go as their replacements become ready",
		"volumes were not checked"}, p.Notes)
	assert.WithinDuration(t, time.Now(), p.At, time.Minute)

	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, n.Spec.Unschedulable, "the node stays schedulable")
}

// Pods no controller manages block when they may not be evicted, and only then; DaemonSet
// pods stay on the node and never block.
func TestPredictUnmanagedPods(t *testing.T) {
	c, grp, node, ns := oneNode(t, "bare")
	c.Deploy(t, testenv.DeploymentSpec{Namespace: ns, Name: "web", Group: grp, Replicas: 1})
	createPod(t, c, barePod(ns, "lonely", node))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
			Spec: barePod(ns, "agent", "").Spec},
	}}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{testenv.GroupLabel: grp}
	_, err := c.Client.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pods, err := c.RunningPods(context.Background(), ns, "app=agent")
		return err == nil && len(pods) == 1
	}, 30*time.Second, 50*time.Millisecond, "the DaemonSet's pod runs")

	p := predict(t, Config{Client: c.Client, EvictUnmanagedPods: false}, node)
	assert.False(t, p.Clear)
	assert.Equal(t, []nodedrain.Blocker{{Kind: nodedrain.BlockerPod, Namespace: ns, Name: "lonely", Reason: unmanagedReason}}, p.Blockers)
	assert.Contains(t, p.Notes, "2 pod(s) would be evicted", "the DaemonSet's pod is not")

	p = predict(t, Config{Client: c.Client, EvictUnmanagedPods: true}, node)
	assert.True(t, p.Clear, "%+v", p.Blockers)
	assert.Empty(t, p.Blockers)
}

// Mirror pods stay and finished pods go whatever their budgets say: neither blocks. A pending
// pod is evicted past its budget.
func TestPredictSkipsMirrorFinishedAndPendingPods(t *testing.T) {
	c, node, ns := manualNode(t)
	mirror := barePod(ns, "static", node)
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	createPod(t, c, mirror)
	one := intstr.FromInt32(1)
	for name, phase := range map[string]corev1.PodPhase{"done": corev1.PodSucceeded, "crashed": corev1.PodFailed, "waiting": corev1.PodPending} {
		podWithStatus(t, c, barePod(ns, name, node), phase, false)
		budget(t, c, ns, name, &one, 0)
	}

	p := predict(t, Config{Client: c.Client, EvictUnmanagedPods: true}, node)
	assert.True(t, p.Clear, "%+v", p.Blockers)
	assert.Contains(t, p.Notes, "1 pod(s) would be evicted", "the pending one")
	p = predict(t, Config{Client: c.Client, EvictUnmanagedPods: false}, node)
	assert.Equal(t, []nodedrain.Blocker{{Kind: nodedrain.BlockerPod, Namespace: ns, Name: "waiting", Reason: unmanagedReason}}, p.Blockers,
		"only the pending pod would be evicted")
}

// The budgets are read as the eviction API reads them: a pod two budgets select is refused
// whatever they allow; an unready pod goes when its budget is met without it, or lets unhealthy
// pods go always.
func TestPredictFollowsTheEvictionAPI(t *testing.T) {
	c, node, ns := manualNode(t)
	one := intstr.FromInt32(1)
	podWithStatus(t, c, barePod(ns, "twice", node), corev1.PodRunning, true)
	for _, name := range []string{"twice-a", "twice-b"} {
		budget(t, c, ns, name, &one, 1, func(s *policyv1.PodDisruptionBudgetSpec) {
			s.Selector.MatchLabels["app"] = "twice"
		})
	}
	for i, ready := range []bool{true, false} {
		pod := barePod(ns, fmt.Sprintf("pair-%d", i), node)
		pod.Labels["app"] = "pair"
		podWithStatus(t, c, pod, corev1.PodRunning, ready)
	}
	budget(t, c, ns, "pair", &one, 1)
	podWithStatus(t, c, barePod(ns, "sick", node), corev1.PodRunning, false)
	budget(t, c, ns, "sick", &one, 0, func(s *policyv1.PodDisruptionBudgetSpec) {
		always := policyv1.AlwaysAllow
		s.UnhealthyPodEvictionPolicy = &always
	})

	p := predict(t, Config{Client: c.Client, EvictUnmanagedPods: true}, node)
	assert.Equal(t, []nodedrain.Blocker{
		{Kind: nodedrain.BlockerPod, Namespace: ns, Name: "pair-0", Reason: "PodDisruptionBudget " + ns + "/pair allows 0 disruptions now (needs 1 healthy, has 1)"},
		{Kind: nodedrain.BlockerPod, Namespace: ns, Name: "twice", Reason: "selected by more than one PodDisruptionBudget (" + ns + "/twice-a, " + ns +
			"/twice-b): the eviction API refuses such pods"},
	}, p.Blockers)
}

// manualNode gives a test a node no simulated kubelet runs (its pods keep the status the test
// gives them) and a namespace.
func manualNode(t *testing.T) (c *testenv.Cluster, node, ns string) {
	t.Helper()
	c = testenv.RequireCluster(t, cluster)
	node = group("manual")
	_, err := c.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	return c, node, c.Namespace(t)
}

// podWithStatus creates pod and sets its phase and Ready condition, as a kubelet would.
func podWithStatus(t *testing.T, c *testenv.Cluster, pod *corev1.Pod, phase corev1.PodPhase, ready bool) {
	t.Helper()
	pod = createPod(t, c, pod)
	pod.Status.Phase = phase
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
	_, err := c.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// startGate starts a volume gate with the coordinator's defaults on the test cluster.
func startGate(t *testing.T, c *testenv.Cluster) *volumes.Gate {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.LonghornNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	cfg := volumes.DefaultConfig()
	cfg.Client, cfg.Dynamic = c.Client, c.Dynamic
	g, err := volumes.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, g.Start(ctx))
	return g
}

// A Longhorn volume whose last healthy replica is on the node blocks; a node with nothing on
// it is clear.
func TestPredictVolumes(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, group("vol"), 3)
	g := startGate(t, c)
	created, err := testenv.ApplyLonghorn(context.Background(), c.Dynamic,
		testenv.LonghornVolume("vol-pre", 2, "attached", "shop", "data-0"),
		testenv.LonghornReplica("vol-pre-r-0", "vol-pre", nodes[0], "healthy", "10.3.0.1"),
		testenv.LonghornReplica("vol-pre-r-1", "vol-pre", nodes[1], "failed", "10.3.0.2"))
	for _, obj := range created {
		gvr, _ := testenv.LonghornGVR(obj)
		name := obj.GetName()
		t.Cleanup(func() {
			_ = c.Dynamic.Resource(gvr).Namespace(testenv.LonghornNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	require.NoError(t, err)

	cfg := Config{Client: c.Client, Volumes: g, EvictUnmanagedPods: true}
	var p Prediction
	require.Eventually(t, func() bool {
		p, err = Predict(context.Background(), cfg, nodes[0])
		return err == nil && len(p.Blockers) == 1
	}, 30*time.Second, 50*time.Millisecond, "the last copy blocks: %+v", p)
	assert.False(t, p.Clear)
	assert.Equal(t, nodedrain.Blocker{Kind: nodedrain.BlockerVolume, Namespace: "shop", Name: "vol-pre",
		Reason: "longhorn volume (PVC shop/data-0): last healthy replica"}, p.Blockers[0])

	p = predict(t, cfg, nodes[2])
	assert.True(t, p.Clear)
	assert.Empty(t, p.Blockers)
	assert.Equal(t, []string{"0 pod(s) would be evicted"}, p.Notes)
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, fmt.Sprintf(`{"Node":%q,"Clear":true,"Blockers":[],"Notes":["0 pod(s) would be evicted"],"At":%q}`,
		nodes[2], p.At.Format(time.RFC3339Nano)), string(raw))
}

// The policy's blockers join the prediction, sorted, capped; errors say what failed.
func TestPredictExtraAndErrors(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	node := c.AddNodes(t, group("extra"), 1)[0]
	var extra []nodedrain.Blocker
	for i := range nodedrain.MaxBlockers + 5 {
		extra = append(extra, nodedrain.Blocker{Kind: "Alert", Name: fmt.Sprintf("alert-%04d", nodedrain.MaxBlockers+5-i), Reason: "firing"})
	}
	cfg := Config{Client: c.Client, EvictUnmanagedPods: true,
		Extra: func(_ context.Context, n string) ([]nodedrain.Blocker, error) {
			assert.Equal(t, node, n)
			return extra, nil
		}}
	p := predict(t, cfg, node)
	assert.False(t, p.Clear)
	require.Len(t, p.Blockers, nodedrain.MaxBlockers)
	assert.Equal(t, "alert-0001", p.Blockers[0].Name, "sorted")
	assert.Contains(t, p.Notes, "5 more blockers not listed")

	boom := errors.New("prometheus unreachable")
	cfg.Extra = func(context.Context, string) ([]nodedrain.Blocker, error) { return nil, boom }
	_, err := Predict(context.Background(), cfg, node)
	assert.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "policy blockers of node "+node)

	_, err = Predict(context.Background(), Config{Client: c.Client}, "no-such-node")
	assert.ErrorIs(t, err, ErrNodeNotFound)
	assert.ErrorContains(t, err, "node no-such-node: node not found")
	_, err = Predict(context.Background(), Config{}, node)
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestUnmanaged(t *testing.T) {
	yes := true
	ref := func(apiVersion, kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", Controller: &yes}}
	}
	tests := []struct {
		name   string
		owners []metav1.OwnerReference
		want   []string
	}{
		{"no controller", nil, []string{unmanagedReason}},
		{"ReplicaSet", ref("apps/v1", "ReplicaSet"), nil},
		{"DaemonSet gone", ref("apps/v1", "DaemonSet"), []string{"its DaemonSet owner no longer exists; --evict-unmanaged-pods=false"}},
		{"another group's DaemonSet", ref("example.com/v1", "DaemonSet"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, unmanaged(corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tt.owners}}))
		})
	}
}
