package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Withdrawing edgedrain's EvictionRequests (evictionrequest.go): deleting one is a withdrawal.
// An EvictionRequest is deleted once its pod is evicted or gone, and every one of a node's once
// its drain no longer evicts (cancelled, withdrawn, failed for good); at start, a sweep deletes
// those a run left behind.

// end closes the attempt: what its drain no longer needs is withdrawn (deleted: deletion counts
// as withdrawal). Cancelled by its drain (withdrawn, replaced) or its last attempt failed: every
// EvictionRequest of the node. Otherwise those of the pods settled (gone, or their eviction
// accepted). Stopped with its run: nothing (the next run resumes the drain, its sweep cleans up).
// Deletions outlive the attempt's context (bounded by withdrawTimeout) but need the Lease.
func (a *erAttempt) end(ctx context.Context, last bool, settled []corev1.Pod) {
	if a == nil {
		return
	}
	a.stop()
	x := a.x
	x.mu.Lock()
	if x.running[a.node]--; x.running[a.node] <= 0 {
		delete(x.running, a.node)
	}
	x.mu.Unlock()
	cancelled := errors.Is(context.Cause(ctx), errDrainCancelled)
	failed := last && errors.Is(ctx.Err(), context.DeadlineExceeded)
	all := cancelled || failed
	if !all && errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	if all {
		if n, err := x.withdrawNode(dctx, a.node); err != nil {
			a.log.WithError(err).Warn("withdrawing the drain's EvictionRequests failed; they are withdrawn when its request ends or at the next start")
		} else if n > 0 {
			why := "the drain was cancelled"
			if !cancelled {
				why = "its last eviction attempt failed"
			}
			a.log.Infof("withdrew the drain's %d EvictionRequest(s): %s", n, why)
		}
		return
	}
	// One list, then only the deletions needed (an earlier attempt may have filed some, and
	// most pods of a large drain may have none left).
	done := map[types.UID]bool{}
	for _, p := range settled {
		done[p.UID] = true
	}
	refs, err := x.nodeRequests(dctx, a.node, func(er *lifecyclev1alpha1.EvictionRequest) bool {
		return er.Spec.Target.Pod != nil && done[er.Spec.Target.Pod.UID]
	})
	if err == nil && len(refs) > 0 {
		_, err = x.deleteAll(dctx, refs, nil)
	}
	if err != nil {
		a.log.WithError(err).Warn("deleting the EvictionRequests of evicted pods failed; they are withdrawn when the drain's request ends or at the next start")
	}
}

// withdrawNode deletes edgedrain's EvictionRequests of node's drain (none while an eviction
// attempt of the node is under way: it still needs them). It returns how many it deleted.
func (x *evictionRequests) withdrawNode(ctx context.Context, node string) (int, error) {
	refs, err := x.nodeRequests(ctx, node, nil)
	if err != nil {
		return 0, err
	}
	return x.deleteAll(ctx, refs, func() bool { return x.attemptRunning(node) })
}

// nodeRequests lists edgedrain's EvictionRequests of node's drain that match (nil: all).
func (x *evictionRequests) nodeRequests(ctx context.Context, node string, match func(*lifecyclev1alpha1.EvictionRequest) bool) ([]types.NamespacedName, error) {
	list, err := x.client.LifecycleV1alpha1().EvictionRequests(metav1.NamespaceAll).List(ctx,
		metav1.ListOptions{LabelSelector: EvictionRequestNodeLabel + "=" + nodeLabelValue(node)})
	if err != nil {
		return nil, fmt.Errorf("list the EvictionRequests of node %s: %w", node, err)
	}
	var refs []types.NamespacedName
	for i := range list.Items {
		er := &list.Items[i]
		if ours(er) && erNode(er) == node && (match == nil || match(er)) {
			refs = append(refs, types.NamespacedName{Namespace: er.Namespace, Name: er.Name})
		}
	}
	return refs, nil
}

func (x *evictionRequests) attemptRunning(node string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.running[node] > 0
}

