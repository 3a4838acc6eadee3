package volumes

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// ReleaseHold marks node's holds released: its drain is over. The holds end once the node's
// replicas have caught up (SettleHolds).
func (l *Longhorn) ReleaseHold(ctx context.Context, node string, now time.Time) error {
	if !l.Available() {
		return nil
	}
	release := func(rec *holdRecord) bool {
		h, ok := rec.Nodes[node]
		if !ok || !h.Released.IsZero() {
			return false
		}
		h.Released = now.UTC()
		rec.Nodes[node] = h
		return true
	}
	var errs []error
	for _, o := range l.heldObjects() {
		if _, ok := o.rec.Nodes[node]; !ok && o.gvr != longhornSettings {
			continue // (the Setting is read fresh whatever its cache says: a hold just made)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			return l.updateHold(ctx, o.gvr, o.name, release, nil)
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SettleHolds ends the holds of nodes that are done with them: released and caughtUp(node)
// (the node's replicas healthy again), or past their Until. An object none of whose nodes
// holds it any more gets its operator's value back, unless the operator changed it meanwhile.
// It returns how each node's hold ended (from the Setting's record).
func (l *Longhorn) SettleHolds(ctx context.Context, now time.Time, caughtUp func(node string) bool, justReleased string) ([]HoldOutcome, error) {
	if !l.Available() {
		return nil, nil
	}
	back := map[string]bool{} // caughtUp, asked once a node
	isBack := func(node string) bool {
		if b, ok := back[node]; ok {
			return b
		}
		back[node] = caughtUp(node)
		return back[node]
	}
	// Decided once a hold, on a fresh read, so that every object ends the same ones; a new
	// hold of the node written meanwhile (another maintenance) is another decision.
	ended := map[string]bool{}
	ends := func(node string, h nodeHold) bool {
		key := node + "@" + h.Since.String() + "@" + h.Released.String()
		if e, ok := ended[key]; ok {
			return e
		}
		ended[key] = now.After(h.Until) || (!h.Released.IsZero() && isBack(node))
		return ended[key]
	}
	var outcomes []HoldOutcome
	var errs []error
	for _, o := range l.heldObjects() {
		due := false
		for node, h := range o.rec.Nodes {
			// (The cache may not show the release just written: justReleased.)
			due = due || now.After(h.Until) || ((!h.Released.IsZero() || node == justReleased) && isBack(node))
		}
		if !due {
			continue // no node of it can end now: nothing to read or write
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var out []HoldOutcome
			err := l.updateHold(ctx, o.gvr, o.name, func(rec *holdRecord) bool {
				changed := false
				for node, h := range rec.Nodes {
					if !ends(node, h) {
						continue
					}
					if o.gvr == longhornSettings {
						out = append(out, l.outcome(node, h))
					}
					delete(rec.Nodes, node)
					changed = true
				}
				return changed
			}, func(rec *holdRecord) (any, []string) { return restoreValue(o.gvr, rec) })
			if err == nil {
				outcomes = append(outcomes, out...)
			}
			return err
		})
		errs = append(errs, err)
	}
	sort.Slice(outcomes, func(i, j int) bool { return outcomes[i].Node < outcomes[j].Node })
	return outcomes, errors.Join(errs...)
}

// restoreValue is the value (and its path) that ends a hold on an object of gvr.
func restoreValue(gvr schema.GroupVersionResource, rec *holdRecord) (any, []string) {
	if gvr == longhornSettings {
		return strconv.FormatInt(rec.Original, 10), []string{"value"}
	}
	return rec.Original, []string{"spec", "staleReplicaTimeout"}
}

// outcome says how node's hold ended: each of its replicas healthy there again is a catch-up.
func (l *Longhorn) outcome(node string, h nodeHold) HoldOutcome {
	o := HoldOutcome{Node: node, Expired: h.Released.IsZero()}
	if !h.Released.IsZero() {
		o.Away = h.Released.Sub(h.Since)
	}
	l.memoMu.Lock()
	defer l.memoMu.Unlock()
	for _, name := range h.Replicas {
		obj, ok, _ := l.replicas.GetByKey(l.namespace + "/" + name)
		if r := l.replicaFacts(obj); ok && r != nil && r.node == node && r.intact && r.running && !r.deleting {
			o.CaughtUp++
		} else {
			o.Rebuilt++
		}
	}
	return o
}

// HeldNodes lists, sorted and from the caches, the nodes holding a hold not released yet.
func (l *Longhorn) HeldNodes() []string {
	if !l.Available() {
		return nil
	}
	seen := map[string]bool{}
	for _, o := range l.heldObjects() {
		for node, h := range o.rec.Nodes {
			if h.Released.IsZero() {
				seen[node] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// heldObject is a cached object carrying a hold record.
type heldObject struct {
	gvr  schema.GroupVersionResource
	name string
	rec  *holdRecord
}

// heldObjects lists the cached Setting and Volumes carrying a hold record.
func (l *Longhorn) heldObjects() []heldObject {
	var out []heldObject
	add := func(gvr schema.GroupVersionResource, obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if rec, err := readRecord(u); err != nil {
			l.log.WithError(err).Warn("ignoring a hold record the gate cannot read")
		} else if rec != nil {
			out = append(out, heldObject{gvr: gvr, name: u.GetName(), rec: rec})
		}
	}
	if l.settings != nil {
		if obj, ok, _ := l.settings.GetByKey(l.namespace + "/" + ReplenishmentWaitSetting); ok {
			add(longhornSettings, obj)
		}
	}
	for _, obj := range l.volumes.List() {
		add(longhornVolumes, obj)
	}
	return out
}

// updateHold reads the object fresh, lets change edit its record (false: nothing to write) and
// writes it back as a compare-and-swap; a record left with no node is removed, and restore
// gives the value to write back then — kept as it is when the operator changed it.
func (l *Longhorn) updateHold(ctx context.Context, gvr schema.GroupVersionResource, name string,
	change func(*holdRecord) bool, restore func(*holdRecord) (any, []string)) error {
	u, err := l.dyn.Resource(gvr).Namespace(l.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	rec, err := readRecord(u)
	if err != nil || rec == nil || !change(rec) {
		return err
	}
	if len(rec.Nodes) > 0 || restore == nil {
		return l.patchHold(ctx, gvr, u, rec, nil)
	}
	value, path := restore(rec)
	if cur, _ := holdValue(gvr, u); cur != rec.Raised {
		value, path = nil, nil // the operator's since: theirs stays
	}
	if err := l.patchHold(ctx, gvr, u, nil, value, path...); err != nil {
		return err
	}
	if value != nil {
		l.log.WithField("object", gvr.Resource+"/"+name).Infof("replica hold ended: restored the operator's value %v", value)
	}
	return nil
}

// holdValue reads the value a hold raises on an object of gvr.
func holdValue(gvr schema.GroupVersionResource, u *unstructured.Unstructured) (int64, error) {
	if gvr == longhornSettings {
		return settingValue(u)
	}
	return staleTimeout(u)
}
