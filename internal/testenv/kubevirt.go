package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// KubeVirt plays KubeVirt's part in one test namespace, as kubevirt.io/kubevirt v1.9 behaves:
//   - virt-api's pod-eviction webhook (a real admission webhook the API server calls): the
//     eviction of a VM's virt-launcher pod is refused with 429; under eviction strategy
//     LiveMigrate the VMI is marked status.evacuationNodeName; a VM that cannot live-migrate is
//     refused for good; a finished launcher pod goes;
//   - virt-controller's evacuation and migration controllers: a marked VMI gets a
//     VirtualMachineInstanceMigration, whose phases advance, with a target launcher pod on the
//     target node and the VMI's migrationState; after MigrationTime it succeeds: the VMI runs on
//     the target, its mark is cleared and the source pod completes (phase Succeeded);
//   - the VirtualMachine controller: a VM with runStrategy Always whose VMI is gone gets a new one.
type KubeVirt struct {
	c  *Cluster
	ns string
	// Target is where migrations go.
	Target string
	// MigrationTime is how long a migration runs before it succeeds.
	MigrationTime time.Duration

	seen atomic.Int64 // eviction reviews the webhook answered
}

var (
	kvVMIs       = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	kvVMs        = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}
	kvMigrations = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstancemigrations"}
)

// StartKubeVirt starts KubeVirt's stand-in for namespace ns until the test ends, migrating to
// target; it returns once the API server calls its webhook.
func StartKubeVirt(t testing.TB, c *Cluster, ns, target string, migrationTime time.Duration) *KubeVirt {
	t.Helper()
	k := &KubeVirt{c: c, ns: ns, Target: target, MigrationTime: migrationTime}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k.serveWebhook(t, ctx)
	go k.controllers(ctx)
	return k
}

// notMigratableAnnotation on a test VirtualMachine keeps VM.NotMigratable for the VMIs it starts.
const notMigratableAnnotation = "edgedrain.test/not-migratable"

// VM describes a VM for CreateVM.
type VM struct {
	Name, Node string
	// Strategy is spec.evictionStrategy: LiveMigrate, LiveMigrateIfPossible, External, None.
	Strategy string
	// NotMigratable sets condition LiveMigratable False with this reason ("" : True).
	NotMigratable string
	// RunStrategy, when set, makes a VirtualMachine of that runStrategy own the VMI.
	RunStrategy string
}

// CreateVM creates the VM's VirtualMachine (if any), its running VMI and its virt-launcher pod
// on vm.Node, shaped as KubeVirt makes them; it returns the pod.
func (k *KubeVirt) CreateVM(t testing.TB, vm VM) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var owner []any
	if vm.RunStrategy != "" {
		obj := kvObject("VirtualMachine", vm.Name, k.ns, map[string]any{"runStrategy": vm.RunStrategy,
			"template": map[string]any{"spec": map[string]any{"evictionStrategy": vm.Strategy}}})
		obj.SetAnnotations(map[string]string{notMigratableAnnotation: vm.NotMigratable})
		created, err := k.c.Dynamic.Resource(kvVMs).Namespace(k.ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create VirtualMachine: %v", err)
		}
		owner = []any{map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": vm.Name,
			"uid": string(created.GetUID()), "controller": true, "blockOwnerDeletion": true}}
	}
	vmi, err := k.createVMI(ctx, vm.Name, vm.Node, vm.Strategy, vm.NotMigratable, owner)
	if err != nil {
		t.Fatalf("create VMI: %v", err)
	}
	pod, err := k.createLauncher(ctx, vmi, vm.Node)
	if err != nil {
		t.Fatalf("create virt-launcher pod: %v", err)
	}
	return pod
}

