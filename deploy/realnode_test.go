package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// The install's namespace and the bus's storage class (a local volume on the coordinator's node).
const (
	realNamespace = "edgedrain"
	busClass      = "edgedrain-test-local"
)

// edgedrainImage builds edgedrain's image as `make image` does, for this machine's platform
// only, and returns its archive and tag.
func edgedrainImage(t *testing.T) (archive, tag string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	tag = "e2e"
	cmd := exec.Command("bash", filepath.Join(root, "hack", "image.sh"))
	cmd.Env = append(os.Environ(), "IMAGE_PLATFORMS=linux/amd64", "IMAGE_TAG="+tag,
		"IMAGE_OUT="+filepath.Join(dir, "layout"), "IMAGE_ARCHIVE="+filepath.Join(dir, "edgedrain.tar"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/image.sh: %s", out)
	return filepath.Join(dir, "edgedrain.tar"), tag
}

// localBusVolume is the PersistentVolume the embedded bus's claim binds: a local volume on node,
// of the cluster's default StorageClass (as a local-path or Longhorn class would give on a real
// cluster; the claim names no class). Its node affinity places the coordinator there.
func localBusVolume(t *testing.T, rc *testenv.RealCluster, node *testenv.RealNode) {
	t.Helper()
	path := "/var/lib/edgedrain-bus"
	onDisk, err := node.Path(path)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(onDisk, 0o755))
	wait := storagev1.VolumeBindingWaitForFirstConsumer
	_, err = rc.Client.StorageV1().StorageClasses().Create(context.Background(), &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: busClass,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wait,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rc.Client.CoreV1().PersistentVolumes().Create(context.Background(), &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "edgedrain-bus"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:       busClass,
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname,
					Operator: corev1.NodeSelectorOpIn, Values: []string{node.Name}}}}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// webOnNode is a Deployment of real containers (the tests' idle image answering HTTP) with a
// budget of one pod down at a time, placed on node until kwok's nodes exist: it tolerates them.
func webOnNode(t *testing.T, rc *testenv.RealCluster, ns, node string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	_, err := rc.Client.AppsV1().Deployments(ns).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Key: testenv.KwokTaint.Key, Operator: corev1.TolerationOpExists}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpIn, Values: []string{"kwok"}}}}, {
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
					Containers: []corev1.Container{{Name: "web", Image: testenv.IdleImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"/idle", "-listen", ":8080"},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	one := intstr.FromInt32(1)
	_, err = rc.Client.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// rebootOnLogind serves the node's logind as a stand-in and plays the reboot it is asked for:
// the call answered, then the node's power cut and a boot with a new boot ID. It serves again on
// the node's new bus after every boot.
type rebootOnLogind struct {
	t    *testing.T
	node *testenv.RealNode
	mu   sync.Mutex
	at   []time.Time // each Reboot call
	up   []time.Time // each boot done
}

func (r *rebootOnLogind) serve(ctx context.Context) {
	addr, err := r.node.SystemBus(ctx)
	require.NoError(r.t, err)
	testenv.StartLogind(r.t, addr, func(c testenv.LogindCall) {
		if c.Method != "Reboot" {
			return
		}
		r.mu.Lock()
		r.at = append(r.at, c.At)
		r.mu.Unlock()
		go func() {
			time.Sleep(200 * time.Millisecond) // logind answers, then the machine goes down
			r.node.PowerOff()
			if err := r.node.Boot(ctx); err != nil {
				r.t.Errorf("boot %s again: %v", r.node.Name, err)
				return
			}
			r.mu.Lock()
			r.up = append(r.up, time.Now())
			r.mu.Unlock()
			r.serve(ctx)
		}()
	})
}

func (r *rebootOnLogind) calls() ([]time.Time, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...), append([]time.Time(nil), r.up...)
}

// until polls cond every 200 ms up to timeout and fails the test with what the description
// function says when it never holds.
func until(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) bool, describe func() string) time.Time {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s\n%s", what, timeout, describe())
	}
	return time.Now()
}

