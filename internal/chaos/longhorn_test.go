package chaos

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

// The harness plays Longhorn for a few volumes: each has two replicas on two neighbouring
// nodes. A replica fails when its machine goes down and rebuilds when it is back; the
// replica-fail fault fails one for a while, then it rebuilds. Every change is written as
// Longhorn's controllers would (spec, then status) and recorded in the history (KindReplica).

// Replica states the harness plays (testenv.ReplicaState).
const (
	replicaHealthy    = "healthy"
	replicaFailed     = "failed"
	replicaRebuilding = "rebuilding"
)

// rebuildTime is how long a rebuild takes.
const rebuildTime = 3 * time.Second

type longhorn struct {
	w       *world
	mu      sync.Mutex
	volumes []*lhVolume
}

type lhVolume struct {
	name  string
	nodes []string
	state []string
	epoch []int // bumped at each failure: a rebuild started for an older one is dropped
}

func (v *lhVolume) replica(i int) string { return fmt.Sprintf("%s-r-%d", v.name, i) }

func (v *lhVolume) addr(vi, i int) string { return fmt.Sprintf("10.9.%d.%d:10000", vi+1, i+1) }

// newLonghorn creates the Longhorn Nodes and one volume per node, its replicas on that node and
// the next.
func newLonghorn(w *world) *longhorn {
	l := &longhorn{w: w}
	ctx := context.Background()
	_, err := w.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.LonghornNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		w.t.Fatal(err)
	}
	for _, n := range w.nodes {
		_, err := testenv.ApplyLonghorn(ctx, w.c.Dynamic, testenv.LonghornNode(n, true))
		must(w.t, err)
	}
	for i, n := range w.nodes {
		v := &lhVolume{name: fmt.Sprintf("vol-%d", i), nodes: []string{n, w.nodes[(i+1)%len(w.nodes)]},
			state: []string{replicaHealthy, replicaHealthy}, epoch: []int{0, 0}}
		l.volumes = append(l.volumes, v)
		must(w.t, l.apply(i))
		for r := range v.nodes {
			l.record(v, r, "created")
		}
	}
	return l
}

func (l *longhorn) record(v *lhVolume, i int, detail string) {
	l.w.add(Event{Kind: KindReplica, Node: v.nodes[i], Volume: v.name, Target: v.replica(i), What: v.state[i], Detail: detail})
}

// apply writes volume vi's objects as they are now (l.mu held, or before the run).
func (l *longhorn) apply(vi int) error {
	v := l.volumes[vi]
	objs := []*unstructured.Unstructured{testenv.LonghornVolume(v.name, int64(len(v.nodes)), "attached", l.w.ns, "data-"+v.name)}
	addrs, modes := map[string]string{}, map[string]string{}
	var healthy []string
	for i := range v.nodes {
		if v.state[i] == replicaHealthy {
			healthy = append(healthy, v.addr(vi, i))
		}
	}
	var rebuilds []testenv.Rebuild
	for i, node := range v.nodes {
		r := v.replica(i)
		a := v.addr(vi, i)
		objs = append(objs, testenv.LonghornReplica(r, v.name, node, testenv.ReplicaState(v.state[i]), a[:len(a)-len(":10000")]))
		addrs[r] = a
		switch v.state[i] {
		case replicaHealthy:
			modes[r] = "RW"
		case replicaRebuilding:
			modes[r] = "WO"
			rebuilds = append(rebuilds, testenv.Rebuild{To: a, Progress: 50, From: healthy})
		case replicaFailed:
			modes[r] = "ERR"
		}
	}
	objs = append(objs, testenv.LonghornEngine(v.name, v.nodes[0], addrs, modes, rebuilds...))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := testenv.ApplyLonghorn(ctx, l.w.c.Dynamic, objs...)
	return err
}

// set changes a replica's state and writes it, recording the change once written.
func (l *longhorn) set(vi, i int, state, detail string) {
	v := l.volumes[vi]
	if v.state[i] == state {
		return
	}
	v.state[i] = state
	if state == replicaFailed {
		v.epoch[i]++
	}
	for attempt := 0; ; attempt++ {
		err := l.apply(vi)
		if err == nil {
			break
		}
		if attempt == 480 { // two minutes: a kube-apiserver restart
			l.w.logf("longhorn: write %s: %v", v.replica(i), err)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	l.record(v, i, detail)
}

// nodeGone and nodeBack play Longhorn's node controller when node's Kubernetes Node is deleted
// and registered again: the Longhorn Node is not Ready (KubernetesNodeGone) meanwhile, so its
// replicas do not count as serving their data (its instance manager's pod is garbage-collected
// with the Node).
func (l *longhorn) nodeGone(node string) { l.nodeReady(node, "False", "KubernetesNodeGone") }
func (l *longhorn) nodeBack(node string) { l.nodeReady(node, "True", "") }

func (l *longhorn) nodeReady(node, status, reason string) {
	n := testenv.LonghornNode(node, true)
	conds, _, _ := unstructured.NestedSlice(n.Object, "status", "conditions")
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Ready" {
			m["status"], m["reason"] = status, reason
		}
	}
	must(l.w.t, unstructured.SetNestedSlice(n.Object, conds, "status", "conditions"))
	err := l.w.retry("longhorn node "+node+" Ready="+status, func() error {
		ctx, cancel := context.WithTimeout(l.w.ctx, 10*time.Second)
		defer cancel()
		_, err := testenv.ApplyLonghorn(ctx, l.w.c.Dynamic, n)
		return err
	})
	if err != nil {
		l.w.logf("longhorn: node %s Ready=%s: %v", node, status, err)
		return
	}
	l.w.logf("longhorn: node %s Ready=%s %s", node, status, reason)
}

// nodeDown fails the replicas on node (its machine went down).
func (l *longhorn) nodeDown(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for vi, v := range l.volumes {
		for i, n := range v.nodes {
			if n == node {
				l.set(vi, i, replicaFailed, "its machine went down")
			}
		}
	}
}

// nodeUp rebuilds the failed replicas on node (its machine is back).
func (l *longhorn) nodeUp(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for vi, v := range l.volumes {
		for i, n := range v.nodes {
			if n == node && v.state[i] == replicaFailed {
				l.rebuild(vi, i, "its machine is back")
			}
		}
	}
}

// rebuild starts rebuilding a failed replica, healthy after rebuildTime unless it fails again
// meanwhile (l.mu held).
func (l *longhorn) rebuild(vi, i int, why string) {
	v := l.volumes[vi]
	l.set(vi, i, replicaRebuilding, why)
	epoch := v.epoch[i]
	l.w.begin()
	go func() {
		defer l.w.done()
		time.Sleep(rebuildTime)
		l.mu.Lock()
		defer l.mu.Unlock()
		if v.epoch[i] == epoch && v.state[i] == replicaRebuilding {
			l.set(vi, i, replicaHealthy, "rebuilt")
		}
	}()
}

// fail is the replica-fail fault: replica i of volume vi fails, and rebuilds after d (if its
// machine is up then; otherwise when it comes back).
func (l *longhorn) fail(vi, i int, d time.Duration, machineUp func(node string) bool) {
	l.mu.Lock()
	l.set(vi, i, replicaFailed, "fault")
	epoch := l.volumes[vi].epoch[i]
	l.mu.Unlock()
	time.Sleep(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.volumes[vi]
	if v.epoch[i] == epoch && v.state[i] == replicaFailed && machineUp(v.nodes[i]) {
		l.rebuild(vi, i, "after the fault")
	}
}
