package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// previousRelease is the version a helm upgrade starts from: the last one before the chart
// mounted the host's boot ID and gave the agent a readiness probe (no release is tagged yet).
const previousRelease = "3fc69effa7775cea7e5dfa6ae5356f09ab9e52a0"

// previousChart checks out the chart and builds the image of previousRelease, and returns the
// chart's directory and the image archive (tagged "previous").
func previousChart(t *testing.T) (chart, archive string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").CombinedOutput(); err != nil {
		shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
		if strings.TrimSpace(string(shallow)) == "true" {
			t.Skipf("the upgrade test needs the repository's history for %s (git fetch --unshallow)", previousRelease)
		}
		t.Fatalf("the previous version %s is not in the repository's history: %v: %s", previousRelease, err, out)
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	require.NoError(t, os.Mkdir(tree, 0o755))
	archiveCmd := exec.Command("bash", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "-", root, previousRelease, tree)
	out, err := archiveCmd.CombinedOutput()
	require.NoError(t, err, "git archive %s: %s", previousRelease, out)
	archive = buildImage(t, tree, "previous", "IMAGE_REVISION="+previousRelease, "SOURCE_DATE_EPOCH=0")
	return filepath.Join(tree, "charts", "edgedrain"), archive
}

// TestHelmUpgradeKeepsADrainUnderWay installs the previous release, starts a drain that a
// budget holds up, upgrades to this chart and image while it waits (agents and coordinator
// replaced), then lets the budget go: the same drain reaches COMPLETE, the node reboots once and
// is uncordoned, and it was never uncordoned in between.
func TestHelmUpgradeKeepsADrainUnderWay(t *testing.T) {
	t.Parallel()
	requireRealNodes(t)
	chart, previous := previousChart(t)
	in := installOnRealNodes(t, func(t *testing.T, rc *testenv.RealCluster, tag string) string {
		helmBinary(t)
		for _, n := range rc.Nodes {
			require.NoError(t, n.Import(context.Background(), previous))
		}
		_, stderr, err := runHelmIn(t, rc.Kubeconfig, "install", releaseName, chart, "--namespace", realNamespace,
			"--create-namespace", "--set", "image.tag=previous")
		require.NoError(t, err, "helm install of %s: %s", previousRelease, stderr)
		return realNamespace
	})
	rc, ctx, client := in.rc, context.Background(), in.rc.Client
	drained := rc.Nodes[0]
	work := rc.Namespace(t)
	webOnNode(t, rc, work, drained.Name, 3)
	until(t, 2*time.Minute, "web's 3 pods ready on "+drained.Name, func(ctx context.Context) bool {
		return in.webReady(ctx, work, func(node string) bool { return node == drained.Name }) == 3
	}, in.describe)
	in.addKwokNodes(t)
	// The budget lets no pod go: the drain waits, evicting nothing, until it is lifted.
	setBudget := func(max int) {
		patch := fmt.Appendf(nil, `{"spec":{"maxUnavailable":%d}}`, max)
		_, err := client.PolicyV1().PodDisruptionBudgets(work).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{})
		require.NoError(t, err)
	}
	setBudget(0)
	askReboot(t, drained)
	until(t, 3*time.Minute, drained.Name+" cordoned by the drain", func(ctx context.Context) bool {
		n := in.node(ctx, drained.Name)
		return n.Spec.Unschedulable && maintenance(n) != "" && maintenance(n) != "COMPLETE"
	}, in.describe)

	// The upgrade, while the drain waits; the node must stay cordoned until its reboot.
	uncordoned := make(chan string, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go wait.UntilWithContext(watchCtx, func(ctx context.Context) {
		if n := in.node(ctx, drained.Name); n.Name != "" && !n.Spec.Unschedulable {
			select {
			case uncordoned <- "uncordoned before its reboot, maintenance " + maintenance(n):
			default:
			}
		}
	}, 200*time.Millisecond)
	_, stderr, err := runHelmIn(t, rc.Kubeconfig, "upgrade", releaseName, "charts/edgedrain", "--namespace", realNamespace,
		"--set", "image.tag=e2e")
	require.NoError(t, err, "helm upgrade: %s", stderr)
	for _, n := range rc.Nodes {
		until(t, 3*time.Minute, "the upgraded agent on "+n.Name+" ready", func(ctx context.Context) bool {
			pod, ok := in.agentPod(ctx, n.Name)
			return ok && podReady(pod) && pod.Spec.Containers[0].Image == "ghcr.io/edgedrain/edgedrain:e2e"
		}, in.describe)
	}
	until(t, 3*time.Minute, "the upgraded coordinator ready", func(ctx context.Context) bool {
		pods, err := client.CoreV1().Pods(realNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=edgedrain-coordinator"})
		return err == nil && len(pods.Items) == 1 && podReady(&pods.Items[0]) &&
			pods.Items[0].Spec.Containers[0].Image == "ghcr.io/edgedrain/edgedrain:e2e"
	}, in.describe)
	require.Contains(t, []string{"CORDONED", "DRAINRETRYING"}, maintenance(in.node(ctx, drained.Name)), "the drain is not waiting on the budget after the upgrade")
	require.Equal(t, 3, in.webReady(ctx, work, func(node string) bool { return node == drained.Name }), "a pod left while the budget allowed none")

	setBudget(1)
	until(t, 3*time.Minute, drained.Name+" COMPLETE after the upgrade", func(ctx context.Context) bool {
		return maintenance(in.node(ctx, drained.Name)) == "COMPLETE"
	}, in.describe)
	until(t, 3*time.Minute, drained.Name+" rebooted by its agent", func(context.Context) bool {
		_, up, errs := in.logind[drained.Name].calls()
		require.Empty(t, errs)
		return len(up) > 0
	}, in.describe)
	stopWatch()
	select {
	case why := <-uncordoned:
		t.Fatalf("%s: %s", drained.Name, why)
	default:
	}
	in.backAfterOneReboot(t, drained)
}
