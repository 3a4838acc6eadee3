package coordinator

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The checks the drain machine asks for (nodedrain.OpGate, OpFinalGate, OpCheckCordon,
// OpReturnGate): the volume gate before eviction; before COMPLETE the maintenance policy's
// blockers, the volume gate again and the cordon (every drain runs the last two, not only a
// decommission); and the return gate's check of a node back from its operation.

// gateCheck asks the volume gate (OpGate) or, before COMPLETE (OpFinalGate), the maintenance
// policy's blockers and then the volume gate.
func (x *executor) gateCheck(ctx context.Context, node string, s nodedrain.Start, wholeCluster bool) nodedrain.EvResult {
	var policy []nodedrain.Blocker
	if s.Op == nodedrain.OpFinalGate {
		// The maintenance policy's blockers hold COMPLETE too (checked again: an alert may
		// have started firing since admission). Asked before the volumes' answer is stamped:
		// a Prometheus slower than MaxAnswerAge would otherwise age every answer past use,
		// and the check would be asked again for ever.
		policy = x.finalBlockers(ctx, node)
	}
	at := x.e.cfg.Now() // (before the reads: see EvResult.At)
	r, err := x.e.cfg.Gate.Check(ctx, node, GateOptions{WholeCluster: wholeCluster, AfterEviction: s.Op == nodedrain.OpFinalGate,
		Decommission: s.Decommission, HeldElsewhere: len(policy) > 0})
	if err == nil && r.Safe && len(policy) > 0 {
		r = GateResult{Blockers: policy}
	}
	return nodedrain.EvResult{Err: err, Safe: r.Safe, Blockers: r.Blockers, At: at}
}

// cordonCheck confirms before COMPLETE that the node is still cordoned, by whom, as which Node
// object, and which pods an eviction would still take from it.
func (x *executor) cordonCheck(ctx context.Context, node string, decommission bool) nodedrain.EvResult {
	at := x.e.cfg.Now() // (before the reads: see EvResult.At)
	cs, err := x.nodeOps.cordonedOrGone(ctx, node, decommission)
	var pods []nodedrain.Blocker
	if err == nil && cs.cordoned && !cs.missing {
		// The pods an eviction would take, read after the cordon: none for COMPLETE.
		pods, err = x.evictor.left(ctx, node)
	}
	return nodedrain.EvResult{Err: err, Cordoned: cs.cordoned, Foreign: cs.cordoned && !cs.ours, Missing: cs.missing,
		Pods: pods, UID: string(cs.uid), At: at}
}

// cordonedOrGone is checkCordon, and for a decommission's check before its Node object is
// deleted a node already missing counts as cordoned (a coordinator stopped after deleting it and
// before publishing COMPLETE finds it so when it resumes).
func (o nodeOps) cordonedOrGone(ctx context.Context, name string, decommission bool) (cordonState, error) {
	cs, err := o.checkCordon(ctx, name)
	if decommission && cs.missing {
		return cordonState{cordoned: true}, err
	}
	return cs, err
}

// finalBlockers asks the maintenance policy what blocks COMPLETE, failing closed on an error.
func (x *executor) finalBlockers(ctx context.Context, node string) []nodedrain.Blocker {
	m := x.e.cfg.Maintenance
	if m == nil {
		return nil
	}
	b, err := m.Blockers(ctx, node)
	if err != nil {
		return []nodedrain.Blocker{{Kind: "Policy", Name: "maintenance-policy",
			Reason: fmt.Sprintf("cannot check the maintenance policy's blockers, failing closed: %v", err)}}
	}
	return b
}

// returnCheck is the return gate's question: is the node back from its operation healthy
// again — Ready, every pod bound to it Ready (its DaemonSet pods, pods scheduled back), and its
// storage whole (GateReturner)?
func (x *executor) returnCheck(ctx context.Context, node string) ([]nodedrain.Blocker, error) {
	var blockers []nodedrain.Blocker
	n, err := x.e.nodes.Get(node)
	switch {
	case err != nil:
		blockers = append(blockers, nodedrain.Blocker{Kind: nodedrain.BlockerNode, Name: node, Reason: "the Node object is missing"})
	case !nodeReady(n):
		blockers = append(blockers, nodedrain.Blocker{Kind: nodedrain.BlockerNode, Name: node, Reason: "not Ready yet"})
	}
	pods, err := x.e.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list pods on %s: %w", node, err)
	}
	var notReady []nodedrain.Blocker
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil || podutils.IsPodReady(p) {
			continue
		}
		notReady = append(notReady, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: p.Namespace, Name: p.Name,
			Reason: "scheduled on the node and not Ready yet"})
	}
	sort.Slice(notReady, func(i, j int) bool {
		return notReady[i].Namespace+"/"+notReady[i].Name < notReady[j].Namespace+"/"+notReady[j].Name
	})
	blockers = append(blockers, notReady...)
	if r, ok := x.e.cfg.Gate.(GateReturner); ok {
		b, err := r.ReturnCheck(ctx, node)
		if err != nil {
			return nil, err
		}
		blockers = append(blockers, b...)
	}
	return blockers, nil
}
