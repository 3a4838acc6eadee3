package chaos

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// clusterView is what the harness last recorded of the Nodes and pods: informers and a poller
// both feed it, and only a change is recorded. The poller is there for the time after a
// kube-apiserver restart, when informers take their backoff to watch again: they can stay blind
// for most of a minute, and a drain's cordon, evictions and COMPLETE unseen in that time would
// be judged as S1 and S2 violations of edgedrain's.
type clusterView struct {
	mu    sync.Mutex
	nodes map[string]nodeView
	pods  map[string]podView   // by UID
	since map[string]time.Time // when each pod (by UID) or Node (by name) was first recorded
}

type nodeView struct{ unsched, annotated, ready, deleted bool }

type podView struct {
	node, name           string
	evictable            bool
	terminating, deleted bool
}

func (w *world) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	v := nodeView{unsched: n.Spec.Unschedulable}
	_, v.annotated = n.Annotations[coordinator.CordonAnnotation]
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			v.ready = c.Status == corev1.ConditionTrue
		}
	}
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.nodes[n.Name]; !seen || old != v {
		if !seen || old.deleted {
			w.view.since[n.Name] = time.Now()
		}
		w.view.nodes[n.Name] = v
		w.add(Event{Kind: KindNode, Node: n.Name, Unschedulable: v.unsched, Annotated: v.annotated, Ready: v.ready})
	}
}

func (w *world) nodeGone(name string) {
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.nodes[name]; seen && !old.deleted {
		w.view.nodes[name] = nodeView{deleted: true}
		w.add(Event{Kind: KindNode, Node: name, Deleted: true})
	}
}

func (w *world) onPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	v := podView{node: p.Spec.NodeName, name: p.Namespace + "/" + p.Name, evictable: evictable(p), terminating: p.DeletionTimestamp != nil}
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.pods[string(p.UID)]; (!seen || old != v) && !old.deleted {
		if !seen {
			w.view.since[string(p.UID)] = time.Now()
		}
		w.view.pods[string(p.UID)] = v
		w.add(Event{Kind: KindPod, Node: v.node, Pod: v.name, UID: string(p.UID), Evictable: v.evictable, Terminating: v.terminating})
	}
}

func (w *world) podGone(uid string) {
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.pods[uid]; seen && !old.deleted {
		old.deleted = true
		w.view.pods[uid] = old
		w.add(Event{Kind: KindPod, Node: old.node, Pod: old.name, UID: uid, Evictable: old.evictable, Deleted: true})
	}
}

// watchCluster records Node, pod and Lease changes as informers see them, and as a poller
// listing them four times a second sees them.
func (w *world) watchCluster(ctx context.Context) {
	w.view = &clusterView{nodes: map[string]nodeView{}, pods: map[string]podView{}, since: map[string]time.Time{}}
	selector := testenv.GroupLabel + "=" + group
	nodes := informers.NewSharedInformerFactoryWithOptions(w.c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	_, err := nodes.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.onNode, UpdateFunc: func(_, obj any) { w.onNode(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				w.nodeGone(n.Name)
			}
		},
	})
	must(w.t, err)
	inNS := informers.NewSharedInformerFactoryWithOptions(w.c.Client, 0, informers.WithNamespace(w.ns))
	_, err = inNS.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.onPod, UpdateFunc: func(_, obj any) { w.onPod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.podGone(string(p.UID))
			}
		},
	})
	must(w.t, err)
	var mu sync.Mutex
	holder := ""
	_, err = inNS.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onLease(obj, &holder, &mu) },
		UpdateFunc: func(_, obj any) { w.onLease(obj, &holder, &mu) },
	})
	must(w.t, err)
	nodes.Start(ctx.Done())
	inNS.Start(ctx.Done())
	nodes.WaitForCacheSync(ctx.Done())
	inNS.WaitForCacheSync(ctx.Done())
	go w.pollCluster(ctx, selector)
}

// pollCluster lists the Nodes and pods four times a second and records what changed since the
// harness last saw them.
func (w *world) pollCluster(ctx context.Context, selector string) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		listed := time.Now() // a Node or pod first seen after this may be missing from the list: not gone
		w.pollNodes(lctx, selector, listed)
		w.pollPods(lctx, listed)
	}, 250*time.Millisecond)
}

// pollNodes records the harness's Nodes as listed, and those missing from the list as gone.
func (w *world) pollNodes(ctx context.Context, selector string, listed time.Time) {
	nodes, err := w.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return
	}
	present := map[string]bool{}
	for i := range nodes.Items {
		present[nodes.Items[i].Name] = true
		w.onNode(&nodes.Items[i])
	}
	for _, name := range w.nodes {
		w.view.mu.Lock()
		before := w.view.since[name].Before(listed)
		w.view.mu.Unlock()
		if !present[name] && before {
			w.nodeGone(name)
		}
	}
}

// pollPods records the workload's pods as listed, and those missing from the list as gone.
func (w *world) pollPods(ctx context.Context, listed time.Time) {
	pods, err := w.c.Client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	present := map[string]bool{}
	for i := range pods.Items {
		present[string(pods.Items[i].UID)] = true
		w.onPod(&pods.Items[i])
	}
	w.view.mu.Lock()
	var gone []string
	for uid, v := range w.view.pods {
		if !present[uid] && !v.deleted && w.view.since[uid].Before(listed) {
			gone = append(gone, uid)
		}
	}
	w.view.mu.Unlock()
	for _, uid := range gone {
		w.podGone(uid)
	}
}

// onLease records the coordinators' Lease changing hands.
func (w *world) onLease(obj any, holder *string, mu *sync.Mutex) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != "edgedrain-coordinator" {
		return
	}
	h := ""
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	mu.Lock()
	changed := h != *holder
	*holder = h
	mu.Unlock()
	if changed {
		w.add(Event{Kind: KindLease, Holder: h})
	}
}

// evictable: kubectl drain would evict it (not a DaemonSet's pod, not a mirror pod).
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}
