package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// idlePod is a pod of the tests' image pinned to a node.
func idlePod(name, node string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "idle", Image: IdleImage, ImagePullPolicy: corev1.PullNever,
				Command: append([]string{"/idle"}, args...)}},
		},
	}
}

// podPhase waits until the pod reaches phase, and fails at once if it ends in another.
func podPhase(t *testing.T, rc *RealCluster, ns, name string, phase corev1.PodPhase, timeout time.Duration) {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := rc.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		switch p.Status.Phase {
		case phase:
			return true, nil
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, fmt.Errorf("ended %s", p.Status.Phase)
		}
		return false, nil
	})
	if err != nil {
		var b strings.Builder
		if pod != nil {
			b.WriteString(Describe([]corev1.Pod{*pod}) + "\n")
		}
		for _, n := range rc.Nodes {
			b.WriteString(n.Name + ":\n" + n.Log(15) + "\n" + n.ContainerLogs(10))
		}
		t.Fatalf("pod %s not %s: %v\n%s", name, phase, err, b.String())
	}
}

// TestRealNodesRunPodsThatReachAServiceByName starts two real nodes and shows what the tests on
// them rely on: the machine's kernel settings are left alone, real containers run, a pod on one node reaches a pod on the other through a
// Service by its DNS name, and a node's boot ID is its own and new after a power cycle.
func TestRealNodesRunPodsThatReachAServiceByName(t *testing.T) {
	if testing.Short() {
		t.Skip("real nodes: not under -short")
	}
	if why := RealNodeSkipReason(); why != "" {
		t.Skip(why)
	}
	ctx := context.Background()
	machine := func() map[string]string { // the kernel settings a kubelet would change for the whole machine
		m := map[string]string{}
		for key := range kubeletTunables {
			b, err := os.ReadFile("/proc/sys/" + key)
			require.NoError(t, err)
			m[key] = string(b)
		}
		return m
	}
	before := machine()
	start := time.Now()
	rc, stop, err := StartRealCluster(ctx, RealClusterConfig{Nodes: 2})
	require.NoError(t, err)
	t.Cleanup(stop)
	t.Logf("two real nodes Ready %s after the start", time.Since(start).Round(time.Millisecond))
	require.Equal(t, before, machine(), "the real nodes changed the machine's kernel settings")

	ns := rc.Namespace(t)
	pods := rc.Client.CoreV1().Pods(ns)
	_, err = pods.Create(ctx, idlePod("web", rc.Nodes[0].Name, "-listen", ":8080"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rc.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	podPhase(t, rc, ns, "web", corev1.PodRunning, 60*time.Second)

	// The client on the other node: DNS (the short name, through the pod's search path), the
	// Service's virtual IP (kube-proxy) and the route between the nodes' bridges.
	_, err = pods.Create(ctx, idlePod("client", rc.Nodes[1].Name, "-get", "http://web/"), metav1.CreateOptions{})
	require.NoError(t, err)
	podPhase(t, rc, ns, "client", corev1.PodSucceeded, 90*time.Second)

	for _, n := range rc.Nodes {
		node, err := rc.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, n.BootID(), node.Status.NodeInfo.BootID, "node %s: the kubelet's boot ID is not the node's", n.Name)
	}
	// A power cycle: the kubelet started again reads the node's new boot ID.
	n := rc.Nodes[0]
	reported := n.BootID() // the kubelet's, checked above
	n.PowerOff()
	require.NoError(t, n.Boot(ctx))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := rc.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil && node.Status.NodeInfo.BootID != reported && node.Status.NodeInfo.BootID == n.BootID(), nil
	}), "the kubelet did not report a new boot ID, the node's\n%s", n.Log(30))
}
