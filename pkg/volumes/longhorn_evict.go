package volumes

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// LonghornEvictionAnnotation on a Longhorn Node records that the gate asked Longhorn to evict
// the node's replicas, and the node's spec.allowScheduling before; the gate only ever withdraws
// a request that carries it.
const LonghornEvictionAnnotation = "edgedrain.io/longhorn-eviction"

// evictionRecord is the value of LonghornEvictionAnnotation.
type evictionRecord struct {
	At time.Time `json:"at"`
	// AllowScheduling is the node's spec.allowScheduling before the request.
	AllowScheduling bool `json:"allowScheduling"`
}

// RequestEviction asks Longhorn to move node's replicas to other nodes the way Longhorn expects
// it: spec.evictionRequested true on the node's Longhorn Node, with spec.allowScheduling false
// (Longhorn refuses an eviction on a node that still accepts replicas); Longhorn's replica
// controller then marks each replica there status.evictionRequested and rebuilds it
// elsewhere. The node's earlier allowScheduling is kept in LonghornEvictionAnnotation for
// CancelEviction. A request already made (by the gate or anyone) is left as it is; a node with
// no Longhorn Node has no replicas to move.
func (l *Longhorn) RequestEviction(ctx context.Context, node string) (bool, error) {
	if !l.Available() || l.nodes == nil {
		return false, nil
	}
	obj, ok, err := l.nodes.GetByKey(l.namespace + "/" + node)
	if err != nil || !ok {
		return false, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return false, nil
	}
	if _, ours := u.GetAnnotations()[LonghornEvictionAnnotation]; ours {
		return false, nil
	}
	if requested, _, _ := unstructured.NestedBool(u.Object, "spec", "evictionRequested"); requested {
		return false, nil
	}
	allow, found, _ := unstructured.NestedBool(u.Object, "spec", "allowScheduling")
	rec, err := json.Marshal(evictionRecord{At: time.Now().UTC(), AllowScheduling: allow || !found})
	if err != nil {
		return false, err
	}
	// The resourceVersion makes the patch a compare-and-swap against the cached object.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": u.GetResourceVersion(),
			"annotations":     map[string]string{LonghornEvictionAnnotation: string(rec)},
		},
		"spec": map[string]any{"allowScheduling": false, "evictionRequested": true},
	})
	if err != nil {
		return false, err
	}
	_, err = l.dyn.Resource(longhornNodes).Namespace(l.namespace).Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return false, fmt.Errorf("request eviction of longhorn node %s: %w", node, err)
	}
	l.log.WithField("node", node).Info("asked Longhorn to evict the node's replicas")
	return true, nil
}

// CancelEviction withdraws the eviction RequestEviction made on node's Longhorn Node and
// restores its allowScheduling. It reads the node fresh, not from the cache, so that a request
// made just before is not missed, and reads it again when Longhorn changed the node in between
// (a conflict). A node without the record, or without a Longhorn Node, is left alone.
func (l *Longhorn) CancelEviction(ctx context.Context, node string) (bool, error) {
	if !l.Available() || l.nodes == nil {
		return false, nil
	}
	var changed bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		changed, err = l.cancelEviction(ctx, node)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("cancel eviction of longhorn node %s: %w", node, err)
	}
	if changed {
		l.log.WithField("node", node).Info("withdrew the request to Longhorn to evict the node's replicas")
	}
	return changed, nil
}

// cancelEviction is one attempt of CancelEviction; a conflict means the node changed since it
// was read.
func (l *Longhorn) cancelEviction(ctx context.Context, node string) (bool, error) {
	res := l.dyn.Resource(longhornNodes).Namespace(l.namespace)
	u, err := res.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get: %w", err)
	}
	raw, ours := u.GetAnnotations()[LonghornEvictionAnnotation]
	if !ours {
		return false, nil
	}
	rec := evictionRecord{AllowScheduling: true}
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		l.log.WithField("node", node).WithError(err).Warn("unreadable eviction record; re-enabling scheduling")
		rec.AllowScheduling = true
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": u.GetResourceVersion(),
			"annotations":     map[string]any{LonghornEvictionAnnotation: nil},
		},
		"spec": map[string]any{"allowScheduling": rec.AllowScheduling, "evictionRequested": false},
	})
	if err != nil {
		return false, err
	}
	if _, err := res.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, err
	}
	return true, nil
}

// RequestedEvictions returns, sorted and from the cache, the nodes whose Longhorn Node carries
// LonghornEvictionAnnotation: requests RequestEviction made that CancelEviction has not
// withdrawn.
func (l *Longhorn) RequestedEvictions(context.Context) ([]string, error) {
	if !l.Available() || l.nodes == nil {
		return nil, nil
	}
	var out []string
	for _, obj := range l.nodes.List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if _, ours := u.GetAnnotations()[LonghornEvictionAnnotation]; ours {
			out = append(out, u.GetName())
		}
	}
	sort.Strings(out)
	return out, nil
}