func kvObject(kind, name, ns string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("kubevirt.io/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func (k *KubeVirt) createVMI(ctx context.Context, name, node, strategy, notMigratable string, owner []any) (*unstructured.Unstructured, error) {
	obj := kvObject("VirtualMachineInstance", name, k.ns, map[string]any{"evictionStrategy": strategy, "domain": map[string]any{}})
	if owner != nil {
		obj.Object["metadata"].(map[string]any)["ownerReferences"] = owner
	}
	cond := map[string]any{"type": "LiveMigratable", "status": "True", "lastProbeTime": nil, "lastTransitionTime": nil}
	if notMigratable != "" {
		cond["status"], cond["reason"] = "False", notMigratable
		cond["message"] = "cannot migrate VMI: PVC " + name + "-disk is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
	}
	phase := "Running"
	if node == "" {
		phase = "Scheduling"
	}
	obj.Object["status"] = map[string]any{"phase": phase, "nodeName": node, "conditions": []any{cond}}
	return k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Create(ctx, obj, metav1.CreateOptions{})
}

func (k *KubeVirt) createLauncher(ctx context.Context, vmi *unstructured.Unstructured, node string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "virt-launcher-" + vmi.GetName() + "-", Namespace: k.ns,
			Labels:      map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": string(vmi.GetUID())},
			Annotations: map[string]string{"kubevirt.io/domain": vmi.GetName(), "kubectl.kubernetes.io/default-container": "compute"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: vmi.GetName(),
				UID: vmi.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		// A short grace period keeps the tests quick (KubeVirt takes the VMI's, 30 s by default).
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{Name: "compute", Image: "quay.io/kubevirt/virt-launcher"}}},
	}
	return k.c.Client.CoreV1().Pods(k.ns).Create(ctx, pod, metav1.CreateOptions{})
}

// serveWebhook serves virt-api's eviction webhook over TLS on loopback, registers it for ns and
// waits until the API server calls it.
func (k *KubeVirt) serveWebhook(t testing.TB, ctx context.Context) {
	t.Helper()
	ca, err := newCertAuthority()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.issue("virt-api", nil, []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(k.review), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	name := "virt-launcher-eviction-interceptor." + k.ns
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "virt-launcher-eviction-interceptor.kubevirt.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL: ptr.To("https://" + ln.Addr().String() + "/pod-eviction-validate"), CABundle: ca.certPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": k.ns}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "virt-launcher", Expression: `object.metadata.name.startsWith("virt-launcher")`}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(10)),
		}}}
	if _, err := k.c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the eviction webhook: %v", err)
	}
	t.Cleanup(func() {
		_ = k.c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The API server picks the configuration up a moment later: evict a probe pod (dry run)
	// until the webhook sees it.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-probe", Namespace: k.ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}}}
	if _, err := k.c.Client.CoreV1().Pods(k.ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the webhook probe pod: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for k.seen.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the API server never called the eviction webhook")
		}
		_ = k.c.Client.PolicyV1().Evictions(k.ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: probe.Name, Namespace: k.ns},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		time.Sleep(50 * time.Millisecond)
	}
	_ = k.c.Client.CoreV1().Pods(k.ns).Delete(ctx, probe.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
}

// review answers one AdmissionReview as virt-api's PodEvictionAdmitter does.
func (k *KubeVirt) review(w http.ResponseWriter, r *http.Request) {
	var rev admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	k.seen.Add(1)
	allowed, msg := k.admit(r.Context(), rev.Request)
	resp := &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: allowed}
	if !allowed {
		resp.Result = &metav1.Status{Code: http.StatusTooManyRequests, Message: msg}
	}
	rev.Response, rev.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rev)
}

