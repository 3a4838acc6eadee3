package chaos

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// A kubelet renews its node's Lease in kube-node-lease every 10 s, and makes it again when it is
// gone (deleted with its Node). kwok v0.8.0 does not: once the Lease it renews is deleted, it
// keeps updating it by the old object's UID and fails for ever, so the node lifecycle controller
// takes the node NotReady every 40 s and kwok takes it Ready again — a node flapping for the rest
// of the run, whose return gate then never sees it healthy (seen after the Node deletions of
// seed 77's 30-minute run). The harness renews the Leases of the machines that are up, as their
// kubelets would; kwok's own renewals go on beside.

// leaseRenewal is how often a kubelet renews its node's Lease (its default).
const leaseRenewal = 10 * time.Second

// keepLeases renews, until ctx ends, the Lease of every node whose machine is up and whose Node
// exists, making it (owned by the Node) when it is missing.
func (w *world) keepLeases(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for _, a := range w.agents {
			if !a.machineDown.Load() {
				w.renewLease(ctx, a.node)
			}
		}
	}, leaseRenewal)
}

// renewLease renews node's Lease once; an error (the API restarting, a conflict with kwok's
// renewal) waits for the next round.
func (w *world) renewLease(ctx context.Context, node string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leases := w.c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err := w.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return // no Node (deleted, not registered again yet): no Lease either
		}
		_, _ = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return
	}
	if err != nil {
		return
	}
	lease.Spec.RenewTime = &now
	_, _ = leases.Update(ctx, lease, metav1.UpdateOptions{})
}