func maintenance(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == coordinator.NodeConditionType && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// installer installs edgedrain onto rc as an operator would, with the image tag given, and
// returns the namespace it runs in.
type installer func(t *testing.T, rc *testenv.RealCluster, tag string) string

// TestHelmInstallDrainsARealNodeForItsReboot installs edgedrain with the unchanged chart, setting
// only the image tag, onto a cluster with two real nodes, and reboots one of them the way
// edgedrain exists for (drainsARealNode).
func TestHelmInstallDrainsARealNodeForItsReboot(t *testing.T) {
	drainsARealNode(t, func(t *testing.T, rc *testenv.RealCluster, tag string) string {
		helmBinary(t)
		_, stderr, err := runHelmIn(t, rc.Kubeconfig, "install", releaseName, "charts/edgedrain", "--namespace", realNamespace,
			"--create-namespace", "--set", "image.tag="+tag)
		require.NoError(t, err, "helm install: %s", stderr)
		return realNamespace
	})
}

// TestKustomizeBaseDrainsARealNodeForItsReboot does the same with deploy/base, through an
// overlay that only sets the image's tag (kustomize edit set image), applied with kubectl.
func TestKustomizeBaseDrainsARealNodeForItsReboot(t *testing.T) {
	drainsARealNode(t, func(t *testing.T, rc *testenv.RealCluster, tag string) string {
		root, err := testenv.RepoRoot()
		require.NoError(t, err)
		overlay := t.TempDir()
		base, err := filepath.Rel(overlay, filepath.Join(root, "deploy", "base")) // kustomize refuses an absolute one
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), fmt.Appendf(nil, `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: ghcr.io/edgedrain/edgedrain
  newTag: %s
`, base, tag), 0o644))
		out, err := exec.Command(filepath.Join(rc.BinDir, "kubectl"), "--kubeconfig", rc.Kubeconfig, "apply", "-k", overlay).CombinedOutput()
		require.NoError(t, err, "kubectl apply -k: %s", out)
		return namespace
	})
}

