package coordinator

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The engine's side of admission (nodedrain.Admission): after every event the loop handles it
// runs afterEvents, which asks the maintenance policy, admits the waiting drains the slots and
// the policy allow, and re-arms the loop's timer.

// heldSince tracks, for the hold metrics, why and since when each held drain waits.
type heldSince struct {
	reason string
	since  time.Time
}

// afterEvents admits waiting drains (asking the maintenance policy, if any) and re-arms the
// timer for the earliest retry.
func (e *Engine) afterEvents(ctx context.Context) {
	now := e.cfg.Now()
	began := time.Now() // the wall clock, whatever cfg.Now says
	var pol AdmissionVerdict
	if m := e.cfg.Maintenance; m != nil {
		pol = m.Admission(e.core.Waiting(), now)
	}
	if g, ok := e.cfg.Gate.(GatePeers); ok {
		pol.Peers = g.Peers
	}
	e.observeHolds(pol.Holds, now)
	actions, ev := e.core.Admit(e.nodeInfos(now), pol, now)
	if ev.ConfirmDeclared && e.confirmDeclared(ctx) {
		var more []NodeAction
		more, ev = e.core.Admit(e.nodeInfos(now), pol, now)
		actions = append(actions, more...)
	}
	e.metrics.AdmissionDecision.Observe(time.Since(began).Seconds())
	switch {
	case ev.Changed && ev.WholeCluster:
		e.log.Info("every node's request declares a whole-cluster shutdown: nodes gone down for it free their slot, the last node up may go down undrained")
	case ev.Changed:
		e.log.Info("the declared whole-cluster shutdown is over (a node is up without a request, or a request does not declare it)")
	}
	e.act(ctx, actions)
	e.resetTimer()
}

// resetTimer sets the loop's timer to the earliest retry or deadline of any drain.
func (e *Engine) resetTimer() {
	if next := e.core.NextTimer(); !next.IsZero() {
		e.timer.Reset(max(next.Sub(e.cfg.Now()), 0))
	}
}

// observeHolds accumulates the time drains spend held by the policy, by reason.
func (e *Engine) observeHolds(holds map[string]nodedrain.Hold, now time.Time) {
	if e.held == nil {
		e.held = map[string]heldSince{}
	}
	counts := map[string]float64{}
	for node, h := range e.held {
		cur, still := holds[node]
		if still && cur.Reason == h.reason {
			continue
		}
		e.metrics.HeldSeconds.WithLabelValues(h.reason).Add(now.Sub(h.since).Seconds())
		delete(e.held, node)
	}
	for node, h := range holds {
		if _, ok := e.held[node]; !ok {
			e.held[node] = heldSince{reason: h.Reason, since: now}
		}
		counts[h.Reason]++
	}
	for _, r := range []string{"window", "blockers", "preflight", "checking", "policy-invalid"} {
		e.metrics.Held.WithLabelValues(r).Set(counts[r])
	}
}

// nodeInfos is admission's view of the cluster's nodes: readiness, another writer's
// maintenance, and the policy's priority (for the node's waiting request) and failure domain.
func (e *Engine) nodeInfos(now time.Time) []nodedrain.NodeInfo {
	nodes, err := e.clusterNodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]nodedrain.NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		_, record := n.Annotations[CordonAnnotation]
		_, keep := n.Annotations[KeepCordonedAnnotation]
		info := nodedrain.NodeInfo{Name: n.Name, Ready: nodeReady(n), Schedulable: !n.Spec.Unschedulable,
			Unmanaged: !e.managed.Matches(labels.Set(n.Labels)), CordonRecord: record, CordonOurs: cordonIsOurs(n) && !keep,
			ResourceVersion: n.ResourceVersion}
		if !info.Ready {
			info.NotReadySince = notReadySince(n, now)
		}
		if e.cfg.LifecycleConditions {
			info.Other = otherMaintenance(n)
		}
		if m := e.cfg.Maintenance; m != nil {
			req := nodedrain.RequesterNone
			if d, ok := e.core.Drain(n.Name); ok && d.Request != nil {
				req = d.Request.RequestedBy
			}
			info.Priority, info.Domain = m.Order(n.Labels, req)
		}
		out = append(out, info)
	}
	return out
}

// notReadySince is when n's Ready condition last changed (to not Ready); a node without the
// condition (never reported) counts from its creation.
func notReadySince(n *corev1.Node, now time.Time) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if !n.CreationTimestamp.IsZero() {
		return n.CreationTimestamp.Time
	}
	return now
}

// maintenanceChanged is the policy's change signal; nil (never ready) without a policy.
func (e *Engine) maintenanceChanged() <-chan struct{} {
	if e.cfg.Maintenance == nil {
		return nil
	}
	return e.cfg.Maintenance.Changed()
}

// gateChanged is the volume gate's change signal; nil (never ready) for a gate without one.
func (e *Engine) gateChanged() <-chan struct{} {
	if w, ok := e.cfg.Gate.(GateWatcher); ok {
		return w.Changed()
	}
	return nil
}

// returnEnded reports the end of a node's return gate: a metric, and a warning Event and log
// line when it timed out with the node still not healthy.
func (e *Engine) returnEnded(node string, a nodedrain.ReturnEnded) {
	e.metrics.ReturnGate.WithLabelValues(a.Result).Observe(a.Waited.Seconds())
	log := e.log.WithFields(map[string]any{"node": node, "waited": a.Waited.Round(time.Second)})
	if a.Result != nodedrain.ReturnTimedOut {
		log.Infof("return gate ended (%s): admission slot released", a.Result)
		return
	}
	msg := "the return gate timed out: admission slot released while the node is not healthy yet"
	if len(a.Blockers) > 0 {
		msg += " (still waiting for " + nodedrain.DescribeBlockers(a.Blockers) + ")"
	}
	log.Warn(msg)
	e.nodeEvent(node, corev1.EventTypeWarning, "ReturnGateTimedOut", msg)
}
