package volumes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// strictDrainers tunes a test gate back to the production drainer policy, with the cluster's
// own Events recorded besides the test's.
func strictDrainers(t *testing.T, c *testenv.Cluster) func(*Config) {
	return func(cfg *Config) {
		cfg.Drainers, cfg.DeleteDrainedOrphans = DefaultDrainerPolicy(), false
		broadcaster := record.NewBroadcaster()
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
		t.Cleanup(broadcaster.Shutdown)
		cfg.Recorder = tee{cfg.Recorder, broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "edgedrain-test"})}
	}
}

// tee records every Event with both recorders.
type tee [2]record.EventRecorder

func (r tee) Event(obj runtime.Object, kind, reason, msg string) {
	r[0].Event(obj, kind, reason, msg)
	r[1].Event(obj, kind, reason, msg)
}

func (r tee) Eventf(obj runtime.Object, kind, reason, format string, args ...any) {
	r[0].Eventf(obj, kind, reason, format, args...)
	r[1].Eventf(obj, kind, reason, format, args...)
}

func (r tee) AnnotatedEventf(obj runtime.Object, _ map[string]string, kind, reason, format string, args ...any) {
	r.Eventf(obj, kind, reason, format, args...)
}

// allowDrainers labels ns so that the default drainer policy lets drainers run there.
func allowDrainers(t *testing.T, c *testenv.Cluster, ns string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"edgedrain.io/drainers":"allowed"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

// apiEvents returns the reasons and messages of the Kubernetes Events about ns/name.
func apiEvents(t *testing.T, c *testenv.Cluster, ns, name string) []string {
	t.Helper()
	list, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	require.NoError(t, err)
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

// Templates asking for more than the default policy allows are refused: a blocker naming why,
// one Event on the PVC (also in the API), no Job. An allowed template still runs, as the
// namespace's default ServiceAccount without an API token.
func TestRefusedDrainerTemplates(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	cases := []struct {
		name, tmpl, want string
		allowed          bool // the namespace is labelled to allow drainers
	}{
		{name: "privileged", tmpl: podTemplate("", `"securityContext":{"privileged":true}`), allowed: true,
			want: "container sync is privileged (--drainer-allow-privileged)"},
		{name: "hostPath", tmpl: podTemplate(`"volumes":[{"name":"root","hostPath":{"path":"/"}}]`, ""), allowed: true,
			want: "hostPath volume root (/) (--drainer-allow-host-path)"},
		{name: "hostNetwork", tmpl: podTemplate(`"hostNetwork":true`, ""), allowed: true,
			want: "hostNetwork (--drainer-allow-host-namespaces)"},
		{name: "another ServiceAccount", tmpl: podTemplate(`"serviceAccountName":"admin"`, ""), allowed: true,
			want: `serviceAccountName "admin": drainers run as "default" (--drainer-service-account)`},
		{name: "namespace not allowed", tmpl: jobSpecTemplate,
			want: "is not allowed to run drainers (--drainer-namespaces, or a namespace label matching \"edgedrain.io/drainers=allowed\")"},
	}
	// Namespaces first, so that the gate's first look at them already sees their labels.
	namespaces := make([]string, len(cases))
	for i, tc := range cases {
		namespaces[i] = c.Namespace(t)
		if tc.allowed {
			allowDrainers(t, c, namespaces[i])
		}
	}
	okNS := c.Namespace(t)
	allowDrainers(t, c, okNS)
	pods := watchDrainerPods(t, c, okNS)
	g := startGate(t, c, strictDrainers(t, c))

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespaces[i]
			node := manualNode(t, c, "refused-"+strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"))
			createLocalVolume(t, c, ns, "data-0", node, map[string]string{DrainerTemplateAnnotation: tc.tmpl})
			for _, opts := range []coordinator.GateOptions{beforeEviction, afterEviction, afterEviction, afterEviction} {
				r := g.eventually(t, node, opts, "the refused template blocks", func(r coordinator.GateResult) bool { return !r.Safe })
				require.Len(t, r.Blockers, 1)
				assert.Equal(t, ns, r.Blockers[0].Namespace)
				assert.Contains(t, r.Blockers[0].Reason, "local volume (PVC "+ns+"/data-0): drainer template on PVC "+ns+"/data-0: drainer template refused: ")
				assert.Contains(t, r.Blockers[0].Reason, tc.want)
			}
			event := "Warning DrainerTemplateRefused PersistentVolumeClaim " + ns + "/data-0"
			assert.Equal(t, 1, g.events.count(event, tc.want, "no drainer Job is created"), "reported once: %s", g.events)
			require.Eventually(t, func() bool {
				for _, ev := range apiEvents(t, c, ns, "data-0") {
					if strings.HasPrefix(ev, "DrainerTemplateRefused: ") && strings.Contains(ev, tc.want) {
						return true
					}
				}
				return false
			}, 10*time.Second, 50*time.Millisecond, "no Kubernetes Event on the PVC")
			jobs, err := c.Client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			assert.Empty(t, jobs.Items, "a refused template never makes a Job")
		})
	}
	assert.Equal(t, float64(len(cases)), testutil.ToFloat64(g.metrics.TemplatesRefused))

	t.Run("allowed", func(t *testing.T) {
		node := c.AddNodes(t, "refused-ok", 1)[0]
		pvc := createLocalVolume(t, c, okNS, "data-0", node, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
		g.eventually(t, node, afterEviction, "the allowed drainer starts", func(r coordinator.GateResult) bool {
			return !r.Safe && len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "drainer Job")
		})
		g.eventually(t, node, afterEviction, "the allowed drainer succeeds", func(r coordinator.GateResult) bool { return r.Safe })
		assert.Equal(t, DrainStatusDrained, getPVC(t, c, okNS, pvc.Name).Labels[DrainStatusLabel])
		seen := pods()
		require.Len(t, seen, 1)
		for _, pod := range seen {
			assert.Equal(t, "default", pod.Spec.ServiceAccountName)
			require.NotNil(t, pod.Spec.AutomountServiceAccountToken)
			assert.False(t, *pod.Spec.AutomountServiceAccountToken, "the drainer gets no API token")
		}
		assert.Zero(t, g.events.count("DrainerTemplateRefused", okNS), g.events)
	})
}

