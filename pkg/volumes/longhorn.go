package volumes

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// LonghornGroupVersion is the API group and version of the Longhorn objects the gate reads.
const LonghornGroupVersion = "longhorn.io/v1beta2"

// The Longhorn resources the gate reads.
var (
	longhornVolumes  = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "volumes"}
	longhornReplicas = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "replicas"}
	longhornEngines  = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "engines"}
	longhornNodes    = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "nodes"}
	longhornSettings = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "settings"}
)

// Index names of the Longhorn caches.
const (
	indexByNode   = "node"
	indexByVolume = "volume"
)

// Longhorn is the Source for Longhorn volumes: it caches volumes, replicas, engines and nodes
// (longhorn.io/v1beta2) with dynamic informers in one namespace, and reads only those caches
// when asked about a node.
type Longhorn struct {
	dyn       dynamic.Interface
	disc      discovery.DiscoveryInterfaceWithContext
	namespace string
	log       logrus.FieldLogger
	onChange  func(resource string, u *unstructured.Unstructured) // every change of a cached object; nil: none

	installed atomic.Bool
	synced    []cache.InformerSynced
	volumes   cache.Indexer
	replicas  cache.Indexer
	engines   cache.Indexer // nil when Longhorn serves no engines
	nodes     cache.Indexer // nil when Longhorn serves no nodes
	settings  cache.Indexer // nil when Longhorn serves no settings

	memoMu sync.Mutex
	memo   map[*unstructured.Unstructured]any // parsed facts of the cached objects, by object
}

var (
	_ Source  = (*Longhorn)(nil)
	_ Evictor = (*Longhorn)(nil)
)

// NewLonghorn returns the Longhorn source reading namespace through dyn; disc tells it whether
// Longhorn's CRDs are installed.
func NewLonghorn(dyn dynamic.Interface, disc discovery.DiscoveryInterfaceWithContext, namespace string, log logrus.FieldLogger) *Longhorn {
	return &Longhorn{dyn: dyn, disc: disc, namespace: namespace, log: log, memo: map[*unstructured.Unstructured]any{}}
}

// Name returns "longhorn".
func (l *Longhorn) Name() string { return "longhorn" }

// Available reports whether Longhorn's CRDs are served and its caches are synced.
func (l *Longhorn) Available() bool { return l.installed.Load() && l.HasSynced() }

// HasSynced reports whether the caches are filled; true when Longhorn is not installed.
func (l *Longhorn) HasSynced() bool {
	for _, f := range l.synced {
		if !f() {
			return false
		}
	}
	return true
}

