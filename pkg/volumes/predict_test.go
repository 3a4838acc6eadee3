package volumes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// versions returns the resourceVersion of every Longhorn object and Job of ns, and the labels
// and edgedrain annotations of its PVCs (none when ns is ""): what a prediction must leave as it
// is.
func versions(t *testing.T, c *testenv.Cluster, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, gvr := range []schema.GroupVersionResource{longhornVolumes, longhornReplicas, longhornEngines, longhornNodes} {
		list, err := c.Dynamic.Resource(gvr).Namespace(lhNS).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, o := range list.Items {
			out[gvr.Resource+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	if ns == "" {
		return out
	}
	pvcs, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, o := range pvcs.Items {
		// Labels and edgedrain's annotations, not the resourceVersion: the PV controller may
		// still write to a claim it has just bound.
		ours := map[string]string{}
		for k, v := range o.Annotations {
			if strings.Contains(k, "edgedrain") {
				ours[k] = v
			}
		}
		out["pvc/"+o.Name] = fmt.Sprint(o.Labels, ours)
	}
	jobs, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, o := range jobs.Items {
		out["job/"+o.Name] = o.ResourceVersion
	}
	return out
}

// predict asks the gate for a prediction until ok accepts it (the caches follow the API), and
// returns it.
func (f *gateFixture) predict(t *testing.T, node, what string, ok func(Prediction) bool) Prediction {
	t.Helper()
	var last Prediction
	require.Eventually(t, func() bool {
		var err error
		last, err = f.Predict(context.Background(), node)
		return err == nil && ok(last)
	}, 30*time.Second, 50*time.Millisecond, "%s; last prediction: %+v", what, last)
	return last
}

// The prediction names the same blockers as the check before eviction, from the same rules,
// and changes nothing: no Longhorn object, no Event.
func TestPredictLonghornSameAsCheck(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "predict", 3)
	g := startGate(t, c, nil)
	last := volumeOn{name: "vol-predict-last", nodes: nodes, state: []replicaState{"healthy", "rebuilding", "failed"}}
	last.rebs = []rebuild{{to: last.addr(1), progress: 45, from: []string{last.addr(0)}}}
	source := volumeOn{name: "vol-predict-source", nodes: nodes, state: []replicaState{"healthy", "healthy", "rebuilding"}}
	source.rebs = []rebuild{{to: source.addr(2), progress: 30, from: []string{source.addr(0)}}}
	applyLonghorn(t, c.Dynamic, append(last.objects(), source.objects()...)...)

	before := versions(t, c, "")
	p := g.predict(t, nodes[0], "both volumes block", func(p Prediction) bool { return len(p.Blockers) == 2 })
	assert.Equal(t, before, versions(t, c, ""), "a prediction changes no object")
	assert.Empty(t, g.events.String(), "a prediction records no Event")
	assert.Empty(t, p.Notes)
	assert.Equal(t, "longhorn volume (PVC shop/data-vol-predict-last): last healthy replica; rebuilding on predict-1 45%", p.Blockers[0].Reason)
	assert.Equal(t, 45, p.Blockers[0].Progress)
	assert.Contains(t, p.Blockers[1].Reason, "only healthy rebuild source for the replica rebuilding on predict-2 30%")

	r := g.check(t, nodes[0], beforeEviction)
	assert.False(t, r.Safe)
	assert.Equal(t, r.Blockers, p.Blockers, "the same blockers as the gate's check")

	for _, n := range nodes[1:] {
		p, err := g.Predict(context.Background(), n)
		require.NoError(t, err)
		assert.Empty(t, p.Blockers, n)
		assert.Empty(t, g.check(t, n, beforeEviction).Blockers, n)
	}
}

// Under the evict policy a prediction says what the drain would ask Longhorn, and does not ask
// it: the Longhorn Node stays as it is, where the check itself asks at once.
func TestPredictEvictPolicyAsksNothing(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "predict-evict", 3)
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyEvict })
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-predict-evict", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	t.Cleanup(func() { _ = g.Release(context.Background(), nodes[0]) })

	before := versions(t, c, "")
	// The wait for replacements is what the drain itself asks for: a note, not a blocker (a
	// blocker would hold every node with replicas back for good under --preflight=hold).
	p := g.predict(t, nodes[0], "notes the wait for a replacement", func(p Prediction) bool { return len(p.Notes) == 2 })
	assert.Empty(t, p.Blockers)
	assert.Contains(t, p.Notes[0], "the drain itself resolves this (volume policy evict): longhorn volume (PVC shop/data-vol-predict-evict): evicting replicas from this node: 1 of 2 healthy on other nodes")
	assert.Equal(t, "volume policy evict: the drain would ask longhorn to move this node's replicas of 1 volume(s) to other nodes, then wait for them", p.Notes[1])
	assert.Equal(t, before, versions(t, c, ""), "Longhorn is not asked to evict")
	assert.NotContains(t, getLonghornNode(t, c, nodes[0]).GetAnnotations(), LonghornEvictionAnnotation)
	assert.Empty(t, g.events.String())

	r := g.check(t, nodes[0], beforeEviction)
	assert.False(t, r.Safe, "the check itself waits for the replacement")
	assert.Contains(t, getLonghornNode(t, c, nodes[0]).GetAnnotations(), LonghornEvictionAnnotation, "the check itself asks")
}

