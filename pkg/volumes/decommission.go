package volumes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// DecommissionAnnotation on a PVC says what a node decommission does with it when its data lives
// on that node (a node-local volume), following ECK's and UC3's volume-claim handling:
//
//   - DecommissionGraceful: run the PVC's drainer Job (DrainerTemplateAnnotation) to move its
//     data off, then delete the PVC;
//   - DecommissionForce: delete the PVC without processing; its data is lost with the node;
//   - absent: the drain blocks, saying the data would be lost, until it is annotated.
//
// Deleting the PVC lets its StatefulSet make a new one on another node. The PV is left to its
// reclaim policy.
const DecommissionAnnotation = "edgedrain.io/decommission"

// Values of DecommissionAnnotation.
const (
	DecommissionGraceful = "graceful"
	DecommissionForce    = "force"
)

// policyFor is the volume policy of a drain: a decommission evicts the node's replicas whatever
// the configured policy says (the node does not come back), and is never let through by allow.
func (g *Gate) policyFor(opts coordinator.GateOptions) Policy {
	if opts.Decommission {
		return PolicyEvict
	}
	return g.cfg.Policy
}

// decommissionLocal is checkLocal for a decommission. Before eviction a node-local volume blocks
// only if its fate is undecided (no annotation, an invalid one, a graceful one without a usable
// drainer): nothing is evicted or deleted until every one is decided. After eviction each one
// blocks until its PVC is gone: deleted after its drainer succeeded (graceful) or at once (force).
func (g *Gate) decommissionLocal(ctx context.Context, node string, opts coordinator.GateOptions) ([]nodedrain.Blocker, bool) {
	var out []nodedrain.Blocker
	for _, lv := range g.localVolumes(node) {
		if reason := g.decommissionPVC(ctx, lv, node, opts); reason != "" {
			out = append(out, volumeBlocker("local", lv.pv.Name, lv.pvc.Namespace, lv.pvc.Name, reason, 0))
		}
	}
	return out, len(out) > 0
}

// decommissionPVC moves one node-local volume's claim toward deletion and says what it waits for
// ("": nothing before eviction; after it, a claim still bound here always blocks, and once
// deleted it is no longer listed).
func (g *Gate) decommissionPVC(ctx context.Context, lv localVolume, node string, opts coordinator.GateOptions) string {
	pvc := lv.pvc
	mode, annotated := pvc.Annotations[DecommissionAnnotation]
	switch {
	case !annotated || (mode != DecommissionGraceful && mode != DecommissionForce):
		return undecided(mode, annotated)
	case pvc.DeletionTimestamp != nil:
		return fmt.Sprintf("PVC deleted (decommission %s); waiting for it to go (a pod still using it holds it)", mode)
	}
	if mode == DecommissionGraceful {
		src, ok := g.templateFor(pvc)
		if !ok {
			return noDrainer()
		}
		tmpl, err := g.admitTemplate(src, pvc)
		if err != nil {
			return fmt.Sprintf("drainer template on %s: %v", src.where, err)
		}
		if !opts.AfterEviction {
			return ""
		}
		if done, reason := g.drainPVC(ctx, pvc, tmpl, node, TriggerNodeDrain); !done {
			return reason
		}
	} else if !opts.AfterEviction {
		return ""
	}
	return g.deletePVC(ctx, pvc, mode)
}

// deletePVC deletes a decommissioned node's claim as the gate read it (UID and resourceVersion:
// a claim made again, or whose annotation changed, meanwhile is not deleted; the next check
// reads it again) and says what the drain waits for now. A drain cancelled meanwhile (the
// request withdrawn) cancels the deletion not yet sent.
func (g *Gate) deletePVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim, mode string) string {
	wctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
	defer cancel()
	uid, rv := pvc.UID, pvc.ResourceVersion
	err := g.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Delete(wctx, pvc.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Sprintf("cannot delete the PVC (decommission %s): %v; trying again", mode, err)
	}
	g.restartWaitingPods(wctx, pvc)
	what := "its drainer succeeded"
	if mode == DecommissionForce {
		what = "its data is discarded"
	}
	g.event(pvcRef(pvc), corev1.EventTypeNormal, "DecommissionDeleted", "PVC deleted for the node's decommission (%s: %s)", mode, what)
	g.log.WithField("pvc", pvc.Namespace+"/"+pvc.Name).WithField("mode", mode).Info("decommission: PVC deleted")
	return fmt.Sprintf("PVC deleted (decommission %s); waiting for it to go", mode)
}

