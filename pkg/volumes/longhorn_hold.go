package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// A node that goes down for its operation with its replicas kept there (PolicyWait) costs a
// full copy of every volume it holds when it is away longer than Longhorn waits for it: the
// global Setting replica-replenishment-wait-interval (seconds; Longhorn then builds a new
// replica elsewhere instead of reusing the failed one) and each Volume's
// spec.staleReplicaTimeout (minutes; a failed replica older than that is deleted). A hold
// raises both for the node's expected time away and restores them once the node's replicas
// have caught up — or the expected time has passed, or the drain ended without the node going
// down. Everything a hold needs to be undone is kept on the objects it changed
// (ReplicaHoldAnnotation), so that a coordinator that restarts finds it.

// ReplicaHoldAnnotation on the replica-replenishment-wait-interval Setting and on a Longhorn
// Volume records a hold: the operator's value before it, the value the gate set, and the nodes
// it is held for.
const ReplicaHoldAnnotation = "edgedrain.io/replica-hold"

// ReplenishmentWaitSetting is the Longhorn Setting a hold raises, and its default (seconds).
const (
	ReplenishmentWaitSetting = "replica-replenishment-wait-interval"
	replenishmentWaitDefault = 600
)

// errHoldImpossible marks an error no retry will mend (the object's value is not what a hold
// can raise).
var errHoldImpossible = errors.New("cannot hold")

// holdRecord is the value of ReplicaHoldAnnotation.
type holdRecord struct {
	// Original is the operator's value before the first hold (the Setting's seconds, the
	// Volume's minutes); Raised is the value the gate wrote. A value that is neither Raised
	// when the hold ends was the operator's doing and stays.
	Original int64               `json:"original"`
	Raised   int64               `json:"raised"`
	Nodes    map[string]nodeHold `json:"nodes"`
}

// nodeHold is one node's part of a hold.
type nodeHold struct {
	Since time.Time `json:"since"`
	// Until: the hold ends by itself then (the node's expected time away has passed: Longhorn
	// may as well rebuild).
	Until time.Time `json:"until"`
	// Released is when the drain ended (the node back, or the drain called off); the hold ends
	// once the node's replicas have caught up.
	Released time.Time `json:"released,omitzero"`
	// Replicas maps each volume with a replica on the node to that replica's name (Setting
	// record only): the same replica healthy again is a catch-up, anything else a rebuild.
	Replicas map[string]string `json:"replicas,omitempty"`
}

// HoldOutcome is how a node's hold ended.
type HoldOutcome struct {
	Node string
	// Away is from the hold to the drain's end (zero: never released: the hold expired).
	Away time.Duration
	// CaughtUp, Rebuilt count the node's volumes whose replica there came back, or whose
	// replica there is gone (built anew elsewhere or there).
	CaughtUp, Rebuilt int
	Expired           bool
}

// settingValue reads the Setting's value in seconds (Longhorn keeps it as a string).
func settingValue(u *unstructured.Unstructured) (int64, error) {
	raw, _, _ := unstructured.NestedString(u.Object, "value")
	if raw == "" {
		return replenishmentWaitDefault, nil
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: setting %s: value %q is not a number of seconds", errHoldImpossible, u.GetName(), raw)
	}
	return v, nil
}

// readRecord is u's hold record (nil: none, or one that is not readable: reported by err).
func readRecord(u *unstructured.Unstructured) (*holdRecord, error) {
	raw, ok := u.GetAnnotations()[ReplicaHoldAnnotation]
	if !ok {
		return nil, nil
	}
	var rec holdRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("%s %s: unreadable %s: %w", u.GetKind(), u.GetName(), ReplicaHoldAnnotation, err)
	}
	if rec.Nodes == nil {
		rec.Nodes = map[string]nodeHold{}
	}
	return &rec, nil
}

// holdPatch is a merge patch writing value (at path) and rec (nil: removed) as a compare-and-
// swap on u's resourceVersion.
func holdPatch(u *unstructured.Unstructured, rec *holdRecord, value any, path ...string) ([]byte, error) {
	var ann any
	if rec != nil {
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		ann = string(b)
	}
	p := map[string]any{"metadata": map[string]any{"resourceVersion": u.GetResourceVersion(),
		"annotations": map[string]any{ReplicaHoldAnnotation: ann}}}
	if len(path) > 0 {
		if err := unstructured.SetNestedField(p, value, path...); err != nil {
			return nil, err
		}
	}
	return json.Marshal(p)
}

// holdRefresh: a node's hold whose end is at least this close to what a check would set is
// not written again (each check before COMPLETE would otherwise write every volume).
const holdRefresh = 5 * time.Minute

