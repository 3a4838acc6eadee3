package coordinator

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// deleteNode deletes a decommissioned node's Node object, if it is still cordoned: deleted
// reports that the node is gone (deleted now, or already missing: missing); false with no error
// means it was found uncordoned (someone made it schedulable again) and was left as it is. The deletion
// names the UID and resourceVersion read: a node that registered again, or was uncordoned,
// meanwhile is not deleted (a conflict: the drain checks everything again and retries). drained
// is the UID of the object the drain emptied (empty: not known): another object under the name
// is left as it is, and its UID returned (replaced).
func (o nodeOps) deleteNode(ctx context.Context, name string, drained types.UID) (deleted, missing bool, replaced types.UID, err error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, true, "", nil
	}
	if err != nil {
		return false, false, "", fmt.Errorf("get node %s: %w", name, err)
	}
	if drained != "" && node.UID != drained {
		return false, false, node.UID, nil
	}
	if !node.Spec.Unschedulable {
		return false, false, "", nil
	}
	if !stillLeading(ctx) {
		return false, false, "", fmt.Errorf("delete node %s: %w", name, ErrLeaseLapsed)
	}
	uid, rv := node.UID, node.ResourceVersion
	err = o.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, false, "", fmt.Errorf("delete node %s: %w", name, err)
	}
	return true, false, "", nil
}

// forget removes a decommissioned node's keys from the bus: its request, if the key still holds
// requestID (the agent did not withdraw it: the machine is off), then its status, unless another
// request is on the bus (a new machine with the name: the status may be its). The status may be
// any of this request's, or older, not only its COMPLETE: publications lost in a bus outage
// leave older ones there. The request goes first: a forget stopped in between (a write failed, the
// coordinator stopped) leaves the status, which a coordinator resuming takes for a decommissioned
// node's and forgets again; a request left without its status is taken for a new one, of a node
// not in the cluster, and waits for good (simulation, L1). The request's removal names the
// revision it read, so a request published meanwhile is never removed in its place; its echo on
// the watch is no withdrawal (Drain.Forgetting).
func (e *Engine) forget(ctx context.Context, node, requestID string) error {
	if !stillLeading(ctx) {
		return fmt.Errorf("forget node %s: %w", node, ErrLeaseLapsed)
	}
	req, reqRev, err := e.requests.Get(ctx, node)
	switch {
	case errors.Is(err, pubsub.ErrNotFound), errors.Is(err, pubsub.ErrDecode):
		// (no request, or garbage there: not a request to serve)
	case err != nil:
		return fmt.Errorf("read the request of %s: %w", node, err)
	case req.RequestID != requestID:
		return nil // a new request for the name: its status is not ours to remove
	default:
		if err := e.requests.UnpublishRevision(ctx, node, reqRev); err != nil {
			return fmt.Errorf("remove the request of %s: %w", node, err)
		}
	}
	return e.forgetStatus(ctx, node)
}

// forgetStatus removes node's status, fenced like every status write (fence.go). A copied delete
// marker (or status reply) is no removal of the coordinator's: its own delete goes on top, or a
// later repair would put the node's last status back for good. A status key that cannot be read
// is retried (readStatus also reads past a direct get's reply).
func (e *Engine) forgetStatus(ctx context.Context, node string) error {
	_, rev, v, err := e.readStatus(ctx, node, e.currentRevision(ctx))
	switch v {
	case statusGone:
		return nil
	case statusUnread:
		return fmt.Errorf("read the status of %s: %w", node, err)
	}
	del, err := e.statuses.UnpublishIfLast(ctx, node, e.lastSeq)
	if errors.Is(err, pubsub.ErrConflict) {
		if ferr := e.fenceRefused(ctx, "forget "+node, err); ferr != nil {
			err = fmt.Errorf("%w; and then: %w", err, ferr)
		} else if stillLeading(ctx) { // stepped over what no coordinator wrote: once more, after it
			del, err = e.statuses.UnpublishIfLast(ctx, node, e.lastSeq)
		}
	}
	if err != nil {
		return fmt.Errorf("remove the status of %s (revision %d): %w", node, rev, err)
	}
	e.lastSeq, e.ownRevs[node] = max(e.lastSeq, del), del
	return nil
}

// forgetNow runs OpForget in the engine's loop and returns what its result decides.
func (e *Engine) forgetNow(ctx context.Context, node, requestID string) []NodeAction {
	fctx, cancel := context.WithTimeout(ctx, 2*publishTimeout)
	defer cancel()
	served := requestID
	if d, ok := e.core.Drain(node); ok && d.Request == nil {
		// Nothing served (withdrawn, or an idle drain's forget): a request under the key now,
		// even one with the last request's ID put back (an operator's replay), is a new one.
		served = ""
	}
	err := e.forget(fctx, node, served)
	return e.core.Handle(node, nodedrain.EvResult{Op: nodedrain.OpForget, RequestID: requestID, Err: err}, e.cfg.Now())
}