// restartWaitingPods deletes the unscheduled StatefulSet pods that mount a deleted claim: such a
// pod waits for the claim forever (the StatefulSet makes claims only with new pods); deleted, it
// is made again, with a new claim, on another node. An unscheduled pod does not hold the claim
// (the PVC protection controller ignores it), a scheduled one is left alone.
func (g *Gate) restartWaitingPods(ctx context.Context, pvc *corev1.PersistentVolumeClaim) {
	objs, _ := g.podIndex.ByIndex(indexByClaim, pvc.Namespace+"/"+pvc.Name)
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
			continue
		}
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "StatefulSet" {
			continue
		}
		uid := pod.UID
		err := g.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			g.log.WithField("pod", pod.Namespace+"/"+pod.Name).WithError(err).Warn("decommission: could not delete a pod waiting for a deleted PVC; its StatefulSet cannot make it again elsewhere")
			continue
		}
		g.log.WithField("pod", pod.Namespace+"/"+pod.Name).Info("decommission: deleted a pod waiting for a deleted PVC, so that its StatefulSet makes it again elsewhere")
	}
}

// predictDecommission is predictLocal for a decommission: what decommissionPVC would do with
// one node-local volume, without doing it (no Job, no deletion, no Event).
func (g *Gate) predictDecommission(lv localVolume, node string) (*nodedrain.Blocker, string) {
	pvc := lv.pvc
	blocker := func(reason string) (*nodedrain.Blocker, string) {
		b := volumeBlocker("local", lv.pv.Name, pvc.Namespace, pvc.Name, reason, 0)
		return &b, ""
	}
	where := fmt.Sprintf("PVC %s/%s (local volume %s)", pvc.Namespace, pvc.Name, lv.pv.Name)
	switch mode, annotated := pvc.Annotations[DecommissionAnnotation]; {
	case !annotated || (mode != DecommissionGraceful && mode != DecommissionForce):
		return blocker(undecided(mode, annotated))
	case mode == DecommissionForce:
		return nil, where + ": would be deleted once the node's pods are gone (decommission force: its data is discarded)"
	}
	src, ok := g.templateFor(pvc)
	if !ok {
		return blocker(noDrainer())
	}
	if err := g.templateProblem(src, pvc); err != nil {
		return blocker(fmt.Sprintf("drainer template on %s: %v", src.where, err))
	}
	return nil, fmt.Sprintf("%s: drainer Job %s would run on %s once its pods are gone, then the PVC would be deleted (decommission graceful)",
		where, drainerJobName(pvc), node)
}

// undecided is why a node-local volume without a valid DecommissionAnnotation blocks.
func undecided(mode string, annotated bool) string {
	if annotated {
		return fmt.Sprintf("annotation %s=%q: want %s or %s", DecommissionAnnotation, mode, DecommissionGraceful, DecommissionForce)
	}
	return fmt.Sprintf("node-local volume: its data would be lost with the decommissioned node; annotate the PVC %s=%s "+
		"(run its drainer, then delete it) or %s=%s (delete it, losing the data)", DecommissionAnnotation, DecommissionGraceful,
		DecommissionAnnotation, DecommissionForce)
}

// noDrainer is why a graceful decommission of a PVC without a drainer template blocks.
func noDrainer() string {
	return fmt.Sprintf("decommission %s needs a drainer: annotate the PVC or its StatefulSet with %s, or use %s=%s",
		DecommissionGraceful, DrainerTemplateAnnotation, DecommissionAnnotation, DecommissionForce)
}
