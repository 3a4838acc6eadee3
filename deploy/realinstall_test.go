package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The install's namespace and the bus's storage class (a local volume on the coordinator's node).
const (
	realNamespace = "edgedrain"
	busClass      = "edgedrain-test-local"
)

// edgedrainImage builds this checkout's image as `make image` does, for this machine's
// platform only, and returns its archive and tag.
func edgedrainImage(t *testing.T) (archive, tag string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	return buildImage(t, root, "e2e"), "e2e"
}

// buildImage runs the hack/image.sh of the source tree at tree for this machine's platform and
// returns the archive of the image tagged tag.
func buildImage(t *testing.T, tree, tag string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	archive := filepath.Join(dir, "edgedrain.tar")
	cmd := exec.Command("bash", filepath.Join(tree, "hack", "image.sh"))
	cmd.Dir = tree
	cmd.Env = append(append(os.Environ(), "IMAGE_PLATFORMS=linux/"+runtime.GOARCH, "IMAGE_TAG="+tag,
		"IMAGE_OUT="+filepath.Join(dir, "layout"), "IMAGE_ARCHIVE="+archive), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s/hack/image.sh: %s", tree, out)
	return archive
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

// installer installs edgedrain onto rc as an operator would, with the image tag given, and
// returns the namespace it runs in.
type installer func(t *testing.T, rc *testenv.RealCluster, tag string) string

// helmInstall installs the unchanged chart with only the image tag set.
func helmInstall(t *testing.T, rc *testenv.RealCluster, tag string) string {
	helmBinary(t)
	_, stderr, err := runHelmIn(t, rc.Kubeconfig, "install", releaseName, "charts/edgedrain", "--namespace", realNamespace,
		"--create-namespace", "--set", "image.tag="+tag)
	require.NoError(t, err, "helm install: %s", stderr)
	return realNamespace
}

// kustomizeInstall applies deploy/base through an overlay that only sets the image's tag
// (kustomize edit set image), with kubectl.
func kustomizeInstall(t *testing.T, rc *testenv.RealCluster, tag string) string {
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
}

// installation is edgedrain installed on a cluster with two real nodes.
type installation struct {
	rc *testenv.RealCluster
	// ns is edgedrain's namespace.
	ns string
	// logind is the stand-in logind of each real node, by name.
	logind map[string]*rebootOnLogind
	// took is how long from the install to every agent on a real node ready.
	took time.Duration
}

// installOnRealNodes starts two real nodes (each with its system bus and a stand-in logind
// there), gives both `make image`'s image, puts the bus's volume on the second, installs
// edgedrain with install, and waits until the agents on both are ready.
func installOnRealNodes(t *testing.T, install installer) *installation {
	t.Helper()
	requireRealNodes(t)
	ctx := context.Background()
	rc, stop, err := testenv.StartRealCluster(ctx, testenv.RealClusterConfig{Nodes: 2, SystemBus: true})
	require.NoError(t, err)
	t.Cleanup(stop)
	in := &installation{rc: rc, logind: map[string]*rebootOnLogind{}}
	archive, tag := edgedrainImage(t)
	for _, n := range rc.Nodes {
		require.NoError(t, n.Import(ctx, archive))
		in.logind[n.Name] = &rebootOnLogind{node: n}
		require.NoError(t, in.logind[n.Name].serve(t.Context()))
	}
	localBusVolume(t, rc, rc.Nodes[1])
	start := time.Now()
	in.ns = install(t, rc, tag)
	for _, n := range rc.Nodes {
		until(t, 3*time.Minute, "the agent on "+n.Name+" ready", in.agentReady(n.Name), in.describe)
	}
	in.took = time.Since(start)
	return in
}

// webReady counts web's pods in ns that are ready, not going, and on a node where says yes.
func (in *installation) webReady(ctx context.Context, ns string, where func(node string) bool) int {
	pods, err := in.rc.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods.Items {
		if where(p.Spec.NodeName) && p.DeletionTimestamp == nil && podReady(&p) {
			n++
		}
	}
	return n
}

// addKwokNodes adds two simulated nodes for a drain to move pods to; tainted, so that only pods
// that tolerate them (web's) land there.
func (in *installation) addKwokNodes(t *testing.T) {
	t.Helper()
	for i := range 2 {
		require.NoError(t, in.rc.CreateNode(context.Background(), fmt.Sprintf("kwok-%d", i), nil, testenv.KwokTaint))
	}
}

// node is the Node object of name now, or an empty one when it cannot be read.
func (in *installation) node(ctx context.Context, name string) *corev1.Node {
	n, err := in.rc.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return &corev1.Node{}
	}
	return n
}

// askReboot places the reboot sentinel on node's /run, where the agent's DaemonSet looks.
func askReboot(t *testing.T, node *testenv.RealNode) time.Time {
	t.Helper()
	sentinel, err := node.Path("/run/reboot-required")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sentinel, nil, 0o644))
	return time.Now()
}

