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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// drainerSelector selects drainer Jobs.
var drainerSelector = labels.SelectorFromSet(labels.Set{DrainerLabel: "true"})

// Gate is the volume gate the coordinator asks before a node goes down (coordinator.VolumeGate):
// New, then Start (caches), then Check and Release from the coordinator, and Run for orphaned
// PVCs while the coordinator is the leader.
type Gate struct {
	cfg      Config
	log      logrus.FieldLogger
	metrics  *Metrics
	rules    []Rule
	longhorn *Longhorn
	sources  []Source

	starting atomic.Bool
	ready    atomic.Bool
	nodes    listersv1.NodeLister
	pvs      listersv1.PersistentVolumeLister
	pvIndex  cache.Indexer
	pvcs     listersv1.PersistentVolumeClaimLister
	podIndex cache.Indexer
	vaIndex  cache.Indexer // storage.k8s.io VolumeAttachments by node
	sts      appslisters.StatefulSetLister
	jobs     batchlisters.JobLister
	// namespaces and nsSelector find the namespaces Config.Drainers allows by label; both nil
	// without a NamespaceSelector.
	namespaces listersv1.NamespaceLister
	nsSelector labels.Selector
	wake       chan struct{} // a change Run may care about
	changes    chan struct{} // a change a Check may depend on (Changed)

	nodeMu      sync.Mutex
	nodeLocks   map[string]*sync.Mutex
	taskMu      sync.Mutex
	tasks       map[string]*drainTask
	watchMu     sync.Mutex
	watched     map[string]watchedNode // nodes whose checks are blocked (react.go)
	detachMu    sync.Mutex
	detachSince map[string]time.Time // node -> when its volumes were first seen attached after eviction
	badMu       sync.Mutex
	bad         map[string]uint64 // problem key -> hash of what was reported (reportOnce)
	// readFresh reads the Nodes and the sources from the API server for the check before
	// COMPLETE (readAPI; confirm.go).
	readFresh func(context.Context) ([]*corev1.Node, []Source, error)
	away      awayMemory // the nodes' last measured time away (hold.go)
}

var (
	_ coordinator.VolumeGate   = (*Gate)(nil)
	_ coordinator.GateReleaser = (*Gate)(nil)
	_ coordinator.GateHolder   = (*Gate)(nil)
	_ coordinator.GateWatcher  = (*Gate)(nil)
)

// New checks cfg and returns a gate; Start fills its caches.
func New(cfg Config) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		l := logrus.New()
		l.SetLevel(logrus.PanicLevel)
		cfg.Logger = l
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rules := cfg.Rules
	if rules == nil {
		rules = DefaultRules()
	}
	sel, _ := cfg.Drainers.selector() // checked by Validate
	g := &Gate{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, rules: rules, nsSelector: sel,
		wake: make(chan struct{}, 1), changes: make(chan struct{}, 1), nodeLocks: map[string]*sync.Mutex{}, tasks: map[string]*drainTask{}, bad: map[string]uint64{},
		detachSince: map[string]time.Time{}, watched: map[string]watchedNode{}}
	g.longhorn = NewLonghorn(cfg.Dynamic, cfg.Client.Discovery(), cfg.LonghornNamespace, cfg.Logger)
	g.longhorn.onChange = g.longhornChanged
	g.sources = append([]Source{g.longhorn}, cfg.Sources...)
	g.readFresh = g.readAPI
	return g, nil
}

