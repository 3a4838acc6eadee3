package coordinator

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Engine runs every node's drain. It keeps no state that matters only in memory: each drain is
// rebuilt from the bus (its last published status and the current request) and the cluster
// (edgedrain's cordon annotation) when Run starts, so a killed coordinator resumes where it was.
type Engine struct {
	cfg      Config
	log      logrus.FieldLogger
	metrics  *Metrics
	requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
	nodes    listersv1.NodeLister // the nodes it manages (NodeSelector)
	// clusterNodes are all the nodes of the cluster (ClusterSelector): admission's view.
	clusterNodes listersv1.NodeLister
	managed      labels.Selector
	ops          *executor

	core         *Core
	terms        *pubsub.Bucket[nodedrain.Term] // the status bucket, for the term record
	lastSeq      uint64                         // the status bucket's revision of our last write
	term         uint64                         // this run's term: its term record's revision
	seq          int                            // statuses this run published (each status's Seq)
	ownRevs      map[string]uint64              // the revision of this run's last write under each node's key
	statusesLive bool                           // the status watch is past its snapshot
	// declaredReadAt is when confirmDeclared last read the requests afresh.
	declaredReadAt time.Time
	// republishAfter is the node whose status a republish pass could not write last: the next
	// pass starts after it.
	republishAfter string
	unpublished    map[string]bool // statuses whose publication failed; retried every tick
	recheck        map[string]bool // request keys whose change could not be checked; every tick
	repairs        map[string]bool // status keys holding a forgery not yet repaired; every tick
	repairNext     string          // retryRepairs starts at the first key from it
	repairFails    map[string]int  // ticks running each of repairs could not be read
	repairsLost    uint64          // keys of repairs given up (could not be read)
	apiDownSince   time.Time
	started        time.Time // when the process started its informers (Config.Started): Core.TermBegins
	results        chan nodeEvent
	nodeChanged    chan struct{}
	timer          *time.Timer
	stopRun        context.CancelFunc
	runs           uint64 // Runs started

	held map[string]heldSince // drains held by the maintenance policy (metrics)

	// unlanded holds the COMPLETEs whose publication failed, each with the bucket revision its
	// write was fenced on (see completesNotLanded).
	unlanded map[string]unlandedComplete
	// landed: the COMPLETEs on the bus, which a refused write may put back at once (Landed).
	landed Landed

	// warnings samples the warnings about single bus payloads; metrics count them all.
	warnings ratelog.Limiter

	conds *conditions // the nodes' maintenance conditions (nil: Config.NodeConditions and LifecycleConditions off)
}

// leading reports whether this run may still act: with leader election, only while the Lease
// was renewed recently enough that no other replica can hold it. Once it may not, the run stops
// (the leader election sees the lost Lease and campaigns again).
//
// In API-outage mode (see outage.go) it is false without stopping the run: the run goes on with
// fenced status writes only (mayAct).
func (e *Engine) leading(ctx context.Context) bool {
	if stillLeading(ctx) {
		return true
	}
	if inOutage(ctx) {
		return false
	}
	if ctx.Err() == nil {
		e.log.Warn("the Lease has not been renewed within the renew deadline: this coordinator stops acting")
		e.stopRun()
	}
	return false
}

// mayAct reports whether this run may act at all: it leads, or it is in API-outage mode.
func (e *Engine) mayAct(ctx context.Context) bool {
	return e.leading(ctx) || inOutage(ctx)
}

// claimTerm writes this run's term record to the status bucket before it acts: from then on
// the fenced writes of a coordinator that lost its Lease in an API outage are refused.
func (e *Engine) claimTerm(ctx context.Context) error {
	id := e.cfg.Identity
	if id == "" {
		id = "edgedrain-coordinator"
	}
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	rev, err := e.terms.Publish(pctx, nodedrain.TermKey, nodedrain.Term{Coordinator: id, Since: e.cfg.Now(), KeyID: e.cfg.Signer.KeyID()})
	if err != nil {
		return fmt.Errorf("write the coordinator's term record to %s: %w", nodedrain.StatusBucket, err)
	}
	e.lastSeq, e.term, e.seq, e.ownRevs = rev, rev, 0, map[string]uint64{}
	return nil
}

// statusHistory is how many statuses per node the status bucket keeps.
const statusHistory = 8

// nodeEvent is an operation's result for a node's drain, or (probe set) whether the API answered.
type nodeEvent struct {
	node  string
	ev    nodedrain.Event
	probe *bool
	// unready: the probe's API server answered that it is not ready (unready /readyz): it is
	// recovering, and the informers' lists may still fail, so their view settles from now on.
	unready bool
	// rebooted: the node's kubelet reports this new boot ID (rebooted.go).
	rebooted string
	run      uint64 // the Run that posted it: a result of an earlier run is dropped
}

