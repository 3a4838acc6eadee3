package vms

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/utils/ptr"
)

var refused = errors.New(`admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: ...`)

func fakeVMI(name string, status map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "namespace": "shop", "uid": "u-" + name,
			"ownerReferences": []any{map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name, "uid": "vm-" + name, "controller": true}}},
		"spec":   map[string]any{"evictionStrategy": "LiveMigrate"},
		"status": status,
	}}
}

func fakeVM(name, runStrategy string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": name, "namespace": "shop", "uid": "vm-" + name},
		"spec":     map[string]any{"runStrategy": runStrategy}}}
}

func launcher(vmi, node string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-" + vmi + "-x", Namespace: "shop",
		Labels:          map[string]string{LauncherLabel: "virt-launcher", "app": vmi},
		Annotations:     map[string]string{DomainAnnotation: vmi},
		OwnerReferences: []metav1.OwnerReference{{Kind: "VirtualMachineInstance", Name: vmi, UID: types.UID("u-" + vmi), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node}}
}

func fakeKubeVirt(mode NonMigratable, objs ...runtime.Object) (*KubeVirt, *dynfake.FakeDynamicClient) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		Migrations: "VirtualMachineInstanceMigrationList", budgets: "PodDisruptionBudgetList"}, objs...)
	return New(dyn, mode, nil), dyn
}

func notMigratable(reported bool) map[string]any {
	st := map[string]any{"nodeName": "drained"}
	if reported {
		st["conditions"] = []any{map[string]any{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable", "message": "PVC not shared"}}
	}
	return st
}

func vmiExists(t *testing.T, dyn *dynfake.FakeDynamicClient, name string) bool {
	t.Helper()
	_, err := dyn.Resource(VMIs).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// The target pod of a migration onto the drained node (begun before the cordon) is not "an old
// pod finishing" (review).
func TestExplainTargetOfAMigrationOntoThisNode(t *testing.T) {
	k, _ := fakeKubeVirt(Block, fakeVMI("db", map[string]any{"nodeName": "src",
		"conditions":     []any{map[string]any{"type": "LiveMigratable", "status": "True"}},
		"migrationState": map[string]any{"targetNode": "drained", "sourceNode": "src"}}))
	why, ok := k.Explain(context.Background(), launcher("db", "drained"), refused)
	require.True(t, ok)
	assert.Equal(t, "VM shop/db is migrating onto this node from src; KubeVirt moves it again once that ends", why)
}

// Under restart a VM is stopped only when KubeVirt has said it cannot migrate, its VirtualMachine
// starts it again, and no PodDisruptionBudget of its pod forbids a disruption now (KubeVirt's
// webhook refuses the eviction before the budget is asked; review).
func TestRestartStopsOnlyWhatMayBeStopped(t *testing.T) {
	budget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": map[string]any{"name": "guests", "namespace": "shop"},
		"spec":     map[string]any{"minAvailable": int64(1), "selector": map[string]any{"matchLabels": map[string]any{"app": "db"}}},
		"status":   map[string]any{"disruptionsAllowed": int64(0), "currentHealthy": int64(1), "desiredHealthy": int64(1), "expectedPods": int64(1)}}}
	for _, tt := range []struct {
		name    string
		objs    []runtime.Object
		stopped bool
		reason  string
	}{
		{"may be stopped", []runtime.Object{fakeVMI("db", notMigratable(true)), fakeVM("db", "Always")}, true,
			"stopped, its VirtualMachine (runStrategy Always) starts it again on another node"},
		{"its budget allows no disruption", []runtime.Object{fakeVMI("db", notMigratable(true)), fakeVM("db", "Always"), budget}, false,
			"not stopped: PodDisruptionBudget shop/guests allows no disruption now"},
		{"not reported yet", []runtime.Object{fakeVMI("db", notMigratable(false)), fakeVM("db", "Always")}, false,
			"not stopped: KubeVirt has not reported whether it can live-migrate"},
		{"would not start again", []runtime.Object{fakeVMI("db", notMigratable(true)), fakeVM("db", "RerunOnFailure")}, false,
			`its VirtualMachine's runStrategy is "RerunOnFailure", not Always`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, dyn := fakeKubeVirt(Restart, tt.objs...)
			why, ok := k.Explain(context.Background(), launcher("db", "drained"), refused)
			require.True(t, ok)
			assert.Contains(t, why, tt.reason)
			assert.Equal(t, !tt.stopped, vmiExists(t, dyn, "db"), "VMI still there")
		})
	}
}

// Pods that are not VM launchers, and launchers of VMs KubeVirt does not know, are not explained.
func TestExplainOnlyVMs(t *testing.T) {
	k, _ := fakeKubeVirt(Block)
	plain := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}
	_, ok := k.Explain(context.Background(), plain, refused)
	assert.False(t, ok)
	_, ok = k.Explain(context.Background(), launcher("gone", "drained"), refused)
	assert.False(t, ok)
	m, err := ParseNonMigratable("stop")
	assert.Error(t, err)
	assert.Equal(t, Block, m)
}
