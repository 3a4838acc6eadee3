// Package vms tells the coordinator about the virtual machines on a node being drained, run by
// KubeVirt: why the eviction of a VM's virt-launcher pod is refused (KubeVirt is live-migrating
// the VM, or the VM cannot migrate), and, when asked to, stops a VM that cannot migrate so that
// its VirtualMachine starts it again on another node. It follows KubeVirt's own eviction flow
// (kubevirt.io/kubevirt: virt-api's pod-eviction admitter refuses a launcher pod's eviction with
// 429 and marks the VMI status.evacuationNodeName; virt-controller's evacuation controller then
// creates a VirtualMachineInstanceMigration; after it succeeds the source pod completes).
package vms

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// KubeVirt's resources and names read here (kubevirt.io/api core/v1).
var (
	VMIs       = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	VMs        = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}
	Migrations = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstancemigrations"}
)

const (
	// LauncherLabel is the label (value "virt-launcher") of a VM's virt-launcher pod.
	LauncherLabel = "kubevirt.io"
	// DomainAnnotation on a virt-launcher pod names its VirtualMachineInstance.
	DomainAnnotation = "kubevirt.io/domain"
	// MigrationVMILabel on a VirtualMachineInstanceMigration names its VMI.
	MigrationVMILabel = "kubevirt.io/vmi-name"
)

// NonMigratable says what the drain does with a VM whose eviction KubeVirt refuses because it
// cannot live-migrate (eviction strategy LiveMigrate, condition LiveMigratable not True).
type NonMigratable int

const (
	// Block leaves the VM running: the drain waits, naming the VM and why it cannot migrate.
	Block NonMigratable = iota
	// Restart stops the VM (deletes its VirtualMachineInstance) when its VirtualMachine's
	// runStrategy is Always, which makes KubeVirt start it again on another node; a VM that
	// would not be started again (no VirtualMachine, another runStrategy) still blocks.
	Restart
)

// ParseNonMigratable reads "block" or "restart".
func ParseNonMigratable(s string) (NonMigratable, error) {
	switch s {
	case "block":
		return Block, nil
	case "restart":
		return Restart, nil
	}
	return Block, fmt.Errorf("unknown action for VMs that cannot migrate %q: want block or restart", s)
}

func (m NonMigratable) String() string {
	if m == Restart {
		return "restart"
	}
	return "block"
}

// KubeVirt reads (and, under Restart, stops) KubeVirt's VMs through a dynamic client. A cluster
// without KubeVirt answers NotFound, and KubeVirt then has nothing to say.
type KubeVirt struct {
	dyn  dynamic.Interface
	mode NonMigratable
	log  logrus.FieldLogger
	now  func() time.Time
}

// New returns the KubeVirt reader; log may be nil.
func New(dyn dynamic.Interface, mode NonMigratable, log logrus.FieldLogger) *KubeVirt {
	if log == nil {
		l := logrus.New()
		l.SetLevel(logrus.PanicLevel)
		log = l
	}
	return &KubeVirt{dyn: dyn, mode: mode, log: log, now: time.Now}
}

// IsLauncher reports whether pod is a VM's virt-launcher pod, and names its VMI.
func IsLauncher(pod *corev1.Pod) (string, bool) {
	if pod.Labels[LauncherLabel] != "virt-launcher" {
		return "", false
	}
	if name := pod.Annotations[DomainAnnotation]; name != "" {
		return name, true
	}
	if c := metav1.GetControllerOfNoCopy(pod); c != nil && c.Kind == "VirtualMachineInstance" {
		return c.Name, true
	}
	return "", false
}

// vmi is what a VirtualMachineInstance says about its migration.
type vmi struct {
	u                             *unstructured.Unstructured
	node, evacuation, strategy    string
	migratable                    string // LiveMigratable's status: "True", "False", "" (not reported yet)
	whyNot                        string // its reason and message when not True
	target                        string
	started                       time.Time
	completed, failed             bool
	failure, owner, ownerKind, ns string
}