// deleteAll deletes the EvictionRequests refs, a few at a time, each only while the Lease is
// held and skip (if any) says no; one already gone is fine. It returns how many it deleted.
func (x *evictionRequests) deleteAll(ctx context.Context, refs []types.NamespacedName, skip func() bool) (int, error) {
	var mu sync.Mutex
	var errs []error
	deleted := 0
	sem := make(chan struct{}, deleteWorkers)
	var wg sync.WaitGroup
	for _, ref := range refs {
		if !stillLeading(ctx) {
			mu.Lock()
			errs = append(errs, ErrLeaseLapsed)
			mu.Unlock()
			break
		}
		if skip != nil && skip() {
			break // an attempt of the node began: it needs them
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := x.client.LifecycleV1alpha1().EvictionRequests(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				deleted++
			case !apierrors.IsNotFound(err):
				errs = append(errs, fmt.Errorf("delete EvictionRequest %s: %w", ref, err))
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return deleted, errors.Join(errs...)
}

func ours(er *lifecyclev1alpha1.EvictionRequest) bool {
	return er.Spec.Requester == EvictionRequester && er.Labels[EvictionRequestNodeLabel] != ""
}

// erNode is the node whose drain filed er.
func erNode(er *lifecyclev1alpha1.EvictionRequest) string {
	if n := er.Annotations[EvictionRequestNodeLabel]; n != "" {
		return n
	}
	return er.Labels[EvictionRequestNodeLabel]
}

// release withdraws node's EvictionRequests when its drain is over (its request withdrawn or
// replaced), tried a few times; what is left, the next start's sweep finds.
func (x *evictionRequests) release(ctx context.Context, node string) {
	if !x.use(ctx) {
		return
	}
	for try := 1; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, withdrawTimeout)
		n, err := x.withdrawNode(rctx, node)
		cancel()
		switch {
		case err == nil && n > 0:
			x.log.WithField("node", node).Infof("the drain is over: withdrew its %d EvictionRequest(s)", n)
		case err != nil && ctx.Err() == nil && try < 4:
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try) * 2 * time.Second):
				continue
			}
		case err != nil && ctx.Err() == nil:
			x.log.WithField("node", node).WithError(err).Warn("withdrawing the drain's EvictionRequests failed; the next start retries")
		}
		return
	}
}

// sweep deletes, when a run starts, the EvictionRequests edgedrain left behind: those whose pod
// is gone, and those of nodes this coordinator manages (managed) whose drain is not evicting
// (wanted says which are). A node it does not manage may be another coordinator's
// (--node-selector): only its EvictionRequests of pods gone are deleted.
func (x *evictionRequests) sweep(ctx context.Context, managed, wanted map[string]bool) {
	if !x.use(ctx) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*withdrawTimeout)
	defer cancel()
	list, err := x.client.LifecycleV1alpha1().EvictionRequests(metav1.NamespaceAll).List(sctx,
		metav1.ListOptions{LabelSelector: EvictionRequestNodeLabel})
	if err != nil {
		x.log.WithError(err).Warn("cannot list edgedrain's EvictionRequests to delete those left behind")
		return
	}
	byNode := map[string][]types.NamespacedName{}
	for i := range list.Items {
		er := &list.Items[i]
		node := erNode(er)
		if !ours(er) || (!(managed[node] && !wanted[node]) && x.podExists(sctx, er)) {
			continue
		}
		byNode[node] = append(byNode[node], types.NamespacedName{Namespace: er.Namespace, Name: er.Name})
	}
	for node, refs := range byNode {
		n, err := x.deleteAll(sctx, refs, func() bool { return x.attemptRunning(node) })
		if err != nil {
			x.log.WithField("node", node).WithError(err).Warn("deleting EvictionRequests left behind failed")
		}
		if n > 0 {
			x.log.WithField("node", node).Infof("deleted %d EvictionRequest(s) left behind (their pod is gone, or their node is not being drained)", n)
		}
	}
}

// podExists reports whether er's pod (that UID) still exists; when in doubt, it does.
func (x *evictionRequests) podExists(ctx context.Context, er *lifecyclev1alpha1.EvictionRequest) bool {
	target := er.Spec.Target.Pod
	if target == nil || target.Name == "" {
		return false
	}
	pods, err := x.client.CoreV1().Pods(er.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", target.Name).String()})
	if err != nil {
		return true
	}
	for _, p := range pods.Items {
		if p.UID == target.UID {
			return true
		}
	}
	return false
}

// sweepEvictionRequests starts the sweep of the EvictionRequests left behind, in the background,
// from the drains the run resumed: those evicting (or about to) keep theirs. Called from the
// loop, after the resume.
func (e *Engine) sweepEvictionRequests(ctx context.Context) {
	x := e.ops.evictor.ers
	if !x.mayBeUsed() {
		return
	}
	managed, wanted := map[string]bool{}, map[string]bool{}
	nodes, _ := e.nodes.List(labels.Everything())
	for _, n := range nodes {
		managed[n.Name] = true
	}
	for _, node := range e.core.Nodes() {
		d, _ := e.core.Drain(node)
		switch d.Status.Status {
		case nodedrain.StatusStarting, nodedrain.StatusCordoned, nodedrain.StatusDrainRetrying:
			wanted[node] = true
		}
	}
	e.ops.wg.Add(1)
	go func() {
		defer e.ops.wg.Done()
		x.sweep(ctx, managed, wanted)
	}()
}
