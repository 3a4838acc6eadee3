package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// executor performs the machine's operations, each in its own goroutine under a per-node
// context that cancel ends, and posts each result back to the engine's loop.
type executor struct {
	e       *Engine
	nodeOps nodeOps
	evictor *evictor
	mu      sync.Mutex
	// nodes holds each node's one live context: every operation for the node runs under it
	// until cancel(node) ends it (a long drain must not pile up a context per operation).
	nodes map[string]nodeCtx
	wg    sync.WaitGroup
}

// nodeCtx is the context the operations of one node run under, and the func that ends it.
type nodeCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newExecutor(e *Engine) *executor {
	return &executor{
		e:       e,
		nodeOps: nodeOps{client: e.cfg.Client, now: e.cfg.Now},
		evictor: &evictor{client: e.cfg.Client, retryDelay: e.cfg.EvictRetryDelay, force: e.cfg.EvictUnmanagedPods,
			progressEvery: e.cfg.ProgressEvery, explain: e.cfg.Explainer, log: e.log,
			ers: newEvictionRequests(e.cfg.Client, e.cfg.EvictionRequests, e.log, e.cfg.Now)},
		nodes: map[string]nodeCtx{},
	}
}

// nodeContext returns the context for an operation of node: the node's live context, created
// under ctx (the engine's run context, the same for every call) on first use and reused by
// every later operation of the node until cancel(node) ends it; after that the next operation
// gets a fresh one.
func (x *executor) nodeContext(ctx context.Context, node string) context.Context {
	x.mu.Lock()
	defer x.mu.Unlock()
	if nc, ok := x.nodes[node]; ok {
		if nc.ctx.Err() == nil {
			return nc.ctx
		}
		nc.cancel(nil) // ended with its parent: release it and start afresh
	}
	nctx, cancel := context.WithCancelCause(ctx)
	x.nodes[node] = nodeCtx{ctx: nctx, cancel: cancel}
	return nctx
}

// cancel stops every operation under way for node (errDrainCancelled: an eviction attempt
// withdraws its EvictionRequests).
func (x *executor) cancel(node string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if nc, ok := x.nodes[node]; ok {
		nc.cancel(errDrainCancelled)
		delete(x.nodes, node)
	}
}

