package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// orphanDeletion is the component that lets the coordinator delete drained orphaned PVCs.
const orphanDeletion = "orphan-deletion"

// withComponent renders dir (relative to deploy/) with components/<component> added, as an
// operator's kustomization would.
func withComponent(t *testing.T, c *testenv.Cluster, dir, component string) []byte {
	t.Helper()
	tmp := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		require.NoError(t, err)
		r, err := filepath.Rel(tmp, abs) // kustomize wants relative paths
		require.NoError(t, err)
		return r
	}
	k := "resources:\n- " + rel(dir) + "\ncomponents:\n- " + rel(filepath.Join("components", component)) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o600))
	return kubectl(t, c, nil, "kustomize", tmp)
}

// localPVCWithDrainer labels ns to allow drainers and creates there a PVC bound to a local PV on
// node, annotated with a drainer template; it returns the PVC's name.
func localPVCWithDrainer(t *testing.T, c *testenv.Cluster, ns, node string) string {
	t.Helper()
	ctx := context.Background()
	_, err := c.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"edgedrain.io/drainers":"allowed"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + ns}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/data"}},
		ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "data"},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}},
	}}
	_, err = c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := claim("data")
	pvc.Spec.VolumeName = pv.Name
	pvc.Annotations = map[string]string{volumes.DrainerTemplateAnnotation: `{"template":{"spec":{"containers":[{"name":"sync","image":"registry.invalid/sync:1"}]}}}`}
	_, err = c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	require.NoError(t, err)
	return pvc.Name
}

// claim is an unbound 1 Gi PVC without a storage class.
func claim(name string) *corev1.PersistentVolumeClaim {
	empty := ""
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &empty,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
}

// The base grants no PVC delete; the orphan-deletion component grants exactly that.
func TestOrphanDeletionRBACIsSeparate(t *testing.T) {
	c, _, client := asCoordinator(t)
	ctx := context.Background()
	ns := c.Namespace(t)
	pvc := claim("orphan")
	_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	require.NoError(t, err)

	// The base's reads and label patch work; delete does not.
	_, err = client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	err = client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "orphan", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "the base lets the coordinator delete PVCs: %v", err)

	applyRBAC(t, c, withComponent(t, c, "base", orphanDeletion))
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "edgedrain-coordinator-orphan-deletion", metav1.DeleteOptions{})
		_ = c.Client.RbacV1().ClusterRoles().Delete(ctx, "edgedrain-coordinator-orphan-deletion", metav1.DeleteOptions{})
	})
	require.Eventually(t, func() bool {
		err = client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "orphan", metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err)
	}, 10*time.Second, 50*time.Millisecond, "with the component the coordinator may delete PVCs: %v", err)
	// Only delete: the component adds no other verb (creating PVCs stays forbidden).
	_, err = client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "the component grants more than delete: %v", err)
}

// The base grants no Node delete; the decommission component grants delete on Nodes, PVCs and
// pods, and nothing more.
func TestDecommissionRBACIsSeparate(t *testing.T) {
	c, _, client := asCoordinator(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "retired-" + strings.ToLower(rand.Text()[:6])}}
	_, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}) })

	err = client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "the base lets the coordinator delete Nodes: %v", err)

	applyRBAC(t, c, withComponent(t, c, "base", "decommission"))
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "edgedrain-coordinator-decommission", metav1.DeleteOptions{})
		_ = c.Client.RbacV1().ClusterRoles().Delete(ctx, "edgedrain-coordinator-decommission", metav1.DeleteOptions{})
	})
	require.Eventually(t, func() bool {
		err = client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err)
	}, 10*time.Second, 50*time.Millisecond, "with the component the coordinator may delete Nodes: %v", err)
	ns := c.Namespace(t)
	_, err = c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("local"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NoError(t, client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "local", metav1.DeleteOptions{}))
	err = client.CoreV1().Pods(ns).Delete(ctx, "none", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsNotFound(err), "with the component the coordinator may delete pods: %v", err)
	// Only delete: creating a Node stays forbidden.
	_, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "the component grants more than delete: %v", err)
}

// decodeKind finds the one object of kind and name in rendered manifests and decodes it into into.
func decodeKind(t *testing.T, rendered []byte, kind, name string, into any) {
	t.Helper()
	for _, doc := range documents(t, rendered) {
		meta, _ := doc["metadata"].(map[string]any)
		if doc["kind"] == kind && meta["name"] == name {
			raw, err := json.Marshal(doc)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, into))
			return
		}
	}
	t.Fatalf("no %s %s in the manifests", kind, name)
}

// The NetworkPolicy selects the coordinator's pods and admits to the bus port exactly the pods of
// the agent DaemonSet and of the coordinator, by the labels their templates carry; metrics stay
// reachable.
func TestNetworkPolicyAdmitsTheAgentsAndCoordinator(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	for _, dir := range []string{"base", "overlays/external-nats"} {
		t.Run(dir, func(t *testing.T) {
			rendered := kubectl(t, c, nil, "kustomize", dir)
			var np networkingv1.NetworkPolicy
			var coord appsv1.Deployment
			var agent appsv1.DaemonSet
			decodeKind(t, rendered, "NetworkPolicy", "edgedrain-coordinator", &np)
			decodeKind(t, rendered, "Deployment", "edgedrain-coordinator", &coord)
			decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &agent)
			assert.Equal(t, coord.Namespace, np.Namespace)
			assert.Equal(t, agent.Namespace, np.Namespace, "a bare podSelector admits pods of the policy's namespace only")
			assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
			matches := func(sel *metav1.LabelSelector, podLabels map[string]string) bool {
				s, err := metav1.LabelSelectorAsSelector(sel)
				require.NoError(t, err)
				return s.Matches(labels.Set(podLabels))
			}
			require.True(t, matches(&np.Spec.PodSelector, coord.Spec.Template.Labels), "the policy does not select the coordinator's pods")
			require.False(t, matches(&np.Spec.PodSelector, agent.Spec.Template.Labels), "the policy selects the agents")

			from := map[int32][]networkingv1.NetworkPolicyPeer{}
			for _, rule := range np.Spec.Ingress {
				for _, port := range rule.Ports {
					require.NotNil(t, port.Port)
					require.Equal(t, intstr.Int, port.Port.Type, "numbered ports")
					from[port.Port.IntVal] = append(from[port.Port.IntVal], rule.From...)
				}
			}
			assert.Len(t, from, 2, "only the bus and the metrics ports: %v", from)
			bus := from[4222]
			require.Len(t, bus, 2, "the bus port admits two kinds of pods")
			for i, podLabels := range []map[string]string{agent.Spec.Template.Labels, coord.Spec.Template.Labels} {
				assert.Nil(t, bus[i].NamespaceSelector)
				assert.Nil(t, bus[i].IPBlock)
				require.NotNil(t, bus[i].PodSelector)
				assert.True(t, matches(bus[i].PodSelector, podLabels), "peer %d does not match %v", i, podLabels)
			}
			assert.False(t, matches(bus[1].PodSelector, agent.Spec.Template.Labels), "the coordinator's peer admits agents")
			_, metrics := from[9090]
			assert.True(t, metrics)
			assert.Empty(t, from[9090], "metrics and probes reachable from anywhere")
			if dir == "base" { // with its embedded bus the coordinator serves both ports
				served := map[int32]bool{}
				for _, p := range coord.Spec.Template.Spec.Containers[0].Ports {
					served[p.ContainerPort] = true
				}
				for port := range from {
					assert.True(t, served[port], "the policy opens port %d, which the coordinator does not serve", port)
				}
			}
		})
	}
}