func (k *KubeVirt) getVMI(ctx context.Context, ns, name string) (*vmi, error) {
	u, err := k.dyn.Resource(VMIs).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	v := &vmi{u: u, ns: ns,
		node:       str(u.Object, "status", "nodeName"),
		evacuation: str(u.Object, "status", "evacuationNodeName"),
		strategy:   str(u.Object, "spec", "evictionStrategy"),
		target:     str(u.Object, "status", "migrationState", "targetNode"),
		failure:    str(u.Object, "status", "migrationState", "failureReason")}
	v.completed, _, _ = unstructured.NestedBool(u.Object, "status", "migrationState", "completed")
	v.failed, _, _ = unstructured.NestedBool(u.Object, "status", "migrationState", "failed")
	if t, err := time.Parse(time.RFC3339, str(u.Object, "status", "migrationState", "startTimestamp")); err == nil {
		v.started = t
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "LiveMigratable" {
			continue
		}
		v.migratable, _ = m["status"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		v.whyNot = strings.TrimSpace(strings.Trim(reason+": "+msg, ": "))
	}
	if c := metav1.GetControllerOfNoCopy(u); c != nil {
		v.owner, v.ownerKind = c.Name, c.Kind
	}
	return v, nil
}

// ownedBy reports whether pod is a launcher pod of this VMI (not of an earlier one of the same
// name): its controller reference, or its kubevirt.io/created-by label, names the VMI's UID.
func ownedBy(pod *corev1.Pod, v *vmi) bool {
	if c := metav1.GetControllerOfNoCopy(pod); c != nil && c.Kind == "VirtualMachineInstance" {
		return c.UID == v.u.GetUID()
	}
	if uid := pod.Labels["kubevirt.io/created-by"]; uid != "" {
		return uid == string(v.u.GetUID())
	}
	return true
}

func str(obj map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(obj, path...)
	return s
}

// wantsMigration reports whether KubeVirt refuses the eviction of v's pod to live-migrate it
// (LiveMigrate, or LiveMigrateIfPossible on a migratable VM), and cannot (LiveMigratable not True)
// under LiveMigrate.
func (v *vmi) wantsMigration() (wants, cannot bool) {
	switch v.strategy {
	case "LiveMigrate":
		return true, v.migratable != "True"
	case "LiveMigrateIfPossible":
		return v.migratable == "True", false
	}
	return false, false
}

// Explain says why the eviction of pod, a VM's virt-launcher pod, was refused, from its VMI
// and its newest migration; ok is false for any other pod, or when there is nothing to add. Under
// Restart it stops a VM that cannot migrate and whose VirtualMachine starts it again.
func (k *KubeVirt) Explain(ctx context.Context, pod corev1.Pod, refusal error) (string, bool) {
	name, ok := IsLauncher(&pod)
	if !ok || refusal == nil {
		return "", false
	}
	v, err := k.getVMI(ctx, pod.Namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", false
		}
		return fmt.Sprintf("VM %s/%s: cannot read its VirtualMachineInstance: %v; eviction refused: %v", pod.Namespace, name, err, refusal), true
	}
	vm := pod.Namespace + "/" + name
	if !ownedBy(&pod, v) {
		// The pod's VMI is gone: this VMI is a new one of the same VM (its VirtualMachine
		// started it again); KubeVirt removes the old pod.
		return fmt.Sprintf("VM %s was stopped; waiting for its old virt-launcher pod to go", vm), true
	}
	if _, cannot := v.wantsMigration(); cannot {
		return k.cannotMigrate(ctx, v, &pod, vm), true
	}
	switch {
	case v.target == pod.Spec.NodeName && v.node != pod.Spec.NodeName && !v.completed && !v.failed:
		// This pod is the target of a migration that began before the cordon.
		return fmt.Sprintf("VM %s is migrating onto this node from %s; KubeVirt moves it again once that ends", vm, v.node), true
	case v.node != "" && v.node != pod.Spec.NodeName:
		return fmt.Sprintf("VM %s migrated to %s; waiting for its old virt-launcher pod to finish", vm, v.node), true
	case v.strategy == "External" && v.evacuation != "":
		return fmt.Sprintf("VM %s: eviction strategy External: waiting for an outside controller to move or stop it", vm), true
	case v.evacuation == "":
		return "", false
	case v.target != "" && !v.completed && !v.failed:
		return fmt.Sprintf("VM %s migrating to %s: %s", vm, v.target, k.progress(ctx, v, name)), true
	case v.failed:
		why := ""
		if v.failure != "" {
			why = " (" + v.failure + ")"
		}
		return fmt.Sprintf("VM %s: live migration to %s failed%s; KubeVirt tries again", vm, v.target, why), true
	}
	return fmt.Sprintf("VM %s: live migration requested, waiting for KubeVirt to start it (%s)", vm, k.progress(ctx, v, name)), true
}

// progress describes the VM's newest migration: its phase and how long it has run. KubeVirt's
// API has no progress figure (percent or bytes live only in virt-handler's metrics,
// kubevirt_vmi_migration_data_processed_bytes and _remaining_bytes).
func (k *KubeVirt) progress(ctx context.Context, v *vmi, name string) string {
	phase := "no migration yet"
	list, err := k.dyn.Resource(Migrations).Namespace(v.ns).List(ctx, metav1.ListOptions{LabelSelector: MigrationVMILabel + "=" + name})
	if err == nil && len(list.Items) > 0 {
		items := list.Items
		sort.Slice(items, func(i, j int) bool {
			a, b := items[i].GetCreationTimestamp(), items[j].GetCreationTimestamp()
			return a.Before(&b)
		})
		newest := items[len(items)-1]
		if p := str(newest.Object, "status", "phase"); p != "" {
			phase = "migration " + newest.GetName() + " " + p
		} else {
			phase = "migration " + newest.GetName() + " Pending"
		}
	}
	if !v.started.IsZero() {
		phase += fmt.Sprintf(" for %s", k.now().Sub(v.started).Round(time.Second))
	}
	return phase
}

