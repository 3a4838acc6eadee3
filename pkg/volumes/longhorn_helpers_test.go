package volumes

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// Builders of Longhorn objects shaped like Longhorn's own (only the fields the gate reads), and
// helpers that create and change them in the test cluster the way Longhorn's controllers would.

const lhNS = testenv.LonghornNamespace

// The builders live in internal/testenv (the demo uses them too).
var (
	healthyAt = testenv.LonghornHealthyAt
	lhVolume  = testenv.LonghornVolume
	lhReplica = func(name, volume, node string, st replicaState, ip string) *unstructured.Unstructured {
		return testenv.LonghornReplica(name, volume, node, testenv.ReplicaState(st), ip)
	}
	lhNode    = testenv.LonghornNode
	lhSetting = testenv.LonghornSetting
)

// replicaState is a testenv.ReplicaState: "healthy", "stopped", "failed", "new", "rebuilding".
type replicaState string

// rebuild is one rebuild in an engine's status (see testenv.Rebuild).
type rebuild struct {
	to       string
	progress int64
	from     []string
}

func lhEngine(volume, node string, addrs, modes map[string]string, rebuilds ...rebuild) *unstructured.Unstructured {
	rs := make([]testenv.Rebuild, len(rebuilds))
	for i, r := range rebuilds {
		rs[i] = testenv.Rebuild{To: r.to, Progress: r.progress, From: r.from}
	}
	return testenv.LonghornEngine(volume, node, addrs, modes, rs...)
}

func gvrOf(u *unstructured.Unstructured) schema.GroupVersionResource {
	switch u.GetKind() {
	case "Volume":
		return longhornVolumes
	case "Replica":
		return longhornReplicas
	case "Engine":
		return longhornEngines
	case "Node":
		return longhornNodes
	case "Setting":
		return longhornSettings
	}
	panic("not a Longhorn kind: " + u.GetKind())
}

// ensureLonghornNamespace creates longhorn-system once.
func ensureLonghornNamespace(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lhNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// applyLonghorn creates objs (or replaces them when they exist), spec then status, as Longhorn
// would, and deletes the ones it created when the test ends.
func applyLonghorn(t testing.TB, dyn dynamic.Interface, objs ...*unstructured.Unstructured) {
	t.Helper()
	created, err := testenv.ApplyLonghorn(context.Background(), dyn, objs...)
	for _, obj := range created {
		res := dyn.Resource(gvrOf(obj)).Namespace(obj.GetNamespace())
		name := obj.GetName()
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	require.NoError(t, err)
}

// newLonghornFromObjects returns a Longhorn source whose caches hold objs, for tests that need
// no cluster.
func newLonghornFromObjects(objs ...*unstructured.Unstructured) *Longhorn {
	l := NewLonghorn(nil, nil, lhNS, nil)
	l.volumes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexByAttachedNode: longhornAttachedNode})
	l.replicas = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexByNode: specIndex("nodeID"), indexByVolume: specIndex("volumeName")})
	l.engines = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexByVolume: specIndex("volumeName")})
	l.nodes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	l.settings = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		var err error
		switch o.GetKind() {
		case "Volume":
			err = l.volumes.Add(o)
			l.parseOnChange(func(u *unstructured.Unstructured) any { return parseVolume(u) }).OnAdd(o, true)
		case "Replica":
			err = l.replicas.Add(o)
			l.parseOnChange(func(u *unstructured.Unstructured) any { return parseReplica(u) }).OnAdd(o, true)
		case "Engine":
			err = l.engines.Add(o)
			l.parseOnChange(func(u *unstructured.Unstructured) any { return parseEngine(u) }).OnAdd(o, true)
		case "Node":
			err = l.nodes.Add(o)
			l.parseOnChange(func(u *unstructured.Unstructured) any { return parseNode(u) }).OnAdd(o, true)
		case "Setting":
			err = l.settings.Add(o)
		}
		if err != nil {
			panic(err)
		}
	}
	l.installed.Store(true)
	return l
}
