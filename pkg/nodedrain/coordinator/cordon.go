package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// CordonAnnotation on a Node records that edgedrain cordoned it, for which request, when, and the
// node's state before; edgedrain only ever uncordons a node that carries it.
const CordonAnnotation = "edgedrain.io/cordoned"

// cordonRecord is the value of CordonAnnotation.
type cordonRecord struct {
	// Request is a digest of the request's ID, never the ID itself: Node objects are readable by
	// every kubelet, and an agent acts on a COMPLETE only for its own request ID, which no other
	// node may learn (DESIGN §10; README, Security model).
	Request string    `json:"request"`
	At      time.Time `json:"at"`
	// WasUnschedulable is the node's spec.unschedulable before edgedrain cordoned it (always
	// false today: a node already cordoned is left to whoever cordoned it).
	WasUnschedulable bool `json:"wasUnschedulable"`
}

// RequestDigest names a request without revealing its ID: the first 16 hex digits of the ID's
// SHA-256.
func RequestDigest(requestID string) string {
	sum := sha256.Sum256([]byte(requestID))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// nodeOps cordons and uncordons nodes through the API, always reading the node fresh.
type nodeOps struct {
	client kubernetes.Interface
	now    func() time.Time
}

// cordon makes the node unschedulable and records that edgedrain did. It is idempotent: a node
// edgedrain already cordoned is not patched again. byUs is false when someone else had
// cordoned the node; it is then left as it is.
func (o nodeOps) cordon(ctx context.Context, name, requestID string) (byUs bool, err error) {
	// A conflict (the Node changed since it was read: its kubelet's status, edgedrain's own
	// maintenance condition) is decided again at once on a fresh read; anything else fails the
	// attempt.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e error
		byUs, e = o.cordonOnce(ctx, name, requestID)
		return e
	})
	return byUs, err
}

func (o nodeOps) cordonOnce(ctx context.Context, name, requestID string) (byUs bool, err error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", name, err)
	}
	if node.Spec.Unschedulable {
		_, ours := node.Annotations[CordonAnnotation]
		return ours, nil
	}
	rec, err := json.Marshal(cordonRecord{Request: RequestDigest(requestID), At: o.now().UTC(), WasUnschedulable: false})
	if err != nil {
		return false, err
	}
	// The resourceVersion makes this a compare-and-swap: if the node changed since we read it
	// (someone cordoned it meanwhile) the patch fails with a conflict and the attempt is retried.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": node.ResourceVersion,
			"annotations":     map[string]string{CordonAnnotation: string(rec)},
		},
		"spec": map[string]any{"unschedulable": true},
	})
	if err != nil {
		return false, err
	}
	if !stillLeading(ctx) {
		return false, fmt.Errorf("cordon node %s: %w", name, ErrLeaseLapsed)
	}
	if _, err := o.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("cordon node %s: %w", name, err)
	}
	return true, nil
}

// uncordon undoes edgedrain's cordon: only a node carrying CordonAnnotation is made schedulable
// again (a node someone else cordoned stays cordoned); the annotation is removed. A node that no
// longer exists, or carries no annotation, needs nothing.
func (o nodeOps) uncordon(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return o.uncordonOnce(ctx, name) })
}

func (o nodeOps) uncordonOnce(ctx context.Context, name string) error {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	raw, ours := node.Annotations[CordonAnnotation]
	if !ours {
		return nil
	}
	var rec cordonRecord
	_ = json.Unmarshal([]byte(raw), &rec) // an unreadable record still means we cordoned it
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": node.ResourceVersion,
			"annotations":     map[string]any{CordonAnnotation: nil},
		},
		"spec": map[string]any{"unschedulable": rec.WasUnschedulable},
	})
	if err != nil {
		return err
	}
	if !stillLeading(ctx) {
		return fmt.Errorf("uncordon node %s: %w", name, ErrLeaseLapsed)
	}
	if _, err := o.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("uncordon node %s: %w", name, err)
	}
	return nil
}

// cordoned reports whether the node is unschedulable now.
func (o nodeOps) cordoned(ctx context.Context, name string) (bool, error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", name, err)
	}
	return node.Spec.Unschedulable, nil
}

// nodeReady reports the node's Ready condition.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