// release tells a gate that did work for node's drain that the drain is over, in the
// background (it must not hold up the loop). A failure is logged and retried with backoff until
// it succeeds or the run ends; the next run releases again on resume. The drain's
// EvictionRequests are withdrawn too.
func (x *executor) release(ctx context.Context, node string) {
	if x.evictor.ers.mayBeUsed() {
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			x.evictor.ers.release(ctx, node)
		}()
	}
	r, ok := x.e.cfg.Gate.(GateReleaser)
	if !ok {
		return
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		for failures := 1; ; failures++ {
			err := ErrLeaseLapsed // no write without the Lease (in API-outage mode): later
			if stillLeading(ctx) {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err = r.Release(rctx, node)
				cancel()
			}
			if err == nil || ctx.Err() != nil {
				return
			}
			wait := nodedrain.Backoff(failures, time.Second, time.Minute)
			x.e.log.WithField("node", node).WithError(err).Warnf("volume gate could not release the drain's work; retrying in %s", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

// stopAll cancels everything and waits for the goroutines to return.
func (x *executor) stopAll() {
	x.mu.Lock()
	for n, nc := range x.nodes {
		nc.cancel(nil)
		delete(x.nodes, n)
	}
	x.mu.Unlock()
	x.wg.Wait()
}

func (x *executor) start(ctx context.Context, node, requestID string, s nodedrain.Start, wholeCluster bool) {
	octx := x.nodeContext(ctx, node)
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		res := x.run(octx, node, requestID, s, wholeCluster)
		res.Op, res.RequestID = s.Op, requestID
		if res.Err != nil {
			// (An operation cancelled mid-request fails with a transport error too: not the API's.)
			res.Unreachable = unreachable(res.Err) && octx.Err() == nil
			if res.Unreachable {
				x.e.postProbe(ctx, false)
			}
			// Refused by the lease guard (in API-outage mode): the API was not reached, so the
			// attempt does not count.
			res.Unreachable = res.Unreachable || errors.Is(res.Err, ErrLeaseLapsed)
		}
		x.e.post(ctx, node, res)
	}()
}

func (x *executor) run(ctx context.Context, node, requestID string, s nodedrain.Start, wholeCluster bool) nodedrain.EvResult {
	m := x.e.metrics
	switch s.Op {
	case nodedrain.OpCordon:
		byUs, uid, err := x.nodeOps.cordon(ctx, node, requestID)
		m.CordonAttempts.WithLabelValues(result(err)).Inc()
		return nodedrain.EvResult{Err: err, ByUs: byUs, UID: string(uid)}
	case nodedrain.OpUncordon:
		left, rv, err := x.nodeOps.uncordon(ctx, node)
		if left != "" {
			x.e.log.WithField("node", node).Info("left cordoned: " + left)
			x.e.nodeEvent(node, corev1.EventTypeNormal, "LeftCordoned", "edgedrain left the node cordoned: "+left)
		}
		return nodedrain.EvResult{Err: err, Kept: left, ResourceVersion: rv}
	case nodedrain.OpCheckCordon:
		return x.cordonCheck(ctx, node, s.Decommission)
	case nodedrain.OpDeleteNode:
		// Not on checks a pause has made old (the status write before it was held up): the
		// deletion cannot be undone, and the COMPLETE after it would rest on them too.
		if age := x.e.cfg.Now().Sub(s.CheckedAt); !s.CheckedAt.IsZero() && age > nodedrain.MaxCheckAge {
			return nodedrain.EvResult{Err: fmt.Errorf("%w (%s old)", nodedrain.ErrChecksStale, age.Round(time.Second))}
		}
		deleted, missing, replaced, err := x.nodeOps.deleteNode(ctx, node, types.UID(s.UID))
		if deleted && !missing {
			x.e.log.WithField("node", node).Info("decommission: Node object deleted")
			x.e.nodeEvent(node, corev1.EventTypeNormal, "NodeDecommissioned", "edgedrain deleted the Node object: the node is drained and its volumes are safe elsewhere")
		}
		return nodedrain.EvResult{Err: err, Cordoned: deleted, Missing: missing, UID: string(replaced)}
	case nodedrain.OpGate, nodedrain.OpFinalGate:
		return x.gateCheck(ctx, node, s, wholeCluster)
	case nodedrain.OpReturnGate:
		blockers, err := x.returnCheck(ctx, node)
		return nodedrain.EvResult{Err: err, Safe: err == nil && len(blockers) == 0, Blockers: blockers}
	case nodedrain.OpEvict:
		actx, cancel := context.WithTimeout(ctx, x.e.cfg.Limits.DrainAttemptTimeout)
		defer cancel()
		progress := func(evicted, total, terminating int, blockers []nodedrain.Blocker) {
			x.e.post(ctx, node, nodedrain.EvProgress{RequestID: requestID, Evicted: evicted, Total: total,
				WaitingDeletion: terminating, Blockers: blockers})
		}
		last := s.Attempt >= x.e.cfg.Limits.DrainAttempts
		blockers, err := x.evictor.attempt(actx, node, last, progress)
		m.EvictionAttempts.WithLabelValues(result(err)).Inc()
		return nodedrain.EvResult{Err: err, Blockers: blockers}
	}
	return nodedrain.EvResult{}
}

// unreachable reports whether err means the API server could not be reached at all (no HTTP
// answer: refused, reset, timed out), as opposed to an answer that refused the request. An
// eviction attempt's own deadline is not such an error: it is not a *url.Error.
func unreachable(err error) bool {
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) {
		return false // the server answered
	}
	var uerr *url.Error
	return errors.As(err, &uerr) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err)
}