func (k *KubeVirt) admit(ctx context.Context, req *admissionv1.AdmissionRequest) (bool, string) {
	pod, err := k.c.Client.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil || pod.Labels["kubevirt.io"] != "virt-launcher" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true, ""
	}
	name := pod.Annotations["kubevirt.io/domain"]
	if name == "" {
		return true, ""
	}
	vmi, err := k.c.Dynamic.Resource(kvVMIs).Namespace(req.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, "kubevirt failed getting the vmi: " + err.Error()
	}
	strategy, _, _ := unstructured.NestedString(vmi.Object, "spec", "evictionStrategy")
	migratable := liveMigratable(vmi)
	switch {
	case strategy == "LiveMigrate" && !migratable:
		return false, fmt.Sprintf("VMI %s is configured with an eviction strategy but is not live-migratable", name)
	case strategy == "LiveMigrate", strategy == "LiveMigrateIfPossible" && migratable, strategy == "External":
	default:
		return true, ""
	}
	evacuation, _, _ := unstructured.NestedString(vmi.Object, "status", "evacuationNodeName")
	nodeName, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	triggered := fmt.Sprintf("Eviction triggered evacuation of VMI \"%s/%s\"", req.Namespace, name)
	switch {
	case evacuation != "":
		return false, "Evacuation in progress: " + triggered
	case nodeName != pod.Spec.NodeName:
		return false, "Eviction request for target Pod"
	}
	if req.DryRun == nil || !*req.DryRun {
		patch := fmt.Appendf(nil, `[{"op":"add","path":"/status/evacuationNodeName","value":%q}]`, pod.Spec.NodeName)
		if _, err := k.c.Dynamic.Resource(kvVMIs).Namespace(req.Namespace).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return false, "kubevirt failed marking the vmi for eviction: " + err.Error()
		}
	}
	return false, triggered
}

func str(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

func liveMigratable(vmi *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(vmi.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "LiveMigratable" {
			return m["status"] == "True"
		}
	}
	return false
}

// controllers runs the evacuation, migration and VirtualMachine controllers until ctx ends.
func (k *KubeVirt) controllers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		_ = k.evacuate(ctx)
		_ = k.migrate(ctx)
		_ = k.removeOrphanLaunchers(ctx)
		_ = k.restartVMs(ctx)
	}
}

