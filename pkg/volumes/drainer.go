package volumes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// drainTask is the memory of one PVC's drainer: failures so far and when to try again. The
// Jobs themselves (in the cluster, cached) say what runs; a restarted coordinator finds them,
// and finds the failures and the backoff in the PVC's DrainerFailuresAnnotation.
type drainTask struct {
	mu       sync.Mutex
	ns, pvc  string // the PVC's namespace and name
	node     string // the node it was pinned to ("" for none)
	trigger  string
	failures int
	lastErr  string
	nextAt   time.Time
	handled  types.UID // the last finished Job already counted
	drained  bool      // handled succeeded: the PVC is labelled
}

// task returns the drain task of pvc, creating it. Tasks are kept by the PVC's UID: a PVC
// deleted and created again under the same name starts afresh.
func (g *Gate) task(pvc *corev1.PersistentVolumeClaim) *drainTask {
	g.taskMu.Lock()
	defer g.taskMu.Unlock()
	key := string(pvc.UID)
	t := g.tasks[key]
	if t == nil {
		t = &drainTask{ns: pvc.Namespace, pvc: pvc.Name}
		g.restoreFailures(t, pvc)
		g.tasks[key] = t
	}
	return t
}

// drainPVC moves pvc's drainer one step on and says whether the PVC is drained, or why not.
// It reads the Job and the PVC from the caches and writes only what the step needs: create the
// Job; label the PVC and remove the Job when it succeeded; remove a failed or timed out Job and
// wait the backoff before the next. node pins the Job ("" lets the scheduler place it). No Job is
// started once ctx has ended; what a finished Job calls for (label, removal) is still done.
func (g *Gate) drainPVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim, tmpl DrainerTemplate, node, trigger string) (bool, string) {
	if pvc.Labels[DrainStatusLabel] == DrainStatusDrained {
		return true, ""
	}
	t := g.task(pvc)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.drained {
		return true, "" // labelled; the cached PVC may not show it yet
	}
	t.node, t.trigger = node, trigger
	log := g.log.WithFields(logrus.Fields{"pvc": pvc.Namespace + "/" + pvc.Name, "node": node, "trigger": trigger})
	name := drainerJobName(pvc)
	job, err := g.jobs.Jobs(pvc.Namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("drainer Job %s: %v", name, err)
	}
	now := g.now()
	if job != nil {
		switch {
		case job.DeletionTimestamp != nil:
			return false, "waiting for the previous drainer Job to be deleted"
		case !ownedBy(job, pvc.UID):
			g.deleteJob(ctx, job, log)
			return false, "removing a drainer Job left by an earlier PVC of the same name"
		case job.UID == t.handled:
			g.deleteJob(ctx, job, log) // counted already; its deletion failed before
			return false, t.waiting(now)
		}
		if ok, reason, msg := jobFinished(job); ok {
			return g.finished(ctx, t, job, pvc, reason, msg, log)
		}
		age := now.Sub(job.CreationTimestamp.Time)
		if limit := g.cfg.DrainerTimeout + min(g.cfg.DrainerTimeout/2, time.Minute); age > limit {
			return g.finished(ctx, t, job, pvc, "DeadlineExceeded", fmt.Sprintf("still running after %s", roughly(age)), log)
		}
		where := "scheduling"
		if node != "" {
			where = "on " + node
		}
		return false, fmt.Sprintf("drainer Job %s running %s for %s (attempt %d)", name, where, roughly(age), t.failures+1)
	}
	if now.Before(t.nextAt) {
		return false, t.waiting(now)
	}
	if ctx.Err() != nil {
		return false, "drain cancelled"
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
	defer cancel()
	_, err = g.cfg.Client.BatchV1().Jobs(pvc.Namespace).Create(wctx, buildJob(tmpl, pvc, node, trigger, g.cfg.DrainerTimeout), metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, fmt.Sprintf("drainer Job %s starting", name)
	case err != nil:
		log.WithError(err).Warn("cannot create the drainer Job")
		return false, fmt.Sprintf("cannot create drainer Job %s: %v", name, err)
	}
	log.WithField("attempt", t.failures+1).Info("drainer Job started")
	g.event(pvcRef(pvc), corev1.EventTypeNormal, "DrainerStarted", "drainer Job %s started (%s, attempt %d)", name, trigger, t.failures+1)
	where := ""
	if node != "" {
		where = " on " + node
	}
	return false, fmt.Sprintf("drainer Job %s started%s (attempt %d)", name, where, t.failures+1)
}

// finished handles a Job that ended: success labels the PVC drained and removes the Job;
// failure (or timeout) removes it and sets the backoff.
func (g *Gate) finished(ctx context.Context, t *drainTask, job *batchv1.Job, pvc *corev1.PersistentVolumeClaim, reason, msg string, log logrus.FieldLogger) (bool, string) {
	if reason == "Complete" {
		if err := g.setDrainedLabel(ctx, pvc, true); err != nil {
			log.WithError(err).Warn("drainer succeeded but the PVC could not be labelled")
			return false, fmt.Sprintf("drainer succeeded; labelling the PVC failed: %v", err)
		}
		t.handled, t.drained, t.failures, t.lastErr, t.nextAt = job.UID, true, 0, "", time.Time{}
		g.metrics.DrainerJobs.WithLabelValues(ResultSucceeded).Inc()
		log.Info("drainer Job succeeded; PVC labelled drained")
		g.event(pvcRef(pvc), corev1.EventTypeNormal, "Drained", "drainer Job %s succeeded; PVC labelled %s=%s", job.Name, DrainStatusLabel, DrainStatusDrained)
		g.deleteJob(ctx, job, log)
		return true, ""
	}
	result := ResultFailed
	if reason == "DeadlineExceeded" {
		result = ResultTimeout
		msg = fmt.Sprintf("timed out (limit %s): %s", g.cfg.DrainerTimeout, msg)
	}
	t.handled, t.drained = job.UID, false
	t.failures++
	t.lastErr = msg
	t.nextAt = g.now().Add(backoff(t.failures, g.cfg.DrainerBackoff, g.cfg.DrainerBackoffMax))
	// Recorded before the Job is deleted: a coordinator that restarts in between finds the Job
	// counted (by its UID) and does not count it twice.
	if err := g.recordFailures(ctx, t); err != nil {
		log.WithError(err).Warn("cannot record the drainer's failures on its PVC; a restarted coordinator would start counting afresh")
	}
	g.metrics.DrainerJobs.WithLabelValues(result).Inc()
	log.WithField("attempt", t.failures).Warnf("drainer Job %s: %s", result, msg)
	g.event(pvcRef(pvc), corev1.EventTypeWarning, "DrainerFailed", "drainer Job %s %s (attempt %d): %s; retrying in %s",
		job.Name, result, t.failures, msg, roughly(t.nextAt.Sub(g.now())))
	g.deleteJob(ctx, job, log)
	return false, t.waiting(g.now())
}

// waiting describes a drainer waiting for its next attempt.
func (t *drainTask) waiting(now time.Time) string {
	if t.failures == 0 {
		return "drainer Job finishing"
	}
	return fmt.Sprintf("drainer failed %d time(s), last: %s; next attempt in %s", t.failures, t.lastErr, roughly(t.nextAt.Sub(now)))
}

// jobFinished reports whether job ended, with the condition's reason ("Complete" for success)
// and message.
func jobFinished(job *batchv1.Job) (bool, string, string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, "Complete", c.Message
		case batchv1.JobFailed:
			reason, msg := c.Reason, c.Message
			if reason == "" {
				reason = "Failed"
			}
			if msg == "" {
				msg = reason
			}
			return true, reason, msg
		}
	}
	return false, "", ""
}