// Start starts the gate's informers (nodes, PVs, PVCs, pods, StatefulSets, drainer Jobs,
// namespaces when Config.Drainers has a NamespaceSelector, and each source's), which run until
// ctx ends, and waits at most Config.SyncTimeout for them to
// fill. It may be called once.
func (g *Gate) Start(ctx context.Context) error {
	if !g.starting.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	factory := informers.NewSharedInformerFactory(g.cfg.Client, 0)
	jobFactory := informers.NewSharedInformerFactoryWithOptions(g.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = drainerSelector.String() }))
	nodes := factory.Core().V1().Nodes()
	pvs := factory.Core().V1().PersistentVolumes()
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pods := factory.Core().V1().Pods()
	sts := factory.Apps().V1().StatefulSets()
	jobs := jobFactory.Batch().V1().Jobs()
	vas := factory.Storage().V1().VolumeAttachments()
	if err := errors.Join(
		vas.Informer().AddIndexers(cache.Indexers{indexByAttachedNode: vaNode}),
		pvs.Informer().AddIndexers(cache.Indexers{indexByHostname: pvHostnames}),
		pods.Informer().AddIndexers(cache.Indexers{indexByClaim: podClaims}),
		pods.Informer().SetTransform(trimPod),
	); err != nil {
		return fmt.Errorf("volume gate informers: %w", err)
	}
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { g.signal() },
		UpdateFunc: func(any, any) { g.signal() },
		DeleteFunc: func(any) { g.signal() },
	}
	all := []cache.SharedIndexInformer{nodes.Informer(), pvs.Informer(), pvcs.Informer(), pods.Informer(), sts.Informer(), jobs.Informer(), vas.Informer()}
	waking := []cache.SharedIndexInformer{pvcs.Informer(), sts.Informer(), jobs.Informer()}
	if g.nsSelector != nil {
		namespaces := factory.Core().V1().Namespaces()
		g.namespaces = namespaces.Lister()
		all, waking = append(all, namespaces.Informer()), append(waking, namespaces.Informer())
	}
	var synced []cache.InformerSynced
	for _, inf := range all {
		synced = append(synced, inf.HasSynced)
	}
	for inf, concerns := range map[cache.SharedIndexInformer]func(any) bool{
		pvs.Informer(): g.anyWatched, pvcs.Informer(): g.anyWatched, jobs.Informer(): g.anyWatched,
		pods.Informer(): g.podConcerns, vas.Informer(): g.attachmentConcerns,
	} {
		if _, err := inf.AddEventHandler(g.reactTo(concerns)); err != nil {
			return fmt.Errorf("volume gate informers: %w", err)
		}
	}
	for _, inf := range waking {
		if _, err := inf.AddEventHandler(wake); err != nil {
			return fmt.Errorf("volume gate informers: %w", err)
		}
	}
	g.nodes, g.pvs, g.pvIndex, g.pvcs = nodes.Lister(), pvs.Lister(), pvs.Informer().GetIndexer(), pvcs.Lister()
	g.podIndex, g.sts, g.jobs, g.vaIndex = pods.Informer().GetIndexer(), sts.Lister(), jobs.Lister(), vas.Informer().GetIndexer()
	factory.Start(ctx.Done())
	jobFactory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		jobFactory.Shutdown()
	}()
	for _, s := range g.sources {
		if err := s.Start(ctx); err != nil {
			return fmt.Errorf("volume source %s: %w", s.Name(), err)
		}
		synced = append(synced, s.HasSynced)
	}
	sctx, cancel := context.WithTimeout(ctx, g.cfg.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		return fmt.Errorf("%w within %s", ErrNotSynced, g.cfg.SyncTimeout)
	}
	for _, s := range g.sources {
		available := 0.0
		if s.Available() {
			available = 1
		}
		g.metrics.SourceAvailable.WithLabelValues(s.Name()).Set(available)
	}
	for _, s := range g.sources {
		if _, ok := s.(FreshReader); !ok && s.Available() {
			g.log.WithField("source", s.Name()).Warn("this storage system cannot be read afresh: the check before COMPLETE trusts its caches, which may be behind the API")
		}
	}
	g.ready.Store(true)
	g.log.WithField("policy", g.cfg.Policy.String()).Info("volume gate ready")
	return nil
}