// backAfterOneReboot waits for node's reboot (asked of its logind, played as a power cycle),
// then for the node uncordoned with its maintenance over and the kubelet reporting the new boot
// ID; it requires that exactly one reboot was asked for. It returns when the reboot was asked,
// when the node was up again and when it was uncordoned.
func (in *installation) backAfterOneReboot(t *testing.T, node *testenv.RealNode) (at, up, uncordoned time.Time) {
	t.Helper()
	reboots := in.logind[node.Name]
	until(t, 3*time.Minute, node.Name+" rebooted by its agent", func(context.Context) bool {
		_, up, errs := reboots.calls()
		require.Empty(t, errs)
		return len(up) > 0
	}, in.describe)
	uncordoned = until(t, 4*time.Minute, node.Name+" uncordoned, maintenance over", func(ctx context.Context) bool {
		n := in.node(ctx, node.Name)
		return !n.Spec.Unschedulable && maintenance(n) == "" && n.Status.NodeInfo.BootID == node.BootID()
	}, in.describe)
	ats, ups, errs := reboots.calls()
	require.Empty(t, errs)
	require.Len(t, ats, 1, "one reboot asked for, once")
	return ats[0], ups[0], uncordoned
}

// requireRealNodes skips the test where real nodes cannot run (not root, no containerd: the
// reason says what to install) and under -short.
func requireRealNodes(t *testing.T) {
	t.Helper()
	if why := testenv.RealNodeSkipReason(); why != "" {
		t.Skip(why)
	}
	testenv.RequireCluster(t, cluster) // skips under -short
}

// agentPod is the agent's pod on node, if there is one.
func (in *installation) agentPod(ctx context.Context, node string) (*corev1.Pod, bool) {
	pods, err := in.rc.Client.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=edgedrain-agent", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		return nil, false
	}
	return &pods.Items[0], true
}

// agentReady says whether the agent on node is ready: connected to the bus, its buckets answering.
func (in *installation) agentReady(node string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		pod, ok := in.agentPod(ctx, node)
		return ok && podReady(pod)
	}
}

// describe is what a failure shows: each node's kubelet and containerd logs, its containers'
// logs (kubectl logs cannot reach a real node's kubelet here) and every pod.
func (in *installation) describe() string {
	var b strings.Builder
	for _, n := range in.rc.Nodes {
		fmt.Fprintf(&b, "--- %s\n%s\n%s", n.Name, n.Log(20), n.ContainerLogs(10))
	}
	pods, _ := in.rc.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	b.WriteString(testenv.Describe(pods.Items))
	return b.String()
}

// rebootOnLogind serves the node's logind as a stand-in and plays the reboot it is asked for:
// the call answered, then the node's power cut and a boot with a new boot ID. It serves again on
// the node's new bus after every boot, until the test's context ends (then it boots nothing).
type rebootOnLogind struct {
	node *testenv.RealNode
	mu   sync.Mutex
	at   []time.Time // each Reboot call
	up   []time.Time // each boot done
	errs []error     // from the goroutines that play the reboots: the test reads them
}

// serve connects to the node's system bus and serves logind there.
func (r *rebootOnLogind) serve(ctx context.Context) error {
	addr, err := r.node.SystemBus(ctx)
	if err != nil {
		return err
	}
	_, stop, err := testenv.ServeLogind(addr, func(c testenv.LogindCall) {
		if c.Method != "Reboot" {
			return
		}
		r.mu.Lock()
		r.at = append(r.at, c.At)
		r.mu.Unlock()
		go r.reboot(ctx)
	})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, stop) // the test's end closes the connection
	return nil
}

// reboot plays the machine's reboot once logind has answered.
func (r *rebootOnLogind) reboot(ctx context.Context) {
	select {
	case <-time.After(200 * time.Millisecond): // logind answers, then the machine goes down
	case <-ctx.Done():
		return
	}
	r.node.PowerOff()
	err := r.node.Boot(ctx)
	if err == nil {
		err = r.serve(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			r.errs = append(r.errs, fmt.Errorf("reboot %s: %w", r.node.Name, err))
		}
		return
	}
	r.up = append(r.up, time.Now())
}

// calls returns the Reboot calls' times, the boots' and what went wrong playing them.
func (r *rebootOnLogind) calls() (at, up []time.Time, errs []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...), append([]time.Time(nil), r.up...), append([]error(nil), r.errs...)
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
