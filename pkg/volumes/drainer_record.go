package volumes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DrainerFailuresAnnotation on a PVC records its drainer's failures so far, the last error and
// when the next attempt may start (JSON), so that a restarted coordinator keeps the count and
// the backoff instead of starting a failing drainer again at once. The gate removes it when the
// drainer succeeds, when the PVC is used again and when the node's drain is over.
const DrainerFailuresAnnotation = "edgedrain.io/drainer-failures"

// maxRecordedError bounds the last error kept in the record.
const maxRecordedError = 512

// failureRecord is the value of DrainerFailuresAnnotation.
type failureRecord struct {
	Failures  int       `json:"failures"`
	LastError string    `json:"lastError,omitempty"`
	NextAt    time.Time `json:"nextAt"`
	// Job is the UID of the last failed Job counted: found again, it is not counted twice.
	Job types.UID `json:"job,omitempty"`
}

// restoreFailures fills a new task from pvc's record. A record that does not parse, or whose next
// attempt is further past than the longest backoff (an earlier drain's, left by a coordinator
// that stopped before it was cleared), is ignored.
func (g *Gate) restoreFailures(t *drainTask, pvc *corev1.PersistentVolumeClaim) {
	raw, ok := pvc.Annotations[DrainerFailuresAnnotation]
	if !ok {
		return
	}
	var rec failureRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Failures < 0 {
		g.log.WithField("pvc", pvc.Namespace+"/"+pvc.Name).Warnf("ignoring the unreadable %s annotation", DrainerFailuresAnnotation)
		return
	}
	if g.now().Sub(rec.NextAt) > g.cfg.DrainerBackoffMax {
		return
	}
	t.failures, t.lastErr, t.nextAt, t.handled = rec.Failures, rec.LastError, rec.NextAt, rec.Job
}

// recordFailures writes t's failures on its PVC.
func (g *Gate) recordFailures(ctx context.Context, t *drainTask) error {
	msg := t.lastErr
	if len(msg) > maxRecordedError {
		msg = msg[:maxRecordedError]
	}
	raw, err := json.Marshal(failureRecord{Failures: t.failures, LastError: msg, NextAt: t.nextAt.UTC(), Job: t.handled})
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{DrainerFailuresAnnotation: string(raw)}}})
	if err != nil {
		return err
	}
	return g.patchPVC(ctx, t.ns, t.pvc, patch)
}

// clearFailures removes t's record from its PVC; a PVC that is gone has none.
func (g *Gate) clearFailures(ctx context.Context, t *drainTask) error {
	err := g.patchPVC(ctx, t.ns, t.pvc, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, DrainerFailuresAnnotation))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (g *Gate) patchPVC(ctx context.Context, ns, name string, patch []byte) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.WriteTimeout)
	defer cancel()
	_, err := g.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Patch(wctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch PVC %s/%s: %w", ns, name, err)
	}
	return nil
}