// runKey carries the number of the engine's Run in its context, so that results posted by an
// earlier run's goroutines (which may still land in the channel) are told apart.
type runKey struct{}

func runOf(ctx context.Context) uint64 {
	n, _ := ctx.Value(runKey{}).(uint64)
	return n
}

// fromThisRun reports whether r was posted by the Run whose context is ctx. An earlier run's
// goroutine may still put a result in the channel as it stops (its select sees both the free
// buffer and its ended context); fed to this run, it could count as a failed attempt here.
func fromThisRun(ctx context.Context, r nodeEvent) bool { return r.run == runOf(ctx) }

// NewEngine checks cfg and returns an engine; Run starts it.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator config: %w", err)
	}
	if cfg.Gate == nil {
		cfg.Gate = AllowAll{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		l := logrus.New()
		l.SetLevel(logrus.PanicLevel)
		cfg.Logger = l
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics,
		core: NewCore(cfg.Limits, cfg.MaxConcurrentDrains), unpublished: map[string]bool{}, unlanded: map[string]unlandedComplete{}, landed: Landed{}, recheck: map[string]bool{}, repairs: map[string]bool{},
		results: make(chan nodeEvent, 256), nodeChanged: make(chan struct{}, 1), repairFails: map[string]int{}, started: cfg.Started}
	if e.started.IsZero() {
		e.started = cfg.Now()
	}
	e.ops = newExecutor(e)
	return e, nil
}

func (e *Engine) openBuckets(ctx context.Context) error {
	var err error
	bucket := func(name, desc string) pubsub.BucketConfig {
		return pubsub.BucketConfig{Name: name, Description: desc, Replicas: e.cfg.BucketReplicas,
			MaxValueSize: nodedrain.MaxPayloadSize, Logger: e.log,
			DecodeErrors: e.metrics.BusDecodeErrors.WithLabelValues(name), NoRollup: true}
	}
	// No rollups on either bucket (a client allowed one key could erase every key with one), and
	// a few values of request history (see reconcileKey).
	reqCfg := bucket(nodedrain.RequestsBucket, "edgedrain: drain request of each node, written by its agent")
	reqCfg.History = requestHistory
	e.requests, err = pubsub.OpenBucket(ctx, e.cfg.JetStream, reqCfg, nodedrain.RequestCodec{})
	if err != nil {
		return err
	}
	// A few values of history per node, so that a watcher that is a moment behind (a status view,
	// the demo) still sees every transition instead of only the latest; Get and a new watcher's
	// snapshot still give the last value.
	statusCfg := bucket(nodedrain.StatusBucket, "edgedrain: drain status of each node, written by the coordinator")
	statusCfg.History = statusHistory
	statusCfg.WriterMark = nodedrain.StatusWriterMark
	e.statuses, err = pubsub.OpenBucket(ctx, e.cfg.JetStream, statusCfg, nodedrain.StatusCodec{})
	if err != nil {
		return err
	}
	e.terms, err = pubsub.OpenBucket(ctx, e.cfg.JetStream, statusCfg, nodedrain.TermCodec{})
	return err
}