// probeAPI asks the API server's /readyz every few seconds and reports whether it answered, and
// whether it said it is not ready (unready: recovering, its lists may still fail).
func (e *Engine) probeAPI(ctx context.Context) {
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := e.cfg.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
		cancel()
		reachable := err == nil || !unreachable(err)
		e.send(ctx, nodeEvent{probe: &reachable, unready: reachable && err != nil})
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// checkAPIUnreachable lets drains under way proceed once the API has been unreachable for
// APIUnreachableTimeout, if the volume gate's last known view says their volumes are safe.
func (e *Engine) checkAPIUnreachable(ctx context.Context) {
	timeout := e.cfg.APIUnreachableTimeout
	if timeout == 0 || e.apiDownSince.IsZero() {
		return
	}
	down := e.cfg.Now().Sub(e.apiDownSince)
	if down < timeout {
		return
	}
	view := func(node string, after bool) (GateResult, error) {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return e.cfg.Gate.Check(gctx, node, GateOptions{WholeCluster: e.core.WholeCluster(), AfterEviction: after, LastKnown: true})
	}
	cordon := func(node string) (found, cordoned bool, uid string) {
		n, err := e.nodes.Get(node) // (the informer's cache: what it saw last)
		if err != nil {
			return false, false, ""
		}
		return true, n.Spec.Unschedulable, string(n.UID)
	}
	e.act(ctx, e.core.APIUnreachable(down, view, cordon, e.cfg.Now()))
}

func (e *Engine) apiReachable(reachable bool) {
	switch {
	case reachable && !e.apiDownSince.IsZero():
		e.log.WithField("down", e.cfg.Now().Sub(e.apiDownSince).Round(time.Second)).Info("Kubernetes API reachable again")
		e.apiDownSince = time.Time{}
		e.core.APIAnswered(e.cfg.Now())
	case !reachable && e.apiDownSince.IsZero():
		e.log.Warn("Kubernetes API unreachable: no drain is admitted until it answers")
		e.apiDownSince = e.cfg.Now()
	}
	e.core.SetAPIUnreachable(e.apiDownSince)
}

// publishTimeout bounds a status publication (see publish).
const publishTimeout = 2 * time.Second

// maxPublishedBlockers keeps a status well inside nodedrain.MaxPayloadSize.
const maxPublishedBlockers = 50

// publish writes a status to the bus and records the transition (gauges, log, Node event). A
// failed publication is retried every tick until it succeeds.
func (e *Engine) publish(ctx context.Context, st nodedrain.NodeDrainStatus) {
	// Statuses that failed to publish go first: the bus shows decisions in the order they were
	// made (a FAILEDDRAIN that freed a slot before the COMPLETE of the node admitted into it).
	for _, node := range slices.Sorted(maps.Keys(e.unpublished)) {
		if d, ok := e.core.Drain(node); ok && node != st.Node {
			e.publishOne(ctx, d.Status)
		}
	}
	e.publishOne(ctx, st)
}

func (e *Engine) publishOne(ctx context.Context, st nodedrain.NodeDrainStatus) {
	if n := len(st.Blockers); n > maxPublishedBlockers {
		// A status must fit the bus's payload limit: keep the first ones, count the rest.
		st.Blockers = st.Blockers[:maxPublishedBlockers]
		st.Message += fmt.Sprintf(" (%d blockers, first %d listed)", n, maxPublishedBlockers)
	}
	leading := e.leading(ctx)
	if !leading && !inOutage(ctx) {
		return
	}
	// The lease guard allows up to RenewDeadline (7 s) since the last renewal; the write must land
	// within the Lease (10 s) too, so it gets at most 2 s.
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	// Fenced (fence.go): in API-outage mode as while leading, a write lands only if nobody wrote
	// to the bucket since this run's last write.
	fence := e.lastSeq
	rev, err := e.statuses.PublishIfLast(pctx, st.Node, e.sign(st), fence)
	if errors.Is(err, pubsub.ErrConflict) {
		switch ferr := e.fenceRefused(pctx, st.Node+" "+st.Status.String(), err); {
		case errors.Is(ferr, errFenced):
			return
		case ferr != nil:
			err = fmt.Errorf("%w; and then: %w", err, ferr)
		case !e.mayAct(ctx):
			return // (the refusal came late: the Lease lapsed meanwhile)
		case !e.landed.MayRewrite(st, e.cfg.Now()):
			// The first write may land late after a pause (a residual of any check before an
			// act); this one would be a second act on the same old checks.
			err = fmt.Errorf("%w; not written again: the COMPLETE rests on checks %s old (this process was held up "+
				"meanwhile), which the drain makes again first", err, e.cfg.Now().Sub(st.UpdatedAt).Round(time.Millisecond))
		default:
			// Stepped over what no coordinator wrote: once more at once, or a forger writing
			// between every two of our writes would keep a COMPLETE off the bus.
			fence = e.lastSeq
			rev, err = e.statuses.PublishIfLast(pctx, st.Node, e.sign(st), fence)
		}
	}
	if err != nil {
		e.unpublished[st.Node] = true
		e.landed.Forget(st.Node)
		e.log.WithFields(statusFields(st)).WithError(err).Warn("publishing status failed; will retry")
		if st.Status == nodedrain.StatusComplete {
			e.unlanded = noteUnlanded(e.unlanded, e.core, st, fence)
			// Not published later as it was: the drain checks again first.
			e.act(ctx, e.core.Handle(st.Node, nodedrain.EvPublishFailed{}, e.cfg.Now()))
		}
		return
	}
	e.lastSeq = max(e.lastSeq, rev)
	e.ownRevs[st.Node] = rev
	e.landed.Note(st)
	delete(e.unpublished, st.Node)
	e.act(ctx, e.core.Handle(st.Node, nodedrain.EvPublished{Status: st.Status, Holds: st.HoldsSlot()}, e.cfg.Now()))
	e.completesNotLanded(ctx, st, fence)
	e.metrics.observeStatus(st)
	if e.conds != nil {
		e.conds.set(st)
	}
	e.log.WithFields(statusFields(st)).Info(st.Message)
	// An Event per transition, not per progress update.
	if e.announce(ctx, st) {
		kind := corev1.EventTypeNormal
		if st.Status.Failed() {
			kind = corev1.EventTypeWarning
		}
		e.nodeEvent(st.Node, kind, "Drain"+st.Status.String(), st.Message)
	}
}

// announce reports whether a status just written gets its Event: a transition, announced by a
// run that may still act. A reply that came late, after the Lease lapsed (a process paused
// between its write and its reply), is not announced: another coordinator may have led meanwhile
// and announced the node's later transitions, and this Event would repeat one of them out of
// order (invariant E1: a second NOTREQUESTED after the next leader's whole drain).
func (e *Engine) announce(ctx context.Context, st nodedrain.NodeDrainStatus) bool {
	return e.mayAct(ctx) && e.core.Announce(st)
}

// nodeEvent records a Kubernetes Event on node (if the engine has a Recorder).
func (e *Engine) nodeEvent(node, kind, reason, msg string) {
	if e.cfg.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
	e.cfg.Recorder.Event(ref, kind, reason, msg)
}

// republish writes again the statuses whose last write failed. A pass stops at its first
// failure: the bus that refused one write likely refuses the next, and each waits up to its
// timeout, which would hold the engine's loop for as many timeouts as there are statuses to
// write again. The next pass starts after the node that failed, so that one status the bus
// keeps refusing does not keep the others unwritten.
func (e *Engine) republish(ctx context.Context) {
	nodes := slices.Sorted(maps.Keys(e.unpublished))
	first, _ := slices.BinarySearch(nodes, e.republishAfter+"\x00")
	for _, node := range append(nodes[first:], nodes[:first]...) {
		d, ok := e.core.Drain(node)
		if !ok {
			continue
		}
		if e.publishOne(ctx, d.Status); e.unpublished[node] {
			e.republishAfter = node
			return
		}
	}
	e.republishAfter = ""
}

func statusFields(st nodedrain.NodeDrainStatus) logrus.Fields {
	return logrus.Fields{"node": st.Node, "status": st.Status.String(), "attempt": st.Attempt, "request": st.RequestID}
}

// unlandedComplete is a COMPLETE whose publication failed: its request and the bucket revision
// its write was fenced on.
type unlandedComplete struct {
	requestID string
	fence     uint64
}

// noteUnlanded records in unlanded a COMPLETE whose publication failed, fenced on fence, as
// one a later write may prove never landed: only while it is the only COMPLETE of the drain's
// request that may have landed. Once an earlier one may be on the bus (the drain already
// CompleteSent, with no record of it, or one fenced on another revision), no later write proves
// anything about it, and the drain stays CompleteSent: its agent may be running its operation.
func noteUnlanded(unlanded map[string]unlandedComplete, core *Core, st nodedrain.NodeDrainStatus, fence uint64) map[string]unlandedComplete {
	d, _ := core.Drain(st.Node)
	u, tracked := unlanded[st.Node]
	switch {
	case !d.Status.CompleteSent:
		unlanded[st.Node] = unlandedComplete{requestID: st.RequestID, fence: fence}
	case tracked && u.requestID == st.RequestID && u.fence == fence:
		// (The same COMPLETE failing again, fenced on the same revision: still the only one.)
	default:
		delete(unlanded, st.Node)
	}
	return unlanded
}

// completesNotLanded follows a status write that landed fenced on revision fence: a COMPLETE
// whose failed write was fenced on the same revision never landed (the bucket still ended there)
// and never will (it now ends after), so its drain learns that its COMPLETE was not sent
// (nodedrain.EvCompleteNotLanded): otherwise it could never give way, and two such drains
// waiting for each other's copy of a volume would wait for good. A COMPLETE fenced on an earlier
// revision cannot be told apart any more (the bucket moved: maybe with it) and stays sent.
func (e *Engine) completesNotLanded(ctx context.Context, written nodedrain.NodeDrainStatus, fence uint64) {
	if written.Status == nodedrain.StatusComplete {
		delete(e.unlanded, written.Node)
	}
	for _, node := range slices.Sorted(maps.Keys(e.unlanded)) {
		u := e.unlanded[node]
		delete(e.unlanded, node)
		if u.fence == fence {
			e.act(ctx, e.core.Handle(node, nodedrain.EvCompleteNotLanded{RequestID: u.requestID}, e.cfg.Now()))
		}
	}
}