// drainsARealNode installs edgedrain with install onto a cluster with two real nodes and reboots
// one of them the way edgedrain exists for: the agent's request, real evictions within a budget,
// the pods rescheduled, COMPLETE, the agent's logind reboot, a power cycle with a new boot ID,
// the agent back by the kubelet, the node uncordoned.
func drainsARealNode(t *testing.T, install installer) {
	if why := testenv.RealNodeSkipReason(); why != "" {
		t.Skip(why)
	}
	testenv.RequireCluster(t, cluster) // skips under -short
	ctx := context.Background()
	rc, stop, err := testenv.StartRealCluster(ctx, testenv.RealClusterConfig{Nodes: 2, SystemBus: true})
	require.NoError(t, err)
	t.Cleanup(stop)
	drained, other := rc.Nodes[0], rc.Nodes[1]
	client := rc.Client
	describe := func() string {
		var b strings.Builder
		for _, n := range rc.Nodes {
			fmt.Fprintf(&b, "--- %s\n%s\n%s", n.Name, n.Log(20), n.ContainerLogs(10))
		}
		pods, _ := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		b.WriteString(testenv.Describe(pods.Items))
		return b.String()
	}

	archive, tag := edgedrainImage(t)
	for _, n := range rc.Nodes {
		require.NoError(t, n.Import(ctx, archive))
	}
	localBusVolume(t, rc, other)
	reboots := &rebootOnLogind{t: t, node: drained}
	reboots.serve(ctx)

	installed := time.Now()
	ns := install(t, rc, tag)
	agentReady := func(node string) func(context.Context) bool {
		return func(ctx context.Context) bool {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
				LabelSelector: "app.kubernetes.io/name=edgedrain-agent", FieldSelector: "spec.nodeName=" + node})
			return err == nil && len(pods.Items) == 1 && podReady(&pods.Items[0])
		}
	}
	until(t, 3*time.Minute, "the agent on "+drained.Name+" ready", agentReady(drained.Name), describe)
	ready := time.Since(installed)
	t.Logf("install to the agent ready on %s: %s", drained.Name, ready.Round(time.Millisecond))

	work := rc.Namespace(t)
	webOnNode(t, rc, work, drained.Name, 3)
	until(t, 2*time.Minute, "web's 3 pods ready on "+drained.Name, func(ctx context.Context) bool {
		pods, err := client.CoreV1().Pods(work).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		n := 0
		for _, p := range pods.Items {
			if err == nil && p.Spec.NodeName == drained.Name && podReady(&p) {
				n++
			}
		}
		return n == 3
	}, describe)
	// Now the simulated nodes the drain moves the pods to.
	for i := range 2 {
		require.NoError(t, rc.CreateNode(ctx, fmt.Sprintf("kwok-%d", i), nil, testenv.KwokTaint))
	}

	bootBefore := drained.BootID()
	sentinel, err := drained.Path("/run/reboot-required")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sentinel, nil, 0o644))
	requested := time.Now()
	node := func(ctx context.Context) *corev1.Node {
		n, err := client.CoreV1().Nodes().Get(ctx, drained.Name, metav1.GetOptions{})
		if err != nil {
			return &corev1.Node{}
		}
		return n
	}
	// The agent looks for its sentinel every --sentinel-interval (1 m, plus jitter).
	asked := until(t, 3*time.Minute, "the agent's request for "+drained.Name, func(ctx context.Context) bool {
		return maintenance(node(ctx)) != ""
	}, describe)
	complete := until(t, 3*time.Minute, drained.Name+" COMPLETE", func(ctx context.Context) bool {
		return maintenance(node(ctx)) == "COMPLETE"
	}, describe)
	pods, err := client.CoreV1().Pods(work).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	for _, p := range pods.Items {
		require.NotEqual(t, drained.Name, p.Spec.NodeName, "web pod %s still on the drained node at COMPLETE", p.Name)
	}
	require.True(t, node(ctx).Spec.Unschedulable, "COMPLETE on a node that is not cordoned")
	t.Logf("sentinel to the request seen: %s; request to COMPLETE with 3 real pods evicted: %s",
		asked.Sub(requested).Round(time.Millisecond), complete.Sub(asked).Round(time.Millisecond))

	until(t, 2*time.Minute, "the agent's logind reboot", func(context.Context) bool {
		at, _ := reboots.calls()
		return len(at) > 0
	}, describe)
	until(t, 2*time.Minute, drained.Name+" up again", func(context.Context) bool {
		_, up := reboots.calls()
		return len(up) > 0
	}, describe)
	require.NotEqual(t, bootBefore, drained.BootID())
	uncordoned := until(t, 4*time.Minute, drained.Name+" uncordoned, maintenance over", func(ctx context.Context) bool {
		n := node(ctx)
		return !n.Spec.Unschedulable && maintenance(n) == "" && n.Status.NodeInfo.BootID == drained.BootID()
	}, describe)
	at, up := reboots.calls()
	require.Len(t, at, 1, "one reboot asked for, once")
	t.Logf("request seen to the agent's reboot: %s; its node booted again %s later; uncordoned %s after the boot (%s from the sentinel to the end)",
		at[0].Sub(asked).Round(time.Millisecond), up[0].Sub(at[0]).Round(time.Millisecond),
		uncordoned.Sub(up[0]).Round(time.Millisecond), uncordoned.Sub(requested).Round(time.Millisecond))
	require.True(t, agentReady(drained.Name)(ctx), "the agent on %s not ready after its reboot", drained.Name)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runHelmIn runs the pinned helm against the cluster of kubeconfig.
func runHelmIn(t *testing.T, kubeconfig string, args ...string) (string, string, error) {
	t.Helper()
	return runHelm(t, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}