// evacuate creates a migration for each marked VMI that can migrate and has none under way.
func (k *KubeVirt) evacuate(ctx context.Context) error {
	vmis, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, vmi := range vmis.Items {
		evacuation, _, _ := unstructured.NestedString(vmi.Object, "status", "evacuationNodeName")
		nodeName, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
		strategy, _, _ := unstructured.NestedString(vmi.Object, "spec", "evictionStrategy")
		if evacuation == "" || nodeName != evacuation || !liveMigratable(&vmi) || strategy == "External" || k.migrating(ctx, vmi.GetName()) {
			continue
		}
		m := kvObject("VirtualMachineInstanceMigration", "", k.ns, map[string]any{"vmiName": vmi.GetName(), "priority": "system-critical"})
		m.SetName("")
		m.SetGenerateName("kubevirt-evacuation-")
		m.SetAnnotations(map[string]string{"kubevirt.io/evacuationMigration": evacuation})
		m.SetLabels(map[string]string{"kubevirt.io/vmi-name": vmi.GetName()})
		created, err := k.c.Dynamic.Resource(kvMigrations).Namespace(k.ns).Create(ctx, m, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Object["status"] = map[string]any{"phase": "Scheduling"}
		if _, err := k.c.Dynamic.Resource(kvMigrations).Namespace(k.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// migrating reports whether vmi has a migration that has not finished.
func (k *KubeVirt) migrating(ctx context.Context, vmi string) bool {
	list, err := k.c.Dynamic.Resource(kvMigrations).Namespace(k.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io/vmi-name=" + vmi})
	if err != nil {
		return true
	}
	for _, m := range list.Items {
		if p, _, _ := unstructured.NestedString(m.Object, "status", "phase"); p != "Succeeded" && p != "Failed" {
			return true
		}
	}
	return false
}

// migrate moves each unfinished migration on: it starts the target pod and runs (phase Running,
// the VMI's migrationState), and after MigrationTime succeeds.
func (k *KubeVirt) migrate(ctx context.Context) error {
	list, err := k.c.Dynamic.Resource(kvMigrations).Namespace(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		m := &list.Items[i]
		phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
		name, _, _ := unstructured.NestedString(m.Object, "spec", "vmiName")
		switch phase {
		case "Scheduling":
			if err := k.startMigration(ctx, m, name); err != nil {
				return err
			}
		case "Running":
			started, err := time.Parse(time.RFC3339Nano, str(m, "status", "migrationState", "startTimestamp"))
			if err == nil && time.Since(started) >= k.MigrationTime {
				if err := k.finishMigration(ctx, m, name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (k *KubeVirt) startMigration(ctx context.Context, m *unstructured.Unstructured, name string) error {
	vmi, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	target, err := k.createLauncher(ctx, vmi, k.Target)
	if err != nil {
		return err
	}
	source, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	state := map[string]any{"sourceNode": source, "targetNode": k.Target, "targetPod": target.Name, "mode": "PreCopy",
		"migrationUid": string(m.GetUID()), "startTimestamp": time.Now().UTC().Format(time.RFC3339Nano)}
	if err := unstructured.SetNestedField(vmi.Object, state, "status", "migrationState"); err != nil {
		return err
	}
	if _, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		return err
	}
	m.Object["status"] = map[string]any{"phase": "Running", "migrationState": state}
	_, err = k.c.Dynamic.Resource(kvMigrations).Namespace(k.ns).UpdateStatus(ctx, m, metav1.UpdateOptions{})
	return err
}

// finishMigration is the migration's success: the VMI runs on the target, its mark is cleared,
// and the source launcher pod completes.
func (k *KubeVirt) finishMigration(ctx context.Context, m *unstructured.Unstructured, name string) error {
	vmi, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	source, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	end := time.Now().UTC().Format(time.RFC3339)
	_ = unstructured.SetNestedField(vmi.Object, k.Target, "status", "nodeName")
	_ = unstructured.SetNestedField(vmi.Object, true, "status", "migrationState", "completed")
	_ = unstructured.SetNestedField(vmi.Object, end, "status", "migrationState", "endTimestamp")
	unstructured.RemoveNestedField(vmi.Object, "status", "evacuationNodeName")
	if _, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		return err
	}
	_ = unstructured.SetNestedField(m.Object, "Succeeded", "status", "phase")
	_ = unstructured.SetNestedField(m.Object, true, "status", "migrationState", "completed")
	if _, err := k.c.Dynamic.Resource(kvMigrations).Namespace(k.ns).UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		return err
	}
	pods, err := k.c.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == source && p.Annotations["kubevirt.io/domain"] == name && p.Status.Phase != corev1.PodSucceeded {
			p.Status.Phase = corev1.PodSucceeded
			p.Status.Conditions = nil
			if _, err := k.c.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeOrphanLaunchers deletes the launcher pods whose VMI is gone (virt-controller's part when a
// VMI is deleted: the domain is shut down and its pod goes).
func (k *KubeVirt) removeOrphanLaunchers(ctx context.Context) error {
	pods, err := k.c.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io=virt-launcher"})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		uid, ok := k.VMIExists(ctx, p.Annotations["kubevirt.io/domain"])
		if (!ok || string(uid) != p.Labels["kubevirt.io/created-by"]) && p.DeletionTimestamp == nil {
			_ = k.c.Client.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	return nil
}

// restartVMs starts a new VMI (not yet scheduled) for each VirtualMachine with runStrategy
// Always that has none.
func (k *KubeVirt) restartVMs(ctx context.Context) error {
	vms, err := k.c.Dynamic.Resource(kvVMs).Namespace(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, vm := range vms.Items {
		if rs, _, _ := unstructured.NestedString(vm.Object, "spec", "runStrategy"); rs != "Always" {
			continue
		}
		_, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Get(ctx, vm.GetName(), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		owner := []any{map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": vm.GetName(),
			"uid": string(vm.GetUID()), "controller": true, "blockOwnerDeletion": true}}
		strategy, _, _ := unstructured.NestedString(vm.Object, "spec", "template", "spec", "evictionStrategy")
		if _, err := k.createVMI(ctx, vm.GetName(), "", strategy, vm.GetAnnotations()[notMigratableAnnotation], owner); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// VMIExists reports whether the VMI called name exists, with its UID.
func (k *KubeVirt) VMIExists(ctx context.Context, name string) (types.UID, bool) {
	u, err := k.c.Dynamic.Resource(kvVMIs).Namespace(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return u.GetUID(), true
}