// Run drains nodes until ctx ends; it returns nil then. Operations under way are abandoned, not
// undone: their durable state (the published status, the cordon annotation) lets the next Run
// carry on.
func (e *Engine) Run(ctx context.Context) error {
	e.runs++
	ctx, cancel := context.WithCancel(context.WithValue(ctx, runKey{}, e.runs))
	defer cancel()
	e.stopRun = cancel
	// Everything in memory is rebuilt from the bus and the cluster (resume).
	e.core, e.unpublished, e.apiDownSince = NewCore(e.cfg.Limits, e.cfg.MaxConcurrentDrains), map[string]bool{}, time.Time{}
	e.unlanded, e.landed = map[string]unlandedComplete{}, Landed{}
	e.repairs, e.repairFails, e.repairNext = map[string]bool{}, map[string]int{}, ""
	e.core.SetStaleHolderTimeout(e.cfg.StaleHolderTimeout)
	e.core.SetAllowDecommission(e.cfg.AllowDecommission)
	e.core.SetInformerRelist(e.cfg.InformerRelist)
	e.core.TermBegins(e.cfg.Now(), e.started)
	e.ops = newExecutor(e)
	defer e.ops.stopAll()
	if err := e.openBuckets(ctx); err != nil {
		return err
	}
	if !e.leading(ctx) {
		// A run restarted in API-outage mode cannot resume (the node informer needs the API):
		// it waits for the mode to end and the Lease to be won again.
		<-ctx.Done()
		return nil
	}
	if err := e.claimTerm(ctx); err != nil {
		return err
	}
	// The informer holds the cluster's nodes; the coordinator manages those NodeSelector selects.
	factory := informers.NewSharedInformerFactoryWithOptions(e.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = e.cfg.ClusterSelector }))
	nodeInformer := factory.Core().V1().Nodes()
	e.clusterNodes = nodeInformer.Lister()
	managed, err := labels.Parse(e.cfg.NodeSelector)
	if err != nil {
		return fmt.Errorf("node selector %q: %w", e.cfg.NodeSelector, err)
	}
	e.managed = managed
	e.nodes = managedLister{all: e.clusterNodes, sel: managed}
	_, _ = nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.signalNodes() },
		UpdateFunc: func(old, cur any) { e.nodeUpdated(ctx, old, cur) },
		DeleteFunc: func(any) { e.signalNodes() },
	})
	factory.Start(ctx.Done())
	// Shutdown waits for the informers, which stop when ctx ends: end it first, or a Run that
	// returns an error (not cancelled) waits here for ever, still holding the Lease.
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.Informer().HasSynced) {
		return nil // ctx ended
	}
	watcher, err := e.requests.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", nodedrain.RequestsBucket, err)
	}
	defer func() { _ = watcher.Stop() }()
	// Watched from before the resume reads them, so that no forgery falls between the two.
	e.statusesLive = false
	statusWatch, err := e.statuses.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", nodedrain.StatusBucket, err)
	}
	defer func() { _ = statusWatch.Stop() }()
	e.conds = nil
	if e.cfg.NodeConditions || e.cfg.LifecycleConditions {
		e.conds = newConditions(e.cfg.Client, e.nodes, e.log, e.cfg.Now, e.cfg.NodeConditions, e.cfg.LifecycleConditions)
		done := make(chan struct{})
		go func() { defer close(done); e.conds.run(ctx) }()
		defer func() { cancel(); <-done }() // no write of this run after it returned
	}
	if err := e.resume(ctx, watcher); err != nil {
		return err
	}
	// The per-node gauges are this run's: from the drains it resumed, gone when it ends.
	e.metrics.resetNodes()
	defer e.metrics.resetNodes()
	for _, node := range e.core.Nodes() {
		d, _ := e.core.Drain(node)
		e.metrics.observeStatus(d.Status)
	}
	if e.conds != nil {
		for _, node := range e.core.Nodes() {
			d, _ := e.core.Drain(node)
			e.conds.set(d.Status)
		}
		e.conds.sweep(func(node string) bool { _, ok := e.core.Drain(node); return ok })
	}
	e.sweepEvictionRequests(ctx)
	go e.probeAPI(ctx)

	e.timer = time.NewTimer(time.Hour)
	defer e.timer.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	e.afterEvents(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events():
			if !ok {
				if err := watcher.Err(); err != nil {
					return fmt.Errorf("request watch ended: %w", err)
				}
				return nil
			}
			e.requestEvent(ctx, ev)
		case ev, ok := <-statusWatch.Events():
			if !ok {
				if ctx.Err() != nil {
					return nil // the run was stopped: its watches end with it (this case may win the select)
				}
				return fmt.Errorf("status watch ended: %w", statusWatch.Err())
			}
			e.statusEvent(ctx, ev)
		case r := <-e.results:
			if !fromThisRun(ctx, r) {
				continue
			}
			switch {
			case r.probe != nil:
				e.apiReachable(*r.probe)
				if r.unready {
					e.core.APIAnswered(e.cfg.Now())
				}
			case r.rebooted != "":
				e.rebooted(r.node, r.rebooted)
			default:
				e.step(ctx, r.node, r.ev)
			}
		case <-e.timer.C:
			e.fireTimers(ctx)
		case <-e.nodeChanged:
			e.changed(ctx)
		case <-e.maintenanceChanged():
			e.changed(ctx)
		case <-e.gateChanged():
			// EvChanged only brings rechecks forward: admission has nothing new to decide.
			if e.changed(ctx) {
				e.resetTimer()
			}
			continue
		case <-tick.C:
			e.republish(ctx)
			e.recheckKeys(ctx)
			e.retryRepairs(ctx)
			e.checkAPIUnreachable(ctx)
			e.fireTimers(ctx)
		}
		e.afterEvents(ctx)
	}
}