// An orphan's template is refused the same way, on the orphan's PVC; with orphan deletion off
// a drained orphan is kept and the StatefulSet's request to delete it is reported once. The test
// makes Run's passes itself, so that "once" means over a known number of them.
func TestOrphanTemplateRefusedAndDeletionOff(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "orphan-policy", 2)
	closed, open := c.Namespace(t), c.Namespace(t)
	allowDrainers(t, c, open)
	g := startGate(t, c, strictDrainers(t, c))
	annotations := map[string]string{DrainerTemplateAnnotation: jobSpecTemplate, DeleteDrainedOrphansAnnotation: "true"}
	statefulSetWithLocalPVs(t, c, closed, "q", "orphan-policy", nodes, 2, annotations)
	statefulSetWithLocalPVs(t, c, open, "r", "orphan-policy", nodes, 2, annotations)
	scale(t, c, closed, "q", 1)
	scale(t, c, open, "r", 1)

	refused := func() int {
		return g.events.count("Warning DrainerTemplateRefused PersistentVolumeClaim "+closed+"/data-q-1", "namespace "+closed+" is not allowed")
	}
	kept := func() int {
		return g.events.count("Warning OrphanDeletionDisabled StatefulSet "+open+"/r", "--delete-drained-orphans")
	}
	ctx := context.Background()
	require.Eventually(t, func() bool {
		g.reconcilePVCs(ctx)
		return refused() == 1 && kept() == 1
	}, 60*time.Second, 50*time.Millisecond, "events:\n%s", g.events)
	for range 3 {
		g.reconcilePVCs(ctx)
	}
	assert.Equal(t, 1, refused(), "reported once: %s", g.events)
	assert.Equal(t, 1, kept(), "reported once: %s", g.events)
	assert.Zero(t, g.events.count("DrainerTemplateRefused PersistentVolumeClaim "+open+"/"), "nothing refused where allowed: %s", g.events)
	assert.Equal(t, DrainStatusDrained, drainedLabel(t, c, open, "data-r-1"), "drained, and kept")
	assert.Nil(t, getPVC(t, c, open, "data-r-1").DeletionTimestamp)
	assert.Empty(t, drainedLabel(t, c, closed, "data-q-1"))
	assert.Empty(t, drainerPods(t, c, closed), "no drainer in a namespace not allowed")
}
