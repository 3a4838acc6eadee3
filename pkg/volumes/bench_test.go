package volumes

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// offlineGate is a ready gate whose caches are filled by the test, not by informers: Check
// runs exactly as in production, over cached objects, without a cluster.
func offlineGate(tb testing.TB, policy Policy, nodes []*corev1.Node, objs ...*unstructured.Unstructured) *Gate {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Client, cfg.Dynamic, cfg.Policy = fake.NewClientset(), dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), policy
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	log := logrus.New()
	log.SetLevel(logrus.PanicLevel)
	cfg.Logger = log
	g, err := New(cfg)
	require.NoError(tb, err)
	g.longhorn = newLonghornFromObjects(objs...)
	g.longhorn.dyn = cfg.Dynamic
	g.longhorn.log = log
	g.sources = []Source{g.longhorn}
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		require.NoError(tb, nodeIndex.Add(n))
	}
	empty := func(indexers cache.Indexers) cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
	}
	g.nodes = listersv1.NewNodeLister(nodeIndex)
	g.pvIndex = empty(cache.Indexers{indexByHostname: pvHostnames})
	g.pvs = listersv1.NewPersistentVolumeLister(g.pvIndex)
	g.pvcs = listersv1.NewPersistentVolumeClaimLister(empty(cache.Indexers{}))
	g.podIndex = empty(cache.Indexers{indexByClaim: podClaims})
	g.vaIndex = empty(cache.Indexers{indexByAttachedNode: vaNode})
	g.sts = appslisters.NewStatefulSetLister(empty(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	g.jobs = batchlisters.NewJobLister(empty(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	// No API server behind these caches: they are what it says.
	g.readFresh = func(context.Context) ([]*corev1.Node, []Source, error) {
		all, err := g.nodes.List(labels.Everything())
		return all, g.sources, err
	}
	g.ready.Store(true)
	return g
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

// readyNode is a Kubernetes Node that is Ready.
func readyNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metaName(name),
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// BenchmarkCheck is one gate check of a node from the caches: 5 000 Longhorn volumes with
// 15 000 replicas on 3 nodes (every volume has a replica on the node asked about, the worst
// case), and on 10 nodes. Objects are parsed when the informers deliver them (see
// BenchmarkParseOnChange); "cold" also parses every object within the check, as if all had
// changed since the informers' handlers last ran (an upper bound, never the usual case).
func BenchmarkCheck(b *testing.B) {
	for _, nodes := range []int{3, 10} {
		for _, cold := range []bool{false, true} {
			name := fmt.Sprintf("volumes=5000/replicas=15000/nodes=%d/warm", nodes)
			if cold {
				name = strings.TrimSuffix(name, "warm") + "cold"
			}
			b.Run(name, func(b *testing.B) {
				ns, objs := benchLayout(5000, nodes)
				g := offlineGate(b, PolicyWait, ns, objs...)
				r, err := g.Check(context.Background(), "node-0", coordinator.GateOptions{AfterEviction: true})
				require.NoError(b, err)
				b.ReportMetric(float64(len(r.Blockers)), "blockers")
				b.ResetTimer()
				for b.Loop() {
					if cold {
						clear(g.longhorn.memo)
					}
					if _, err := g.Check(context.Background(), "node-0", coordinator.GateOptions{AfterEviction: true}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkParseOnChange is the informer-side cost of the 20 000 Longhorn objects of
// BenchmarkCheck arriving (a start-up, or all of them changing), per object.
func BenchmarkParseOnChange(b *testing.B) {
	_, objs := benchLayout(5000, 3)
	l := NewLonghorn(nil, nil, lhNS, nil)
	handlers := map[string]cache.ResourceEventHandlerFuncs{
		"Volume":  l.parseOnChange(func(u *unstructured.Unstructured) any { return parseVolume(u) }),
		"Replica": l.parseOnChange(func(u *unstructured.Unstructured) any { return parseReplica(u) }),
		"Engine":  l.parseOnChange(func(u *unstructured.Unstructured) any { return parseEngine(u) }),
	}
	i := 0
	for b.Loop() {
		o := objs[i%len(objs)]
		handlers[o.GetKind()].OnUpdate(o, o)
		i++
	}
}

// TestCheckOverManyVolumes runs the benchmark's layout once as a test (also under -short): the
// rebuilds sourced from node-0 alone block, nothing else does.
func TestCheckOverManyVolumes(t *testing.T) {
	ns, objs := benchLayout(5000, 3)
	g := offlineGate(t, PolicyWait, ns, objs...)
	r, err := g.Check(context.Background(), "node-0", coordinator.GateOptions{})
	require.NoError(t, err)
	require.False(t, r.Safe)
	for _, b := range r.Blockers {
		require.Contains(t, b.Reason, "only healthy rebuild source", b)
		require.Equal(t, 50, b.Progress)
	}
	t.Logf("%d blockers", len(r.Blockers))
}

// benchLayout is volumes volumes with 3 replicas each over nodes nodes (replica i of volume v on
// node (v+i) mod nodes); every 10th volume has a failed replica, every 25th a rebuild.
func benchLayout(volumes, nodes int) ([]*corev1.Node, []*unstructured.Unstructured) {
	var ns []*corev1.Node
	for i := range nodes {
		ns = append(ns, readyNode(fmt.Sprintf("node-%d", i)))
	}
	var objs []*unstructured.Unstructured
	for v := range volumes {
		name := fmt.Sprintf("pvc-%05d", v)
		objs = append(objs, lhVolume(name, 3, "attached", "apps", "data-"+name))
		addrs, modes := map[string]string{}, map[string]string{}
		var rebuilds []rebuild
		for i := range 3 {
			rname := fmt.Sprintf("%s-r-%d", name, i)
			ip := fmt.Sprintf("10.%d.%d.%d", i, v/250, v%250)
			st := replicaState("healthy")
			switch {
			case i == 2 && v%10 == 0:
				st = "failed"
			case i == 2 && v%25 == 1:
				st = "rebuilding"
				rebuilds = append(rebuilds, rebuild{to: ip + ":10000", progress: 50, from: []string{fmt.Sprintf("10.0.%d.%d:10000", v/250, v%250)}})
				modes[rname] = "WO"
			default:
				modes[rname] = "RW"
			}
			addrs[rname] = ip + ":10000"
			objs = append(objs, lhReplica(rname, name, fmt.Sprintf("node-%d", (v+i)%nodes), st, ip))
		}
		objs = append(objs, lhEngine(name, fmt.Sprintf("node-%d", v%nodes), addrs, modes, rebuilds...))
	}
	return ns, objs
}
