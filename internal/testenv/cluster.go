package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// GroupLabel is set on the simulated nodes AddNodes creates, with the test's group name as value,
// so a test's workloads can be pinned (nodeSelector) to its own nodes when tests share a cluster.
const GroupLabel = "edgedrain.test/group"

// Cluster is a local control plane shared by a test package, with clients for it.
type Cluster struct {
	*ControlPlane
	// Client is an admin clientset.
	Client kubernetes.Interface
	// Dynamic is an admin dynamic client (Longhorn objects).
	Dynamic dynamic.Interface
	// Longhorn is the set of Longhorn CRDs installed: a release ("v1.12.1"), or "minimal".
	Longhorn string
}

// ClusterConfig is a cluster's control plane settings and which Longhorn CRDs it gets.
type ClusterConfig struct {
	ControlPlaneConfig
	// Longhorn is a Longhorn release provided beside the project (LonghornRelease) or
	// LonghornMinimal; empty: what LonghornCRDsEnv chooses (LonghornCRDs).
	Longhorn string
}

// StartCluster starts a control plane in a fresh temporary directory and installs the Longhorn
// and KubeVirt CRDs. The returned stop function ends it and removes the directory.
func StartCluster(ctx context.Context) (*Cluster, func(), error) {
	return startCluster(ctx, ClusterConfig{})
}

// startCluster is StartCluster with cfg's settings (its Dir is made here).
func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, func(), error) {
	dir, err := os.MkdirTemp("", "edgedrain-cluster-")
	if err != nil {
		return nil, nil, err
	}
	cfg.Dir = dir
	cp, err := StartControlPlane(ctx, cfg.ControlPlaneConfig)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		cp.Stop()
		_ = os.RemoveAll(dir)
	}
	c := &Cluster{ControlPlane: cp}
	if c.Client, err = kubernetes.NewForConfig(cp.Admin); err == nil {
		c.Dynamic, err = dynamic.NewForConfig(cp.Admin)
	}
	if err == nil {
		c.Longhorn, err = installLonghorn(ctx, cp.Admin, cfg.Longhorn)
	}
	if err == nil {
		err = InstallKubeVirtCRDs(ctx, cp.Admin)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

// Main is a TestMain for packages with cluster tests: it starts one cluster for the package
// (none under -short, where RequireCluster skips), runs the tests, stops the cluster and exits.
//
//	var cluster *testenv.Cluster
//	func TestMain(m *testing.M) { testenv.Main(m, &cluster) }
func Main(m *testing.M, c **Cluster) {
	MainWith(m, c, func() (func(), error) { return func() {}, nil })
}

// RequireCluster skips the test under -short and otherwise returns c, failing if it is nil.
func RequireCluster(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the local cluster (not run with -short)")
	}
	if c == nil {
		t.Fatal("no local cluster: call testenv.Main from TestMain")
	}
	return c
}

// Namespace creates a namespace with a random name for the test and deletes it afterwards.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := "t-" + rand.String(8)
	ctx := context.Background()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}) })
	return name
}

// AddNodes creates n simulated nodes named <group>-0 … <group>-(n-1), labelled GroupLabel=group,
// waits until kwok reports them Ready, and deletes them when the test ends. group must be a
// valid label value and unique among the package's tests.
func (c *Cluster) AddNodes(t testing.TB, group string, n int) []string {
	t.Helper()
	ctx := context.Background()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%d", group, i)
		if err := c.CreateNode(ctx, names[i], map[string]string{GroupLabel: group}); err != nil {
			t.Fatal(err)
		}
		name := names[i]
		t.Cleanup(func() {
			err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete node %s: %v", name, err)
			}
		})
	}
	for _, name := range names {
		if err := c.WaitNodeReady(ctx, name, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// KwokTaint keeps off kwok's nodes the pods that do not tolerate it: beside real nodes, a
// program that must really run (edgedrain's own pods) cannot land where nothing runs.
var KwokTaint = corev1.Taint{Key: KwokNodeAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}

// CreateNode creates a node that kwok simulates, with the given extra labels and taints.
func (c *Cluster) CreateNode(ctx context.Context, name string, labels map[string]string, taints ...corev1.Taint) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{corev1.LabelHostname: name, "type": "kwok"},
		Annotations: map[string]string{KwokNodeAnnotation: "fake"},
	}, Spec: corev1.NodeSpec{Taints: taints}}
	for k, v := range labels {
		node.Labels[k] = v
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

// WaitNodeReady waits until the node's Ready condition is True and the controller-manager has
// removed its not-ready taint, so the scheduler places pods on it.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, taint := range node.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady {
				last = "not-ready taint still set"
				return false, nil
			}
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s)", cond.Status, cond.Reason)
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		last = "no Ready condition yet"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (%s): %w\n%s", name, last, err, tailFile(c.Dir+"/kwok.log", 20))
	}
	return nil
}

// PodsOnNode lists the pods in namespace bound to node (all namespaces when namespace is "").
func (c *Cluster) PodsOnNode(ctx context.Context, namespace, node string) ([]corev1.Pod, error) {
	list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Describe summarises pods as name@node:phase for failure messages.
func Describe(pods []corev1.Pod) string {
	parts := make([]string, 0, len(pods))
	for _, p := range pods {
		parts = append(parts, fmt.Sprintf("%s@%s:%s", p.Name, p.Spec.NodeName, p.Status.Phase))
	}
	return strings.Join(parts, " ")
}

// StartTestCluster starts a cluster of the test's own with cfg's settings (feature gates, an
// alpha API) for tests that need what the package's shared cluster does not have; it is
// stopped when the test ends. Under -short the test is skipped.
func StartTestCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a local cluster (not run with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, stop, err := startCluster(ctx, cfg)
	if err != nil {
		t.Fatalf("start a local cluster (gates %q, Longhorn %q): %v", cfg.FeatureGates, cfg.Longhorn, err)
	}
	t.Cleanup(stop)
	return c
}