// cannotMigrate handles a VM KubeVirt will not let go because it cannot live-migrate: under
// Restart, stop it if its VirtualMachine starts it again elsewhere; else name it and why.
func (k *KubeVirt) cannotMigrate(ctx context.Context, v *vmi, pod *corev1.Pod, vm string) string {
	why := v.whyNot
	if why == "" {
		why = "KubeVirt has not reported it live-migratable"
	}
	base := fmt.Sprintf("VM %s cannot live-migrate (%s)", vm, why)
	if k.mode == Block {
		return base + "; eviction strategy LiveMigrate keeps it here (--non-migratable-vms=block)"
	}
	if err := k.mayStop(ctx, v, pod); err != nil {
		return fmt.Sprintf("%s; not stopped: %v (--non-migratable-vms=restart)", base, err)
	}
	uid := v.u.GetUID()
	err := k.dyn.Resource(VMIs).Namespace(v.ns).Delete(ctx, v.u.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Sprintf("%s; stopping it failed: %v", base, err)
	}
	if v.u.GetDeletionTimestamp() == nil {
		k.log.WithField("vm", vm).Warnf("stopped VM (it cannot live-migrate: %s); its VirtualMachine starts it again on another node", why)
	}
	return base + "; stopped, its VirtualMachine (runStrategy Always) starts it again on another node (--non-migratable-vms=restart)"
}

// mayStop reports why v may not be stopped to start again elsewhere: KubeVirt has not said it
// cannot migrate (the condition is not reported yet), its VirtualMachine would not start it
// again, or a PodDisruptionBudget selecting its pod allows no disruption now (KubeVirt's
// webhook refuses the eviction before the budget is ever asked, so the budget is asked here).
func (k *KubeVirt) mayStop(ctx context.Context, v *vmi, pod *corev1.Pod) error {
	if v.migratable != "False" {
		return errors.New("KubeVirt has not reported whether it can live-migrate")
	}
	if err := k.restartable(ctx, v); err != nil {
		return err
	}
	list, err := k.dyn.Resource(budgets).Namespace(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("read its PodDisruptionBudgets: %w", err)
	}
	for _, u := range list.Items {
		var pdb policyv1.PodDisruptionBudget
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pdb); err != nil {
			return fmt.Errorf("PodDisruptionBudget %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) { // policy/v1: {} selects every pod
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 {
			return fmt.Errorf("PodDisruptionBudget %s/%s allows no disruption now", pdb.Namespace, pdb.Name)
		}
	}
	return nil
}

var budgets = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}

// errNotRestarted says why stopping a VM would not start it again.
var errNotRestarted = errors.New("it would not be started again")

// restartable reports whether deleting v makes KubeVirt start it again: it belongs to a
// VirtualMachine whose runStrategy is Always (or spec.running true).
func (k *KubeVirt) restartable(ctx context.Context, v *vmi) error {
	if v.ownerKind != "VirtualMachine" {
		return fmt.Errorf("%w: no VirtualMachine owns it", errNotRestarted)
	}
	vm, err := k.dyn.Resource(VMs).Namespace(v.ns).Get(ctx, v.owner, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read its VirtualMachine: %w", err)
	}
	strategy := str(vm.Object, "spec", "runStrategy")
	if running, ok, _ := unstructured.NestedBool(vm.Object, "spec", "running"); ok && strategy == "" {
		if running {
			strategy = "Always"
		} else {
			strategy = "Halted"
		}
	}
	if strategy != "Always" {
		return fmt.Errorf("%w: its VirtualMachine's runStrategy is %q, not Always", errNotRestarted, strategy)
	}
	return nil
}

// Predict names the VMs on node whose eviction KubeVirt would refuse because they cannot
// live-migrate (blockers under Block, notes under Restart), and notes those it would migrate.
func (k *KubeVirt) Predict(ctx context.Context, pods []corev1.Pod) (blockers map[string]string, notes []string, err error) {
	blockers = map[string]string{}
	for _, pod := range pods {
		name, ok := IsLauncher(&pod)
		if !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		v, err := k.getVMI(ctx, pod.Namespace, name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("VM %s/%s: %w", pod.Namespace, name, err)
		}
		if !ownedBy(&pod, v) {
			continue
		}
		vm := pod.Namespace + "/" + name
		wants, cannot := v.wantsMigration()
		switch {
		case cannot && k.mode == Restart && k.mayStop(ctx, v, &pod) == nil:
			notes = append(notes, fmt.Sprintf("VM %s cannot live-migrate (%s): it would be stopped and started again on another node", vm, v.whyNot))
		case cannot:
			why := v.whyNot
			if why == "" {
				why = "KubeVirt has not reported it live-migratable"
			}
			blockers[pod.Namespace+"/"+pod.Name] = fmt.Sprintf("VM %s cannot live-migrate (%s)", vm, why)
		case wants:
			notes = append(notes, fmt.Sprintf("VM %s would be live-migrated by KubeVirt", vm))
		case v.strategy == "" || v.strategy == "None" || v.strategy == "LiveMigrateIfPossible":
			notes = append(notes, fmt.Sprintf("VM %s would be shut down (eviction strategy %q)", vm, v.strategy))
		}
	}
	return blockers, notes, nil
}