// Check reports whether node may go down: every replicated volume with data on node is safe on
// other nodes (by the rules, under the policy), and, on the check after eviction, every drainer
// Job configured for the node's local volumes has succeeded (it starts them). It answers from
// the caches; the only writes are those the policy and the drainers need.
func (g *Gate) Check(ctx context.Context, node string, opts coordinator.GateOptions) (coordinator.GateResult, error) {
	if !g.ready.Load() {
		return coordinator.GateResult{}, ErrNotStarted
	}
	start := time.Now()
	defer func() { g.metrics.CheckDuration.Observe(time.Since(start).Seconds()) }()
	lock := g.nodeLock(node)
	lock.Lock()
	defer lock.Unlock()
	log := g.log.WithField("node", node)

	found, err := g.replicated(node, opts)
	if err != nil {
		return coordinator.GateResult{}, err
	}
	var blockers []nodedrain.Blocker // the replicated volumes'
	blocked := false
	for _, sf := range found {
		s := sf.source
		if !s.Available() {
			continue
		}
		b, bl := sf.blockers()
		blockers, blocked = append(blockers, b...), blocked || bl
		for _, f := range sf.findings {
			log.WithFields(logrus.Fields{"volume": f.Volume.Name, "rule": f.Rule, "verdict": f.Decision.Verdict.String()}).Debug(f.Decision.Reason)
		}
		if ev, ok := s.(Evictor); ok && g.policyFor(opts) == PolicyEvict && !opts.WholeCluster && sf.volumes > 0 && ctx.Err() == nil {
			// Not aborted by the drain's cancellation once sent: client-go returns at once from
			// an aborted request that the API server may still apply, after the Release that
			// follows the cancellation has read the node and found nothing to undo. Answered
			// here, under the node's lock, the write is seen by that Release, which waits for it.
			// The caller's deadline still bounds it.
			budget := g.cfg.WriteTimeout
			if dl, ok := ctx.Deadline(); ok {
				budget = min(budget, time.Until(dl))
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
			changed, err := ev.RequestEviction(wctx, node)
			cancel()
			switch {
			case err != nil:
				log.WithError(err).Warn("could not ask the storage system to evict the node's replicas; will ask again")
			case changed:
				g.event(nodeRef(node), corev1.EventTypeNormal, "VolumeEvictionRequested", "asked %s to move this node's replicas to other nodes (volume policy evict)", s.Name())
			}
		}
	}
	checkLocal := g.checkLocal
	if opts.Decommission {
		checkLocal = g.decommissionLocal
	}
	local, localBlocked := checkLocal(ctx, node, opts)
	others, othersBlocked := local, localBlocked
	if opts.AfterEviction {
		attached, waiting := g.checkDetached(node)
		others, othersBlocked = append(others, attached...), othersBlocked || waiting
	} else {
		g.forgetDetach(node) // a new eviction round: its volumes get their own detach wait
	}
	if opts.AfterEviction && !opts.LastKnown && !blocked && !othersBlocked {
		// COMPLETE follows: the node's replicas are held for its time away first (hold.go).
		if held := g.holdReplicas(ctx, log, node, opts); len(held) > 0 {
			others, othersBlocked = append(others, held...), true
		}
	}
	if opts.AfterEviction && !opts.LastKnown && !blocked && !othersBlocked && g.policyFor(opts) != PolicyAllow {
		// COMPLETE follows this answer: decided again on a read of the API (confirm.go).
		if blockers, blocked, err = g.confirmSafe(ctx, log, node, opts, start, others); err != nil {
			return coordinator.GateResult{}, err
		}
	} else {
		blockers, blocked = append(blockers, others...), blocked || othersBlocked
		g.forgetReport(staleKey(node))
	}
	g.watch(node, blocked, blockers)
	if g.policyFor(opts) == PolicyAllow {
		blocked = false
	}
	return coordinator.GateResult{Safe: !blocked, Blockers: blockers}, nil
}

// checkLocal handles the node-local volumes: their data stays on the node, so only a configured
// drainer can block, and it runs on the check after eviction (the pods are gone).
func (g *Gate) checkLocal(ctx context.Context, node string, opts coordinator.GateOptions) ([]nodedrain.Blocker, bool) {
	var out []nodedrain.Blocker
	blocked := false
	for _, lv := range g.localVolumes(node) {
		src, ok := g.templateFor(lv.pvc)
		if !ok || lv.pvc.Labels[DrainStatusLabel] == DrainStatusDrained {
			continue
		}
		tmpl, err := g.admitTemplate(src, lv.pvc)
		if err != nil {
			out = append(out, volumeBlocker("local", lv.pv.Name, lv.pvc.Namespace, lv.pvc.Name, fmt.Sprintf("drainer template on %s: %v", src.where, err), 0))
			blocked = true
			continue
		}
		if !opts.AfterEviction {
			continue
		}
		done, reason := g.drainPVC(ctx, lv.pvc, tmpl, node, TriggerNodeDrain)
		if !done {
			out = append(out, volumeBlocker("local", lv.pv.Name, lv.pvc.Namespace, lv.pvc.Name, reason, 0))
			blocked = true
		}
	}
	return out, blocked
}

// Release undoes the work the gate started for node's drain, which is over (cancelled, or the
// node is back): it withdraws the storage systems' eviction requests it made and stops the
// node's drainer Jobs still running. PVCs already drained keep their label until used again.
//
// It may be called for any node, at any time, as often as wanted: where there is nothing to undo
// (no request the gate made, no drainer running, no such node) it changes nothing, records no
// Event and returns nil. An error (ErrNotStarted before Start; a withdrawal or a deletion that
// failed) means work may still be held for node: call Release again later; Held lists the
// nodes with work held.
func (g *Gate) Release(ctx context.Context, node string) error {
	if !g.ready.Load() {
		return fmt.Errorf("release node %s: %w", node, ErrNotStarted)
	}
	lock := g.nodeLock(node)
	lock.Lock()
	defer lock.Unlock()
	var errs []error
	for _, s := range g.sources {
		ev, ok := s.(Evictor)
		if !ok {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
		changed, err := ev.CancelEviction(wctx, node)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		case changed:
			g.event(nodeRef(node), corev1.EventTypeNormal, "VolumeEvictionWithdrawn", "withdrew the request to %s to move this node's replicas", s.Name())
		}
	}
	if err := g.stopNodeDrainers(ctx, node); err != nil {
		errs = append(errs, err)
	}
	if err := g.releaseHold(ctx, node); err != nil {
		errs = append(errs, err)
	}
	g.forgetDetach(node)
	g.watch(node, false, nil)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release node %s: %w", node, err)
	}
	return nil
}

