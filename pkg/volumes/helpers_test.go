package volumes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// events records the Events a gate emits, as "Type Reason message".
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) Event(obj any, kind, reason, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	name := ""
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		name = ref.Kind + " " + ref.Namespace + "/" + ref.Name + ": "
	}
	e.list = append(e.list, kind+" "+reason+" "+name+msg)
}

// count returns how many events contain every one of parts.
func (e *events) count(parts ...string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
next:
	for _, ev := range e.list {
		for _, p := range parts {
			if !strings.Contains(ev, p) {
				continue next
			}
		}
		n++
	}
	return n
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.list, "\n")
}

// gateFixture is a started gate with its events.
type gateFixture struct {
	*Gate
	events *events
	cancel context.CancelFunc
}

// startGate starts a gate on the test cluster with test timings, changed by tune, and stops it
// when the test ends.
func startGate(t testing.TB, c *testenv.Cluster, tune func(*Config)) *gateFixture {
	t.Helper()
	ensureLonghornNamespace(t, c.Client)
	ev := &events{}
	cfg := DefaultConfig()
	cfg.Client, cfg.Dynamic = c.Client, c.Dynamic
	cfg.DrainerBackoff, cfg.DrainerBackoffMax = 200*time.Millisecond, time.Second
	cfg.OrphanInterval, cfg.SyncTimeout = 200*time.Millisecond, 30*time.Second
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	cfg.Recorder = recorder{ev}
	// Tests run drainers in throwaway namespaces, and the orphan tests delete what they ask to;
	// the drainer policy tests narrow this back.
	cfg.Drainers.Namespaces, cfg.DeleteDrainedOrphans = []string{AllNamespaces}, true
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	cfg.Logger = log.WithField("test", t.Name())
	if tune != nil {
		tune(&cfg)
	}
	g, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, g.Start(ctx))
	return &gateFixture{Gate: g, events: ev, cancel: cancel}
}

// check asks the gate about node.
func (f *gateFixture) check(t *testing.T, node string, opts coordinator.GateOptions) coordinator.GateResult {
	t.Helper()
	r, err := f.Check(context.Background(), node, opts)
	require.NoError(t, err)
	return r
}

// eventually asks the gate until ok accepts the answer, and returns that answer.
func (f *gateFixture) eventually(t *testing.T, node string, opts coordinator.GateOptions, what string, ok func(coordinator.GateResult) bool) coordinator.GateResult {
	t.Helper()
	// (A loop, not require.Eventually: its message would be built before the first answer.)
	deadline := time.Now().Add(30 * time.Second)
	for {
		last, err := f.Check(context.Background(), node, opts)
		if err == nil && ok(last) {
			return last
		}
		if time.Now().After(deadline) {
			require.FailNowf(t, "condition never satisfied", "%s; last answer: %+v (error %v)\nevents:\n%s", what, last, err, f.events)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recorder is a record.EventRecorder that keeps every event in events.
type recorder struct{ e *events }

var _ record.EventRecorder = recorder{}

func (r recorder) Event(obj runtime.Object, kind, reason, msg string) {
	r.e.Event(obj, kind, reason, msg)
}

func (r recorder) Eventf(obj runtime.Object, kind, reason, format string, args ...any) {
	r.e.Event(obj, kind, reason, fmt.Sprintf(format, args...))
}

func (r recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, kind, reason, format string, args ...any) {
	r.Eventf(obj, kind, reason, format, args...)
}

// cordon sets a node's spec.unschedulable.
func cordon(t *testing.T, c *testenv.Cluster, node string, on bool) {
	t.Helper()
	patch := []byte(`{"spec":{"unschedulable":false}}`)
	if on {
		patch = []byte(`{"spec":{"unschedulable":true}}`)
	}
	_, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// manualNode creates a node no simulated kubelet runs: it never becomes Ready and its pods stay
// Pending until the test sets their status, so a test decides how a drainer ends.
func manualNode(t *testing.T, c *testenv.Cluster, name string) string {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	_, err := c.Client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// createLocalVolume creates a local PV pinned to node and the PVC bound to it; annotations go on the PVC.
func createLocalVolume(t *testing.T, c *testenv.Cluster, ns, pvcName, node string, annotations map[string]string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	pvName := "pv-" + ns + "-" + pvcName
	createLocalPV(t, c, pvName, node, ns, pvcName)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pvcName, Annotations: annotations},
		Spec:       claimSpec(pvName),
	}
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	require.NoError(t, err)
	return pvc
}

// createLocalPV creates a local PV pinned to node, pre-bound to the claim ns/claim.
func createLocalPV(t *testing.T, c *testenv.Cluster, name, node, ns, claim string) {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	_, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func claimSpec(volumeName string) corev1.PersistentVolumeClaimSpec {
	empty := ""
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: &empty,
		VolumeName:       volumeName,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

// statefulSet is a StatefulSet with one claim template "data", its pods pinned to group's nodes,
// carrying the drainer template (none when "").
func statefulSet(ns, name string, replicas int32, template string, group ...string) *appsv1.StatefulSet {
	grace := int64(1)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: claimSpec("")}},
		},
	}
	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeName = ""
	if template != "" {
		sts.Annotations = map[string]string{DrainerTemplateAnnotation: template}
	}
	if len(group) > 0 {
		sts.Spec.Template.Spec.NodeSelector = map[string]string{testenv.GroupLabel: group[0]}
	}
	return sts
}

func getPVC(t *testing.T, c *testenv.Cluster, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return pvc
}

// jobGone reports whether the Job is deleted (or being deleted).
func jobGone(c *testenv.Cluster, ns, name string) bool {
	job, err := c.Client.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && job.DeletionTimestamp != nil)
}

// drainerPods lists the drainer pods of a namespace.
func drainerPods(t *testing.T, c *testenv.Cluster, ns string) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: DrainerLabel + "=true"})
	require.NoError(t, err)
	return list.Items
}