// Node-local volumes: a drainer template that would not run blocks, as in the check; one that
// would run is a note naming its Job, and no Job, label or Event is made.
func TestPredictLocalDrainers(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	node := c.AddNodes(t, "predict-local", 1)[0]
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	runs := createLocalVolume(t, c, ns, "data-0", node, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	createLocalVolume(t, c, ns, "data-1", node, map[string]string{DrainerTemplateAnnotation: `{"template":`})
	createLocalVolume(t, c, ns, "data-2", node, map[string]string{DrainerTemplateAnnotation: podTemplate("", `"securityContext":{"privileged":true}`)})
	createLocalVolume(t, c, ns, "scratch", node, nil)

	require.Eventually(t, func() bool { // the PV controller binds the claims first
		pvcs, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(context.Background(), metav1.ListOptions{})
		bound := err == nil
		for _, pvc := range pvcs.Items {
			bound = bound && pvc.Status.Phase == corev1.ClaimBound
		}
		return bound
	}, 30*time.Second, 50*time.Millisecond, "claims bound")
	before := versions(t, c, ns)
	p := g.predict(t, node, "two templates blocking, one drainer to run", func(p Prediction) bool {
		return len(p.Blockers) == 2 && len(p.Notes) == 1
	})
	assert.Equal(t, before, versions(t, c, ns), "no Job, no label")
	assert.Empty(t, g.events.String(), "no Event about the bad templates")
	assert.Contains(t, p.Blockers[0].Reason, "drainer template on PVC "+ns+"/data-1: invalid drainer template: want a JSON object")
	assert.Contains(t, p.Blockers[1].Reason, "drainer template on PVC "+ns+"/data-2: drainer template refused: container sync is privileged")
	assert.Equal(t, "PVC "+ns+"/data-0 (local volume pv-"+ns+"-data-0): drainer Job "+drainerJobName(runs)+" would run on "+node+
		" once its pods are gone (template on PVC "+ns+"/data-0); the drain waits for it to succeed", p.Notes[0])

	r := g.check(t, node, beforeEviction)
	assert.Equal(t, r.Blockers, p.Blockers, "the same blockers as the gate's check")
	assert.Equal(t, 2, strings.Count(g.events.String(), "Warning"), "the check reports the templates: %s", g.events)

	t.Run("allow policy", func(t *testing.T) {
		g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyAllow })
		p := g.predict(t, node, "nothing blocks", func(p Prediction) bool { return len(p.Notes) == 3 })
		assert.Empty(t, p.Blockers)
		assert.Contains(t, p.Notes[1], "volume pv-"+ns+"-data-1: not blocking (volume policy allow): local volume")
	})
}

func TestPredictBeforeStart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Client, cfg.Dynamic = noLonghorn{}, dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	g, err := New(cfg)
	require.NoError(t, err)
	_, err = g.Predict(context.Background(), "n")
	assert.ErrorIs(t, err, ErrNotStarted)
	_, err = g.ReturnCheck(context.Background(), "n")
	assert.ErrorIs(t, err, ErrNotStarted)
}