func ownedBy(job *batchv1.Job, uid types.UID) bool {
	for _, o := range job.OwnerReferences {
		if o.Kind == "PersistentVolumeClaim" && o.UID == uid {
			return true
		}
	}
	return false
}

// deleteJob removes a drainer Job and its pods; a failure is logged and retried on the next step.
func (g *Gate) deleteJob(ctx context.Context, job *batchv1.Job, log logrus.FieldLogger) {
	if err := g.removeJob(ctx, job); err != nil {
		log.WithError(err).Warn("cannot delete a drainer Job; will retry")
	}
}

// removeJob deletes this version of a drainer Job (by UID) and its pods. A Job already gone, or
// replaced by another of the same name, is not an error.
func (g *Gate) removeJob(ctx context.Context, job *batchv1.Job) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.WriteTimeout)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	err := g.cfg.Client.BatchV1().Jobs(job.Namespace).Delete(wctx, job.Name, metav1.DeleteOptions{
		PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &job.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete drainer Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}

// setDrainedLabel sets or removes DrainStatusLabel on pvc, and removes its drainer's failure
// record: the drainer succeeded, or the PVC is used again.
func (g *Gate) setDrainedLabel(ctx context.Context, pvc *corev1.PersistentVolumeClaim, drained bool) error {
	var value any
	if drained {
		value = DrainStatusDrained
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s},"annotations":{%q:null}}}`, DrainStatusLabel, jsonValue(value), DrainerFailuresAnnotation)
	return g.patchPVC(ctx, pvc.Namespace, pvc.Name, patch)
}

func jsonValue(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return "null"
}

// forgetTask drops what the gate remembers of pvc's drainer (the PVC is in use again, or gone).
func (g *Gate) forgetTask(uid string) {
	g.taskMu.Lock()
	defer g.taskMu.Unlock()
	if t, ok := g.tasks[uid]; ok && t.mu.TryLock() {
		delete(g.tasks, uid)
		t.mu.Unlock()
	}
}

// forgetGone drops the tasks of PVCs that no longer exist.
func (g *Gate) forgetGone(exists map[string]bool) {
	g.taskMu.Lock()
	var gone []string
	for uid := range g.tasks {
		if !exists[uid] {
			gone = append(gone, uid)
		}
	}
	g.taskMu.Unlock()
	for _, uid := range gone {
		g.forgetTask(uid)
	}
	g.forgetGoneReports(exists)
}

// stopNodeDrainers deletes the drainer Jobs running for node's drain (heldDrainer) and forgets
// their failures: the drain is over. It lists the Jobs fresh, not from the cache, so that a
// drainer the last check started just before is not missed. It returns what failed.
func (g *Gate) stopNodeDrainers(ctx context.Context, node string) error {
	lctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
	jobs, err := g.cfg.Client.BatchV1().Jobs(metav1.NamespaceAll).List(lctx, metav1.ListOptions{LabelSelector: drainerSelector.String()})
	cancel()
	if err != nil {
		return fmt.Errorf("list drainer Jobs: %w", err)
	}
	var errs []error
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if held, ok := heldDrainer(job); ok && held == node {
			if err := g.removeJob(ctx, job); err != nil {
				errs = append(errs, err)
			}
		}
	}
	g.taskMu.Lock()
	var forgotten []*drainTask
	for key, t := range g.tasks {
		if t.trigger == TriggerNodeDrain && t.node == node && t.mu.TryLock() {
			delete(g.tasks, key)
			t.mu.Unlock()
			forgotten = append(forgotten, t)
		}
	}
	g.taskMu.Unlock()
	for _, t := range forgotten {
		if t.failures > 0 {
			if err := g.clearFailures(ctx, t); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// heldDrainer returns the node whose drain job is a drainer for, if Release would stop it: a
// TriggerNodeDrain drainer pinned to a node, neither finished nor being deleted.
func heldDrainer(job *batchv1.Job) (string, bool) {
	node := job.Annotations[DrainerNodeAnnotation]
	if job.Labels[DrainerLabel] != "true" || job.Annotations[DrainerTriggerAnnotation] != TriggerNodeDrain ||
		node == "" || job.DeletionTimestamp != nil {
		return "", false
	}
	if done, _, _ := jobFinished(job); done {
		return "", false
	}
	return node, true
}

// roughly rounds d for people: to the second, or to 100 ms under a second; never negative.
func roughly(d time.Duration) time.Duration {
	if d < time.Second {
		return max(d, 0).Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// backoff is base doubled for each failure after the first, at most limit.
func backoff(failures int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