// Start asks discovery whether longhorn.io/v1beta2 is served and starts informers, until ctx
// ends, for the resources it finds (HasSynced tells when they are filled). Without Longhorn's
// volumes and replicas it logs once that replicated volumes are not checked and returns nil.
func (l *Longhorn) Start(ctx context.Context) error {
	served, err := l.served(ctx)
	if err != nil {
		return err
	}
	if !served[longhornVolumes.Resource] || !served[longhornReplicas.Resource] {
		l.log.WithField("source", l.Name()).Warnf("Longhorn CRDs (%s volumes, replicas) are not installed: "+
			"replicated volumes are not checked and every node is allowed", LonghornGroupVersion)
		return nil
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(l.dyn, 0, l.namespace, nil)
	informer := func(gvr schema.GroupVersionResource, indexers cache.Indexers, parse func(*unstructured.Unstructured) any) (cache.Indexer, error) {
		inf := factory.ForResource(gvr).Informer()
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return nil, fmt.Errorf("longhorn %s informer: %w", gvr.Resource, err)
		}
		if _, err := inf.AddEventHandler(l.parseOnChange(parse)); err != nil {
			return nil, fmt.Errorf("longhorn %s informer: %w", gvr.Resource, err)
		}
		if _, err := inf.AddEventHandler(l.notifyOnChange(gvr.Resource)); err != nil {
			return nil, fmt.Errorf("longhorn %s informer: %w", gvr.Resource, err)
		}
		if len(indexers) > 0 {
			if err := inf.AddIndexers(indexers); err != nil {
				return nil, fmt.Errorf("longhorn %s informer: %w", gvr.Resource, err)
			}
		}
		l.synced = append(l.synced, inf.HasSynced)
		return inf.GetIndexer(), nil
	}
	if l.volumes, err = informer(longhornVolumes, cache.Indexers{indexByAttachedNode: longhornAttachedNode}, func(u *unstructured.Unstructured) any { return parseVolume(u) }); err != nil {
		return err
	}
	byNodeAndVolume := cache.Indexers{indexByNode: specIndex("nodeID"), indexByVolume: specIndex("volumeName")}
	if l.replicas, err = informer(longhornReplicas, byNodeAndVolume, func(u *unstructured.Unstructured) any { return parseReplica(u) }); err != nil {
		return err
	}
	if served[longhornEngines.Resource] {
		if l.engines, err = informer(longhornEngines, cache.Indexers{indexByVolume: specIndex("volumeName")},
			func(u *unstructured.Unstructured) any { return parseEngine(u) }); err != nil {
			return err
		}
	}
	if served[longhornNodes.Resource] {
		if l.nodes, err = informer(longhornNodes, nil, func(u *unstructured.Unstructured) any { return parseNode(u) }); err != nil {
			return err
		}
	}
	if served[longhornSettings.Resource] {
		if l.settings, err = informer(longhornSettings, nil, nil); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	l.installed.Store(true)
	return nil
}

// served returns the longhorn.io/v1beta2 resources the API server serves; none when the group
// version is not installed.
//
// An API server that does not answer at all (not started yet, or this process's path to it cut)
// is asked again until it does or ctx ends: a coordinator started meanwhile waits for it (saying
// so each minute) instead of exiting at once, again and again. (Its /healthz is served only once
// it has started: a liveness probe shorter than the outage still restarts it.) An answer that
// refuses (forbidden, an error) ends it.
func (l *Longhorn) served(ctx context.Context) (map[string]bool, error) {
	var list *metav1.APIResourceList
	var err error
	began, warned := time.Now(), time.Time{}
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		list, err = l.disc.ServerResourcesForGroupVersionWithContext(ctx, LonghornGroupVersion)
		var answered apierrors.APIStatus
		if err == nil || errors.As(err, &answered) || ctx.Err() != nil {
			break
		}
		if time.Since(warned) >= time.Minute { // (said again each minute: a bad address or CA never heals)
			l.log.WithError(err).WithField("waited", time.Since(began).Round(time.Second).String()).
				Warnf("cannot reach the API server to discover %s; asking again until it answers", LonghornGroupVersion)
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", LonghornGroupVersion, err)
	}
	out := map[string]bool{}
	for _, r := range list.APIResources {
		out[r.Name] = true
	}
	return out, nil
}

// Volumes returns every Longhorn volume with a replica on node, from the caches.
func (l *Longhorn) Volumes(node string) ([]Volume, error) {
	if !l.Available() {
		return nil, nil
	}
	// Read the caches under memoMu: an object read before an informer handler forgets it would
	// otherwise be parsed into the memo after, and stay there.
	l.memoMu.Lock()
	defer l.memoMu.Unlock()
	here, err := l.replicas.ByIndex(indexByNode, node)
	if err != nil {
		return nil, fmt.Errorf("longhorn replicas of node %s: %w", node, err)
	}
	names := make([]string, 0, len(here))
	seen := make(map[string]bool, len(here))
	for _, obj := range here {
		if r := l.replicaFacts(obj); r != nil && r.volume != "" && !seen[r.volume] {
			seen[r.volume] = true
			names = append(names, r.volume)
		}
	}
	sort.Strings(names)
	out := make([]Volume, 0, len(names))
	for _, name := range names {
		v, err := l.volume(name)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// volume gathers one volume's facts from the volume, replica and engine caches.
func (l *Longhorn) volume(name string) (Volume, error) {
	var vol *volumeFacts
	if obj, ok, err := l.volumes.GetByKey(l.namespace + "/" + name); err != nil {
		return Volume{}, fmt.Errorf("longhorn volume %s: %w", name, err)
	} else if ok {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			vol = memo(l, u, parseVolume)
		}
	}
	objs, err := l.replicas.ByIndex(indexByVolume, name)
	if err != nil {
		return Volume{}, fmt.Errorf("longhorn replicas of volume %s: %w", name, err)
	}
	reps := make([]*replicaFacts, 0, len(objs))
	for _, obj := range objs {
		if r := l.replicaFacts(obj); r != nil {
			reps = append(reps, r)
		}
	}
	var engs []*engineFacts
	if l.engines != nil {
		objs, err := l.engines.ByIndex(indexByVolume, name)
		if err != nil {
			return Volume{}, fmt.Errorf("longhorn engines of volume %s: %w", name, err)
		}
		for _, obj := range objs {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				engs = append(engs, memo(l, u, parseEngine))
			}
		}
	}
	return buildVolume(name, vol, reps, engs, l.antiAffinity()), nil
}

func (l *Longhorn) replicaFacts(obj any) *replicaFacts {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	return memo(l, u, parseReplica)
}

// memo returns the facts parsed from a cached object, parsing it if the informer's handler has
// not yet. Informers replace an object on every change and never modify it, so its pointer
// identifies its version. The caller holds l.memoMu.
func memo[T any](l *Longhorn, u *unstructured.Unstructured, parse func(*unstructured.Unstructured) *T) *T {
	if f, ok := l.memo[u].(*T); ok {
		return f
	}
	f := parse(u)
	l.memo[u] = f
	return f
}

// notifyOnChange passes every event of resource's informer on to onChange.
func (l *Longhorn) notifyOnChange(resource string) cache.ResourceEventHandlerFuncs {
	notify := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok && l.onChange != nil {
			l.onChange(resource, u)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, cur any) { notify(cur) }, DeleteFunc: notify}
}

// parseOnChange keeps l.memo current from an informer's events: each new version is parsed
// when it arrives, off the checks' path, and replaced versions are forgotten. parse nil:
// objects not memoised.
func (l *Longhorn) parseOnChange(parse func(*unstructured.Unstructured) any) cache.ResourceEventHandlerFuncs {
	put := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && parse != nil {
			f := parse(u)
			l.memoMu.Lock()
			l.memo[u] = f
			l.memoMu.Unlock()
		}
	}
	forget := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			l.memoMu.Lock()
			delete(l.memo, u)
			l.memoMu.Unlock()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    put,
		UpdateFunc: func(old, cur any) { forget(old); put(cur) },
		DeleteFunc: forget,
	}
}

// specIndex indexes objects by a string field of their spec.
func specIndex(field string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		if v := specString(obj, field); v != "" {
			return []string{v}, nil
		}
		return nil, nil
	}
}

// dropManagedFields keeps the caches small: the gate never reads managed fields.
func dropManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}