// resume reads the snapshot of requests, the last published statuses and the nodes edgedrain
// cordoned, and rebuilds every drain from them.
func (e *Engine) resume(ctx context.Context, watcher *pubsub.Watcher[nodedrain.NodeDrainRequest]) error {
	requests := map[string]*nodedrain.NodeDrainRequest{}
	// Keys whose newest value its agent did not write (a copy, unusable): decided from their
	// history before the resume, restored on the bus after it (reconcileKey).
	bad := map[string]bool{}
	unchecked := map[string]*nodedrain.NodeDrainRequest{}
	for snapshot := true; snapshot; {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopped (this case may win the select)
				}
				return fmt.Errorf("request watch ended during its snapshot: %w", watcher.Err())
			}
			switch ev.Kind {
			case pubsub.EventPut:
				o, err := e.requests.Origin(ctx, ev.Key, ev.Revision)
				switch {
				case err != nil:
					// Unchecked: served only if its drain is already under way (below), and
					// looked at again every tick.
					if e.checkKey(ev.Key, ev.Value.Node) {
						r := ev.Value
						unchecked[ev.Key] = &r
					}
					e.recheckLater(ev.Key, err)
				case o == pubsub.Copied:
					e.copyFound(ev.Key, ev.Revision)
					bad[ev.Key] = true
				case o == pubsub.Written && e.checkKey(ev.Key, ev.Value.Node):
					r := ev.Value
					requests[ev.Key] = &r
				}
				// An unusable value matters only under a drain under way (see below).
			case pubsub.EventDelete:
				delete(requests, ev.Key)
			case pubsub.EventDecodeError:
				e.warnings.Logger("request-undecodable", e.log).WithField("node", ev.Key).WithError(ev.Err).Warn("ignoring a drain request that does not decode")
			case pubsub.EventSnapshotDone:
				snapshot = false
			}
		}
	}
	statuses, forged, resign, err := e.readStatuses(ctx)
	if err != nil {
		return err
	}
	for _, st := range statuses {
		e.landed.Note(st)
	}
	// A node carrying our cordon annotation is ours to uncordon even if its status was lost.
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	cordoned := map[string]bool{}
	for _, n := range nodes {
		// Also a schedulable node carrying our annotation (kubectl uncordon leaves it): the
		// uncordon clears it, so that a later cordon by someone else is not taken for ours.
		if _, ours := n.Annotations[CordonAnnotation]; ours {
			cordoned[n.Name] = true
		}
	}
	// A drain under way whose key shows no request: a copied delete marker (or an unusable
	// value) hides a request as a withdrawal does; the key's history tells them apart.
	for node, r := range unchecked {
		if st := statuses[node]; underWay(st) && st.RequestID == r.RequestID {
			requests[node] = r
		}
	}
	counted := maps.Clone(bad)
	for node, st := range statuses {
		if requests[node] == nil && underWay(st) {
			bad[node] = true
		}
	}
	found := map[string]genuine{}
	for _, k := range slices.Sorted(maps.Keys(bad)) {
		g, err := e.lastGenuine(ctx, k)
		if err != nil {
			e.recheckLater(k, err)
			continue
		}
		found[k] = g
		if g.newestCopied && !counted[k] {
			e.copyFound(k, g.latest) // a copied delete marker: the snapshot does not show deletes
		}
		switch {
		case g.known && g.req != nil:
			requests[k] = g.req
		case g.known:
			delete(requests, k)
		case requests[k] == nil && underWay(statuses[k]):
			// Copies only: the drain its status describes goes on.
			requests[k] = nodedrain.RequestOf(statuses[k], "(restored from its status: the request key holds no value its agent wrote)")
		}
	}
	in := ResumeInput{Requests: requests, Statuses: statuses, CordonedByUs: cordoned}
	if h, ok := e.cfg.Gate.(GateHolder); ok {
		held, err := h.Held(ctx)
		if err != nil {
			// Not fatal: nodes with a published status are released anyway.
			e.log.WithError(err).Warn("cannot list the nodes the volume gate holds work for")
		}
		in.Held = held
	}
	actions := e.core.Resume(in, e.cfg.Now())
	for _, node := range e.core.Nodes() {
		d, _ := e.core.Drain(node)
		e.log.WithFields(logrus.Fields{"node": node, "status": d.Status.Status, "request": d.Status.RequestID}).Info("resuming")
	}
	e.act(ctx, actions)
	for _, k := range slices.Sorted(maps.Keys(found)) {
		e.settleKey(ctx, k, found[k])
	}
	for _, k := range slices.Sorted(maps.Keys(forged)) {
		e.repairStatus(ctx, k, forged[k])
	}
	for _, k := range slices.Sorted(maps.Keys(resign)) {
		e.resignStatus(ctx, k, statuses[k], resign[k])
	}
	return nil
}