// Held returns, sorted, the nodes for which the gate holds work that Release would undo: an
// eviction request a storage system carries because the gate made it (for Longhorn, a Longhorn
// Node with LonghornEvictionAnnotation), or a drainer Job of the node's drain still running
// (labelled DrainerLabel, trigger TriggerNodeDrain, pinned to the node by
// DrainerNodeAnnotation). It reads the caches, so work done or undone a moment ago may not show
// yet. The coordinator calls it when it starts and releases each node listed that has no open
// request: work left behind when a request was withdrawn while no coordinator ran. Before
// Start it returns ErrNotStarted.
func (g *Gate) Held(ctx context.Context) ([]string, error) {
	if !g.ready.Load() {
		return nil, fmt.Errorf("nodes held by the volume gate: %w", ErrNotStarted)
	}
	held := map[string]bool{}
	var errs []error
	for _, s := range g.sources {
		ev, ok := s.(Evictor)
		if !ok {
			continue
		}
		nodes, err := ev.RequestedEvictions(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s eviction requests: %w", s.Name(), err))
			continue
		}
		for _, n := range nodes {
			held[n] = true
		}
	}
	if g.longhorn != nil {
		for _, n := range g.longhorn.HeldNodes() {
			held[n] = true
		}
	}
	jobs, err := g.jobs.List(drainerSelector)
	if err != nil {
		errs = append(errs, fmt.Errorf("list drainer Jobs: %w", err))
	}
	for _, job := range jobs {
		if node, ok := heldDrainer(job); ok {
			held[node] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("nodes held by the volume gate: %w", err)
	}
	out := make([]string, 0, len(held))
	for n := range held {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// parseTemplate parses a template, reporting an invalid one once per value (Event on the object
// carrying it, metric, log).
func (g *Gate) parseTemplate(src templateSource) (DrainerTemplate, error) {
	key := "invalid/" + src.ref.Kind + "/" + src.ref.Namespace + "/" + src.ref.Name
	t, err := ParseDrainerTemplate(src.raw)
	if err == nil {
		g.forgetReport(key)
		return t, nil
	}
	if g.reportOnce(key, src.raw) {
		g.metrics.TemplateErrors.Inc()
		g.log.WithField("object", src.where).WithError(err).Warn("invalid drainer template")
		g.event(src.ref, corev1.EventTypeWarning, "InvalidDrainerTemplate", "annotation %s: %v", DrainerTemplateAnnotation, err)
	}
	return t, err
}

func (g *Gate) nodeLock(node string) *sync.Mutex {
	g.nodeMu.Lock()
	defer g.nodeMu.Unlock()
	l := g.nodeLocks[node]
	if l == nil {
		l = &sync.Mutex{}
		g.nodeLocks[node] = l
	}
	return l
}

func (g *Gate) event(ref *corev1.ObjectReference, kind, reason, format string, args ...any) {
	if g.cfg.Recorder != nil {
		g.cfg.Recorder.Eventf(ref, kind, reason, format, args...)
	}
}

func nodeRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
}

func (g *Gate) now() time.Time { return g.cfg.Now() }

// signal wakes Run.
func (g *Gate) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// trimPod keeps only what the gate reads of a pod (name, labels, node, phase, claims), so that
// caching every pod of the cluster stays cheap.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
		Labels: pod.Labels, ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp}}
	if c := metav1.GetControllerOfNoCopy(pod); c != nil {
		out.OwnerReferences = []metav1.OwnerReference{*c}
	}
	if m, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		out.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: m}
	}
	out.Spec.NodeName = pod.Spec.NodeName
	out.Status.Phase = pod.Status.Phase
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		}
	}
	return out, nil
}
