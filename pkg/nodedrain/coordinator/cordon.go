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
// node's state before; edgedrain only ever uncordons a node that carries it, and only while the
// cordon is still the one it made (see cordonIsOurs).
const CordonAnnotation = "edgedrain.io/cordoned"

// KeepCordonedAnnotation on a Node asks edgedrain to leave the node cordoned the next time it
// would uncordon it (the node's drain ends): edgedrain then removes its own CordonAnnotation
// and this one, and the cordon is the operator's from then on, as after a kubectl cordon of a
// schedulable node. kubectl cordon cannot say so by itself on a node edgedrain already cordoned:
// it changes nothing there. Honoured once, so that a mark set for one drain does not keep the
// node out of service after the next. The value is free text, the operator's reason, repeated in
// the status. edgedrainctl keep-cordoned sets and clears it; so can kubectl annotate.
const KeepCordonedAnnotation = "edgedrain.io/keep-cordoned"

// cordonRecord is the value of CordonAnnotation.
type cordonRecord struct {
	// Request is a digest of the request's ID, never the ID itself: Node objects are readable by
	// every kubelet, and an agent acts on a COMPLETE only for its own request ID, which no other
	// node may learn (DESIGN §10; docs/security.md).
	Request string    `json:"request"`
	At      time.Time `json:"at"`
	// WasUnschedulable is the node's spec.unschedulable before edgedrain cordoned it (always
	// false today: a node already cordoned is left to whoever cordoned it).
	WasUnschedulable bool `json:"wasUnschedulable"`
	// Manager is the field manager edgedrain's cordon was written under (FieldManager): the
	// cordon is edgedrain's while that manager alone owns spec.unschedulable. Empty in records
	// written before edgedrain named its writes.
	Manager string `json:"manager,omitempty"`
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

// writeOptions names edgedrain as the field manager of its Node writes (see FieldManager).
var writeOptions = metav1.PatchOptions{FieldManager: FieldManager}

// cordon makes the node unschedulable and records that edgedrain did. It is idempotent: a node
// edgedrain already cordoned is not patched again. byUs is false when someone else had
// cordoned the node; it is then left as it is. uid names the Node object read.
func (o nodeOps) cordon(ctx context.Context, name, requestID string) (byUs bool, uid types.UID, err error) {
	// A conflict (the Node changed since it was read: its kubelet's status, edgedrain's own
	// maintenance condition) is decided again at once on a fresh read; anything else fails the
	// attempt.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e error
		byUs, uid, e = o.cordonOnce(ctx, name, requestID)
		return e
	})
	return byUs, uid, err
}

func (o nodeOps) cordonOnce(ctx context.Context, name, requestID string) (byUs bool, uid types.UID, err error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("get node %s: %w", name, err)
	}
	if node.Spec.Unschedulable {
		if cordonIsOurs(node) {
			return true, node.UID, nil
		}
		if _, stale := node.Annotations[CordonAnnotation]; stale {
			// edgedrain's record outlived its cordon (the node was uncordoned and cordoned
			// again by someone else): it goes, so that nothing later takes that cordon for
			// edgedrain's.
			if _, err := o.dropRecord(ctx, node, false); err != nil {
				return false, "", err
			}
		}
		return false, node.UID, nil
	}
	rec, err := json.Marshal(cordonRecord{Request: RequestDigest(requestID), At: o.now().UTC(), WasUnschedulable: false, Manager: FieldManager})
	if err != nil {
		return false, "", err
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
		return false, "", err
	}
	if !stillLeading(ctx) {
		return false, "", fmt.Errorf("cordon node %s: %w", name, ErrLeaseLapsed)
	}
	if _, err := o.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, writeOptions); err != nil {
		return false, "", fmt.Errorf("cordon node %s: %w", name, err)
	}
	return true, node.UID, nil
}

// uncordon undoes edgedrain's cordon: only a node whose cordon is still the one edgedrain made
// (cordonIsOurs) is made schedulable again, unless it carries KeepCordonedAnnotation; a node
// someone else cordoned stays cordoned. Either way edgedrain's record, and the request to keep
// the node cordoned (answered now), are removed. A node that no longer exists, or carries no
// record, needs nothing. left says why a cordoned node was left so ("" otherwise); rv is the
// Node's resourceVersion as the uncordon left it ("" for no such Node).
func (o nodeOps) uncordon(ctx context.Context, name string) (left, rv string, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e error
		left, rv, e = o.uncordonOnce(ctx, name)
		return e
	})
	return left, rv, err
}

func (o nodeOps) uncordonOnce(ctx context.Context, name string) (left, rv string, err error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get node %s: %w", name, err)
	}
	if _, recorded := node.Annotations[CordonAnnotation]; !recorded {
		return "", node.ResourceVersion, nil
	}
	ours := cordonIsOurs(node)
	reason, keep := node.Annotations[KeepCordonedAnnotation]
	switch {
	case ours && keep:
		left = fmt.Sprintf("an operator asked to keep it cordoned (%s: %q); the cordon is theirs now, kubectl uncordon ends it",
			KeepCordonedAnnotation, reason)
	case !ours && node.Spec.Unschedulable:
		left = "its cordon is someone else's (the node was uncordoned and cordoned again since edgedrain cordoned it)"
	}
	rv, err = o.dropRecord(ctx, node, ours && !keep)
	return left, rv, err
}

// dropRecord removes edgedrain's CordonAnnotation from node (and KeepCordonedAnnotation, which
// asks something of that cordon), as of the resourceVersion read; uncordon also makes the node
// schedulable again, in the same write. It returns the Node's resourceVersion after the write.
func (o nodeOps) dropRecord(ctx context.Context, node *corev1.Node, uncordon bool) (string, error) {
	annotations := map[string]any{CordonAnnotation: nil}
	if _, keep := node.Annotations[KeepCordonedAnnotation]; keep {
		annotations[KeepCordonedAnnotation] = nil
	}
	body := map[string]any{"metadata": map[string]any{"resourceVersion": node.ResourceVersion, "annotations": annotations}}
	if uncordon {
		var rec cordonRecord
		_ = json.Unmarshal([]byte(node.Annotations[CordonAnnotation]), &rec) // an unreadable record: schedulable, as before
		body["spec"] = map[string]any{"unschedulable": rec.WasUnschedulable}
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	what := "remove edgedrain's cordon record from node"
	if uncordon {
		what = "uncordon node"
	}
	if !stillLeading(ctx) {
		return "", fmt.Errorf("%s %s: %w", what, node.Name, ErrLeaseLapsed)
	}
	written, err := o.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, writeOptions)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, node.Name, err)
	}
	return written.ResourceVersion, nil
}

// cordonState is what the check before COMPLETE reads of a node.
type cordonState struct {
	// cordoned: unschedulable; ours: by edgedrain's own cordon (cordonIsOurs); missing: no Node
	// object of the name (not an error: the drain decides what that means).
	cordoned, ours, missing bool
	uid                     types.UID
}

// checkCordon reads whether the node is still cordoned, whether by edgedrain, and which Node
// object it is.
func (o nodeOps) checkCordon(ctx context.Context, name string) (cordonState, error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return cordonState{missing: true}, nil
	}
	if err != nil {
		return cordonState{}, fmt.Errorf("get node %s: %w", name, err)
	}
	return cordonState{cordoned: node.Spec.Unschedulable, ours: cordonIsOurs(node), uid: node.UID}, nil
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
