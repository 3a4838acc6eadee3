package deploy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

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

func maintenance(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == coordinator.NodeConditionType && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// TestHelmInstallDrainsARealNodeForItsReboot installs edgedrain with the unchanged chart, setting
// only the image tag, onto a cluster with two real nodes, and reboots one of them the way
// edgedrain exists for (drainsARealNode).
func TestHelmInstallDrainsARealNodeForItsReboot(t *testing.T) { drainsARealNode(t, helmInstall) }

// TestKustomizeBaseDrainsARealNodeForItsReboot does the same with deploy/base.
func TestKustomizeBaseDrainsARealNodeForItsReboot(t *testing.T) { drainsARealNode(t, kustomizeInstall) }

// drainsARealNode installs edgedrain with install onto a cluster with two real nodes and reboots
// one of them the way edgedrain exists for: the agent's request, real evictions within a budget,
// the pods rescheduled, COMPLETE, the agent's logind reboot, a power cycle with a new boot ID,
// the agent back by the kubelet, the node uncordoned.
func drainsARealNode(t *testing.T, install installer) {
	t.Parallel() // each on a cluster of its own; the token-rotation test's 20 minutes run meanwhile
	in := installOnRealNodes(t, install)
	rc, ctx, client := in.rc, context.Background(), in.rc.Client
	drained, describe := rc.Nodes[0], in.describe
	t.Logf("install to every agent on a real node ready: %s", in.took.Round(time.Millisecond))
	on := func(node string) bool { return node == drained.Name }
	elsewhere := func(node string) bool { return node != drained.Name }

	work := rc.Namespace(t)
	webOnNode(t, rc, work, drained.Name, 3)
	until(t, 2*time.Minute, "web's 3 pods ready on "+drained.Name, func(ctx context.Context) bool {
		return in.webReady(ctx, work, on) == 3
	}, describe)
	in.addKwokNodes(t) // now that web's pods are on the real node

	requested := askReboot(t, drained)
	// The agent looks for its sentinel every --sentinel-interval (1 m, plus jitter).
	asked := until(t, 3*time.Minute, "the agent's request for "+drained.Name, func(ctx context.Context) bool {
		return maintenance(in.node(ctx, drained.Name)) != ""
	}, describe)
	complete := until(t, 3*time.Minute, drained.Name+" COMPLETE", func(ctx context.Context) bool {
		return maintenance(in.node(ctx, drained.Name)) == "COMPLETE"
	}, describe)
	pods, err := client.CoreV1().Pods(work).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	for _, p := range pods.Items {
		require.NotEqual(t, drained.Name, p.Spec.NodeName, "web pod %s still on the drained node at COMPLETE", p.Name)
	}
	require.True(t, in.node(ctx, drained.Name).Spec.Unschedulable, "COMPLETE on a node that is not cordoned")
	until(t, 30*time.Second, "web's 3 pods ready on the other nodes", func(ctx context.Context) bool {
		return in.webReady(ctx, work, elsewhere) == 3
	}, describe)
	t.Logf("sentinel to the request seen: %s; request to COMPLETE with 3 real pods evicted: %s",
		asked.Sub(requested).Round(time.Millisecond), complete.Sub(asked).Round(time.Millisecond))

	at, up, uncordoned := in.backAfterOneReboot(t, drained)
	t.Logf("request seen to the agent's reboot: %s; its node booted again %s later; uncordoned %s after the boot (%s from the sentinel to the end)",
		at.Sub(asked).Round(time.Millisecond), up.Sub(at).Round(time.Millisecond),
		uncordoned.Sub(up).Round(time.Millisecond), uncordoned.Sub(requested).Round(time.Millisecond))
	require.True(t, in.agentReady(drained.Name)(ctx), "the agent on %s not ready after its reboot", drained.Name)
}