// HoldReplicas raises Longhorn's replenishment wait and the staleReplicaTimeout of node's
// volumes to at least away, recording the hold; it never lowers a value. What the caches show
// held already is not read or written again; the rest is read fresh and written as a
// compare-and-swap. raised lists what it raised ("... 600 -> 1500"); wrote says whether it
// wrote anything (the caller checks again once the caches show it).
func (l *Longhorn) HoldReplicas(ctx context.Context, node string, away time.Duration, now time.Time) (raised []string, wrote bool, err error) {
	if !l.Available() {
		return nil, false, nil
	}
	replicas := map[string]string{} // volume -> its replica on node
	objs, err := l.replicas.ByIndex(indexByNode, node)
	if err != nil {
		return nil, false, err
	}
	l.memoMu.Lock()
	for _, obj := range objs {
		if r := l.replicaFacts(obj); r != nil && r.volume != "" {
			replicas[r.volume] = r.name
		}
	}
	l.memoMu.Unlock()
	if len(replicas) == 0 {
		return nil, false, nil // nothing of the node's to keep
	}
	hold := nodeHold{Since: now.UTC(), Until: now.Add(away).UTC()}
	one := func(gvr schema.GroupVersionResource, cached cacheGetter, name, label string, h nodeHold, want int64, path ...string) error {
		if obj, ok, _ := cached.GetByKey(l.namespace + "/" + name); ok {
			if u, isU := obj.(*unstructured.Unstructured); isU && !needsHold(gvr, u, node, want, h.Until) {
				return nil
			}
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			what, did, err := l.holdObject(ctx, gvr, name, node, h, want, path...)
			if what != "" {
				raised = append(raised, label+" "+what)
			}
			wrote = wrote || did
			return err
		})
	}
	h := hold
	h.Replicas = replicas
	if l.settings != nil {
		err = one(longhornSettings, l.settings, ReplenishmentWaitSetting, "Longhorn setting "+ReplenishmentWaitSetting, h,
			int64(math.Ceil(away.Seconds())), "value")
		if err != nil {
			return raised, wrote, err
		}
	}
	minutes := int64(math.Ceil(away.Minutes()))
	for vol := range replicas {
		if err = one(longhornVolumes, l.volumes, vol, "volume "+vol+" staleReplicaTimeout", hold, minutes, "spec", "staleReplicaTimeout"); err != nil {
			return raised, wrote, err
		}
	}
	return raised, wrote, nil
}

// cacheGetter is the part of an informer's store HoldReplicas reads.
type cacheGetter interface {
	GetByKey(key string) (any, bool, error)
}

// needsHold reports whether u must be written to hold node until until at want: not when its
// record holds the node (not released) until about then with the value raised enough, nor
// when it is a volume that waits long enough by itself (or has no timeout). An object whose
// value the operator changed since the gate raised it needs its record dropped or renewed.
func needsHold(gvr schema.GroupVersionResource, u *unstructured.Unstructured, node string, want int64, until time.Time) bool {
	cur, err := holdValue(gvr, u)
	if err != nil {
		return true // read fresh: holdObject reports it
	}
	rec, err := readRecord(u)
	switch {
	case err != nil:
		return true
	case rec == nil:
		return gvr == longhornSettings || (cur != 0 && cur < want)
	case cur != rec.Raised:
		return true
	}
	h, ok := rec.Nodes[node]
	return !ok || !h.Released.IsZero() || h.Until.Before(until.Add(-holdRefresh)) || rec.Raised < want
}

// staleTimeout reads a Volume's spec.staleReplicaTimeout (minutes; 0: none set, never raised).
func staleTimeout(u *unstructured.Unstructured) (int64, error) {
	v, _, err := unstructured.NestedInt64(u.Object, "spec", "staleReplicaTimeout")
	return v, err
}

// holdObject adds node's hold to one object, read fresh, and raises its value (written at
// path) to at least want. what says what it raised ("" when nothing); wrote whether it wrote.
func (l *Longhorn) holdObject(ctx context.Context, gvr schema.GroupVersionResource, name, node string, h nodeHold, want int64,
	path ...string) (what string, wrote bool, err error) {
	u, err := l.dyn.Resource(gvr).Namespace(l.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil // no such setting (an older Longhorn) or volume (deleted): nothing to raise
	}
	if err != nil {
		return "", false, err
	}
	if !needsHold(gvr, u, node, want, h.Until) {
		return "", false, nil
	}
	cur, err := holdValue(gvr, u)
	if err != nil {
		return "", false, err
	}
	if cur == 0 && gvr == longhornVolumes {
		return "", false, nil // no timeout set on the volume: failed replicas are never cleaned up
	}
	rec, err := readRecord(u)
	if err != nil {
		// Not edgedrain's record any more (garbled): it cannot say what to restore, and the
		// value now is the operator's as far as anyone can tell.
		l.log.WithError(err).Warn("replacing an unreadable replica hold record")
	}
	voided := err != nil || (rec != nil && cur != rec.Raised)
	if voided {
		rec = nil // the operator set it since: theirs is the value to restore to
	}
	if rec == nil {
		// The Setting records every hold, raised or not: it is where each node's hold is
		// followed to its end (HeldNodes, the outcome). A volume that waits long enough already
		// is left alone.
		if cur >= want && gvr != longhornSettings {
			if voided { // drop the void record, keep the operator's value
				return "", true, l.patchHold(ctx, gvr, u, nil, nil)
			}
			return "", false, nil
		}
		rec = &holdRecord{Original: cur, Raised: cur, Nodes: map[string]nodeHold{}}
	}
	if old, ok := rec.Nodes[node]; ok && old.Released.IsZero() {
		h.Since = old.Since // the same maintenance, checked again
	}
	rec.Nodes[node] = h
	if want > rec.Raised {
		what = fmt.Sprintf("%d -> %d", rec.Raised, want)
		rec.Raised = want
	}
	var v any = rec.Raised
	if gvr == longhornSettings {
		v = strconv.FormatInt(rec.Raised, 10)
	}
	return what, true, l.patchHold(ctx, gvr, u, rec, v, path...)
}

// patchHold writes rec (nil: removed) and value at path (none: the value unchanged) to u.
func (l *Longhorn) patchHold(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, rec *holdRecord, value any, path ...string) error {
	patch, err := holdPatch(u, rec, value, path...)
	if err != nil {
		return err
	}
	_, err = l.dyn.Resource(gvr).Namespace(l.namespace).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