// checkKey rejects a request published under another node's key.
func (e *Engine) checkKey(key, node string) bool {
	if key == node {
		return true
	}
	e.metrics.BusDecodeErrors.WithLabelValues(nodedrain.RequestsBucket).Inc()
	e.warnings.Logger("request-wrong-key", e.log).WithField("node", key).Warnf("ignoring a drain request for node %q published under key %q", node, key)
	return false
}

// step feeds one event to a node's drain and carries out the resulting actions.
func (e *Engine) step(ctx context.Context, node string, ev nodedrain.Event) {
	e.act(ctx, e.core.Handle(node, ev, e.cfg.Now()))
}

func (e *Engine) act(ctx context.Context, actions []NodeAction) {
	if len(actions) > 0 && !e.mayAct(ctx) {
		return
	}
	var then []NodeAction
	for _, na := range actions {
		if na.Release {
			e.ops.release(ctx, na.Node)
			continue
		}
		switch a := na.Action.(type) {
		case nodedrain.Publish:
			e.publish(ctx, a.Status)
		case nodedrain.Start:
			if a.Op == nodedrain.OpForget {
				// In the loop, not in the executor: its status delete is fenced on lastSeq, which
				// only the loop moves (fence.go).
				then = append(then, e.forgetNow(ctx, na.Node, na.RequestID)...)
				continue
			}
			e.ops.start(ctx, na.Node, na.RequestID, a, e.core.WholeCluster())
		case nodedrain.Cancel:
			e.ops.cancel(na.Node)
		case nodedrain.Outcome:
			res := a.Result.String()
			if a.Withdrawn {
				res = "WITHDRAWN"
			}
			e.metrics.CompletionTime.WithLabelValues(a.RequestedBy.String(), res).Observe(e.cfg.Now().Sub(a.Since).Seconds())
		case nodedrain.ReturnEnded:
			e.returnEnded(na.Node, a)
		case nodedrain.Forgotten:
			delete(e.unpublished, na.Node)
			e.metrics.forgetNode(na.Node)
			e.log.WithField("node", na.Node).Info("decommissioned node forgotten: its request and status are removed from the bus")
		case nodedrain.SlotReleased:
			e.metrics.StaleReleases.Inc()
			e.log.WithField("node", na.Node).Warn(a.Reason)
			e.nodeEvent(na.Node, corev1.EventTypeWarning, "StaleSlotReleased", a.Reason)
		}
	}
	if len(then) > 0 {
		e.act(ctx, then)
	}
}

// changed tells the drains that something their gate checks depend on changed; it reports
// whether any drain cared.
func (e *Engine) changed(ctx context.Context) bool {
	actions, cared := e.core.Changed(e.cfg.Now())
	e.act(ctx, actions)
	return cared
}

func (e *Engine) fireTimers(ctx context.Context) {
	e.act(ctx, e.core.Timers(e.cfg.Now()))
}

func (e *Engine) signalNodes() {
	select {
	case e.nodeChanged <- struct{}{}:
	default:
	}
}

// nodeUpdated signals admission only for changes it cares about (not every heartbeat), and
// hands a new boot to the loop.
func (e *Engine) nodeUpdated(ctx context.Context, old, cur any) {
	o, ok1 := old.(*corev1.Node)
	c, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 || nodeReady(o) != nodeReady(c) || o.Spec.Unschedulable != c.Spec.Unschedulable ||
		(e.cfg.LifecycleConditions && !reflect.DeepEqual(otherMaintenance(o), otherMaintenance(c))) {
		e.signalNodes()
	}
	if ok1 && ok2 && bootChanged(o, c) {
		e.postRebooted(ctx, c.Name, c.Status.NodeInfo.BootID)
	}
}

// post hands an operation's result to the loop, unless the loop has stopped.
func (e *Engine) post(ctx context.Context, node string, ev nodedrain.Event) {
	e.send(ctx, nodeEvent{node: node, ev: ev})
}

func (e *Engine) postProbe(ctx context.Context, reachable bool) {
	e.send(ctx, nodeEvent{probe: &reachable})
}

// send hands ne, stamped with ctx's Run, to the loop, unless the loop has stopped.
func (e *Engine) send(ctx context.Context, ne nodeEvent) {
	ne.run = runOf(ctx)
	select {
	case e.results <- ne:
	case <-ctx.Done():
	}
}
