package volumes

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// drainedSelector selects drained PVCs.
var drainedSelector = labels.SelectorFromSet(labels.Set{DrainStatusLabel: DrainStatusDrained})

// Run looks after PVCs until ctx ends (it returns nil then); the coordinator runs it while it is
// the leader. Every OrphanInterval (jittered) and whenever a PVC, StatefulSet or drainer Job
// changes, it:
//
//   - runs the drainer Job once on each orphaned PVC of a StatefulSet carrying
//     DrainerTemplateAnnotation: a claim <template>-<statefulset>-<ordinal> whose ordinal is
//     outside the ones the StatefulSet asks for, [spec.ordinals.start, start+spec.replicas),
//     mounted by no pod. The drained label records that it ran; failures are retried with
//     backoff and reported as Events and metrics. A template the DrainerPolicy refuses runs
//     nothing (an Event on the PVC says why). With DeleteDrainedOrphansAnnotation "true" on
//     the StatefulSet and Config.DeleteDrainedOrphans on, a drained orphan is deleted.
//   - removes the drained label from a PVC used again: its ordinal is inside that range again
//     (whether or not its pod runs at that instant), or a pod (not a drainer) mounts it.
func (g *Gate) Run(ctx context.Context) error {
	if !g.ready.Load() {
		return ErrNotStarted
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-g.wake:
			// Let a burst of changes settle into one pass.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
		}
		g.reconcilePVCs(ctx)
		g.settleHolds(ctx, "")
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(jitter(g.cfg.OrphanInterval))
	}
}

// reconcilePVCs is one pass of Run.
func (g *Gate) reconcilePVCs(ctx context.Context) {
	pending, drained := 0, 0
	all, err := g.sts.List(labels.Everything())
	if err != nil {
		g.log.WithError(err).Warn("list StatefulSets")
		return
	}
	handled := map[string]bool{}
	for _, sts := range all {
		raw, ok := sts.Annotations[DrainerTemplateAnnotation]
		if !ok || sts.DeletionTimestamp != nil {
			continue
		}
		pvcs, err := g.pvcs.PersistentVolumeClaims(sts.Namespace).List(labels.Everything())
		if err != nil {
			continue
		}
		for _, pvc := range pvcs {
			ord, ok := claimOrdinal(sts, pvc.Name)
			if !ok || pvc.DeletionTimestamp != nil {
				continue
			}
			handled[pvc.Namespace+"/"+pvc.Name] = true
			if ordinalLive(sts, ord) {
				g.inUse(ctx, pvc, "its StatefulSet asks for its ordinal again")
				continue
			}
			if g.mountedBy(pvc) != nil {
				continue // the pod is still going away
			}
			if pvc.Labels[DrainStatusLabel] == DrainStatusDrained {
				drained++
				switch {
				case sts.Annotations[DeleteDrainedOrphansAnnotation] != "true":
				case g.cfg.DeleteDrainedOrphans:
					g.deleteOrphan(ctx, sts, pvc)
				default:
					g.orphanDeletionOff(sts)
				}
				continue
			}
			pending++
			g.drainOrphan(ctx, sts, raw, pvc)
		}
	}
	if list, err := g.pvcs.List(labels.Everything()); err == nil {
		exists := make(map[string]bool, len(list))
		for _, pvc := range list {
			exists[string(pvc.UID)] = true
		}
		g.forgetGone(exists)
	}
	// Any other drained PVC (a node-local one) loses its label once a pod mounts it again.
	if list, err := g.pvcs.List(drainedSelector); err == nil {
		for _, pvc := range list {
			if !handled[pvc.Namespace+"/"+pvc.Name] {
				if pod := g.mountedBy(pvc); pod != nil {
					g.inUse(ctx, pvc, "pod "+pod.Name+" mounts it")
				}
			}
		}
	}
	g.metrics.OrphanedPVCs.WithLabelValues("pending").Set(float64(pending))
	g.metrics.OrphanedPVCs.WithLabelValues("drained").Set(float64(drained))
}

// drainOrphan moves an orphan's drainer on, pinned to the node holding its data if it is local.
func (g *Gate) drainOrphan(ctx context.Context, sts *appsv1.StatefulSet, raw string, pvc *corev1.PersistentVolumeClaim) {
	src := templateSource{raw: raw, where: "StatefulSet " + sts.Namespace + "/" + sts.Name, sts: sts, ref: stsRef(sts)}
	if own, ok := pvc.Annotations[DrainerTemplateAnnotation]; ok {
		src = templateSource{raw: own, where: "PVC " + pvc.Namespace + "/" + pvc.Name, ref: pvcRef(pvc)}
	}
	tmpl, err := g.admitTemplate(src, pvc)
	if err != nil {
		return // reported once by admitTemplate
	}
	if _, reason := g.drainPVC(ctx, pvc, tmpl, g.pvNode(pvc), TriggerOrphan); reason != "" {
		g.log.WithFields(logrus.Fields{"pvc": pvc.Namespace + "/" + pvc.Name}).Debug(reason)
	}
}

// inUse removes the drained label from a PVC used again, and stops an orphan drainer still
// running on it.
func (g *Gate) inUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim, why string) {
	if job, err := g.jobs.Jobs(pvc.Namespace).Get(drainerJobName(pvc)); err == nil && job.DeletionTimestamp == nil &&
		job.Annotations[DrainerTriggerAnnotation] == TriggerOrphan {
		if done, _, _ := jobFinished(job); !done {
			g.deleteJob(ctx, job, g.log.WithField("pvc", pvc.Namespace+"/"+pvc.Name))
		}
	}
	if pvc.Labels[DrainStatusLabel] != DrainStatusDrained {
		return
	}
	g.forgetTask(string(pvc.UID))
	if err := g.setDrainedLabel(ctx, pvc, false); err != nil {
		g.log.WithError(err).Warn("cannot remove the drained label of a PVC in use again")
		return
	}
	g.log.WithField("pvc", pvc.Namespace+"/"+pvc.Name).Infof("PVC in use again (%s): drained label removed", why)
	g.event(pvcRef(pvc), corev1.EventTypeNormal, "InUseAgain", "%s: label %s removed", why, DrainStatusLabel)
}

// deleteOrphan deletes a drained orphan PVC, as its StatefulSet asks.
func (g *Gate) deleteOrphan(ctx context.Context, sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim) {
	wctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
	defer cancel()
	err := g.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Delete(wctx, pvc.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pvc.UID, ResourceVersion: &pvc.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) {
		g.log.WithError(err).WithField("pvc", pvc.Namespace+"/"+pvc.Name).Warn("cannot delete a drained orphan PVC")
		return
	}
	g.event(stsRef(sts), corev1.EventTypeNormal, "DrainedOrphanDeleted", "deleted drained orphan PVC %s (%s=true)", pvc.Name, DeleteDrainedOrphansAnnotation)
}

// jitter spreads d by ±10% so that periodic work does not align across processes.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d)) //nolint:gosec // timing jitter
}
