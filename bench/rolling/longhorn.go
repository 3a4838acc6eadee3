package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// storage plays Longhorn for one day: volume i has 3 replicas, on nodes i, i+1 and i+2, so every
// node holds 3 replicas and two nodes down at once still leave each volume a healthy copy. It
// writes the objects as Longhorn's controllers would (testenv.ApplyLonghorn): a node going down
// stops its replicas; once back, they rebuild (engine mode WO with a rebuild entry and its
// progress) and are healthy after the resync time.
type storage struct {
	c       *testenv.Cluster
	prefix  string
	ns      string // namespace of the PVCs the volumes name
	mu      sync.Mutex
	volumes []*volume
}

type volume struct {
	name     string
	nodes    []string
	state    []testenv.ReplicaState
	progress []int64
}

const replicasPerVolume = 3

func newStorage(c *testenv.Cluster, prefix, ns string, nodes []string) *storage {
	s := &storage{c: c, prefix: prefix, ns: ns}
	for i := range nodes {
		v := &volume{name: fmt.Sprintf("%s-vol-%d", prefix, i)}
		for k := range replicasPerVolume {
			v.nodes = append(v.nodes, nodes[(i+k)%len(nodes)])
			v.state = append(v.state, "healthy")
			v.progress = append(v.progress, 0)
		}
		s.volumes = append(s.volumes, v)
	}
	return s
}

func (v *volume) replica(k int) string { return fmt.Sprintf("%s-r-%d", v.name, k) }

// ip is replica k's address (data only; nothing connects to it).
func (v *volume) ip(index, k int) string {
	return fmt.Sprintf("10.%d.%d.%d", 100+k, index/250, index%250+1)
}

// objects are the volume's Longhorn objects as they stand; with all=false only its replicas on
// node and its engine (what a change on node touches).
func (v *volume) objects(index int, ns, node string, all bool) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	if all {
		objs = append(objs, testenv.LonghornVolume(v.name, replicasPerVolume, "attached", ns, "data-"+v.name))
	}
	addrs, modes := map[string]string{}, map[string]string{}
	var healthy []string
	for k := range v.nodes {
		addr := v.ip(index, k) + ":10000"
		addrs[v.replica(k)] = "tcp://" + addr
		switch v.state[k] {
		case "healthy":
			modes[v.replica(k)] = "RW"
			healthy = append(healthy, addr)
		case "rebuilding":
			modes[v.replica(k)] = "WO"
		}
		if all || v.nodes[k] == node {
			objs = append(objs, testenv.LonghornReplica(v.replica(k), v.name, v.nodes[k], v.state[k], v.ip(index, k)))
		}
	}
	var rebuilds []testenv.Rebuild
	for k := range v.nodes {
		if v.state[k] == "rebuilding" {
			rebuilds = append(rebuilds, testenv.Rebuild{To: v.ip(index, k) + ":10000", Progress: v.progress[k], From: healthy[:min(1, len(healthy))]})
		}
	}
	return append(objs, testenv.LonghornEngine(v.name, v.nodes[0], addrs, modes, rebuilds...))
}

// create writes every object, and a Longhorn Node per node.
func (s *storage) create(ctx context.Context, nodes []string) error {
	_, err := s.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.LonghornNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, n := range nodes {
		objs = append(objs, testenv.LonghornNode(n, true))
	}
	for i, v := range s.volumes {
		objs = append(objs, v.objects(i, s.ns, "", true)...)
	}
	_, err = testenv.ApplyLonghorn(ctx, s.c.Dynamic, objs...)
	return err
}

// set changes the state of every replica on node (progress for "rebuilding") and writes them.
func (s *storage) set(ctx context.Context, node string, st testenv.ReplicaState, progress int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var objs []*unstructured.Unstructured
	for i, v := range s.volumes {
		touched := false
		for k, n := range v.nodes {
			if n == node {
				v.state[k], v.progress[k], touched = st, progress, true
			}
		}
		if touched {
			objs = append(objs, v.objects(i, s.ns, node, false)...)
		}
	}
	_, err := testenv.ApplyLonghorn(ctx, s.c.Dynamic, objs...)
	return err
}

// rebuild plays the rebuild of node's replicas once it is back: progress in four steps over
// resync, then healthy. It returns when they are healthy (or on the first error).
func (s *storage) rebuild(ctx context.Context, node string, resync time.Duration) error {
	start := time.Now()
	const steps = 4
	for i := range steps {
		if err := s.set(ctx, node, "rebuilding", int64(100*i/steps)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(start.Add(resync * time.Duration(i+1) / steps))):
		}
	}
	return s.set(ctx, node, "healthy", 0)
}

// delete removes the day's objects.
func (s *storage) delete(ctx context.Context, nodes []string) {
	del := func(u *unstructured.Unstructured) {
		if gvr, err := testenv.LonghornGVR(u); err == nil {
			_ = s.c.Dynamic.Resource(gvr).Namespace(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		}
	}
	for _, n := range nodes {
		del(testenv.LonghornNode(n, true))
	}
	for i, v := range s.volumes {
		for _, u := range v.objects(i, s.ns, "", true) {
			del(u)
		}
	}
}
