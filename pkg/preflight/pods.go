package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// unmanagedReason is the blocker reason of a pod no controller manages, which the drain may not
// evict.
const unmanagedReason = "not managed by a controller; --evict-unmanaged-pods=false"

// podBlockers returns the pods on node a drain would evict but could not now, and notes. The
// pods are chosen as the coordinator's eviction chooses them, by kubectl's drain filters
// (DaemonSet and mirror pods stay); finished pods and pods already being deleted go whatever
// their budgets say. A pod blocks when no controller manages it and evictUnmanaged is false, or
// when the eviction API would refuse it now: its PodDisruptionBudget allows no disruption, or
// more than one budget selects it.
func podBlockers(ctx context.Context, client kubernetes.Interface, node string, evictUnmanaged bool, vms VMPredictor) ([]nodedrain.Blocker, []string, error) {
	// Force lists the pods no controller manages (and those of deleted DaemonSets) too, so
	// that each is named here instead of failing the whole list as the drain would.
	helper := &drain.Helper{Ctx: ctx, Client: client, Force: true, GracePeriodSeconds: -1,
		IgnoreAllDaemonSets: true, DeleteEmptyDirData: true, Out: io.Discard, ErrOut: io.Discard}
	list, errs := helper.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("list the pods a drain of node %s would evict: %w", node, errors.Join(errs...))
	}
	budgets := &budgetReader{client: client, byNS: map[string][]policyv1.PodDisruptionBudget{}}
	var vmBlockers map[string]string
	var notes []string
	if vms != nil {
		var err error
		if vmBlockers, notes, err = vms.Predict(ctx, list.Pods()); err != nil {
			return nil, nil, fmt.Errorf("predict the VMs on node %s: %w", node, err)
		}
	}
	var out []nodedrain.Blocker
	evicted := 0
	for _, pod := range list.Pods() {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || pod.DeletionTimestamp != nil {
			continue
		}
		evicted++
		var reasons []string
		if !evictUnmanaged {
			reasons = append(reasons, unmanaged(pod)...)
		}
		why, err := budgets.refusal(ctx, &pod)
		if err != nil {
			return nil, nil, err
		}
		if why != "" {
			reasons = append(reasons, why)
		}
		if why := vmBlockers[pod.Namespace+"/"+pod.Name]; why != "" {
			reasons = append(reasons, why)
		}
		if len(reasons) > 0 {
			out = append(out, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: pod.Namespace, Name: pod.Name,
				Reason: strings.Join(reasons, "; ")})
		}
	}
	notes = append([]string{fmt.Sprintf("%d pod(s) would be evicted", evicted)}, notes...)
	return out, append(notes, budgets.oneByOne()...), nil
}

// unmanaged says why pod blocks when unmanaged pods may not be evicted: no controller, or a
// DaemonSet that is gone (kubectl's drain keeps the pods of a DaemonSet that exists).
func unmanaged(pod corev1.Pod) []string {
	ref := metav1.GetControllerOf(&pod)
	switch {
	case ref == nil:
		return []string{unmanagedReason}
	case ref.Kind == "DaemonSet" && ref.APIVersion == "apps/v1":
		return []string{fmt.Sprintf("its DaemonSet %s no longer exists; --evict-unmanaged-pods=false", ref.Name)}
	}
	return nil
}

// budgetReader reads the PodDisruptionBudgets of each namespace once, and counts the pods of
// the node each budget must let go.
type budgetReader struct {
	client kubernetes.Interface
	byNS   map[string][]policyv1.PodDisruptionBudget
	uses   map[*policyv1.PodDisruptionBudget]int
}

// refusal says why the eviction API would refuse to evict pod now because of its budgets, as
// the API server decides (pkg/registry/core/pod/storage/eviction.go), or "". A pending pod is
// evicted regardless, and an unready one when its budget lets unhealthy pods go.
func (b *budgetReader) refusal(ctx context.Context, pod *corev1.Pod) (string, error) {
	pdbs, ok := b.byNS[pod.Namespace]
	if !ok {
		list, err := b.client.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", fmt.Errorf("list the PodDisruptionBudgets of namespace %s: %w", pod.Namespace, err)
		}
		pdbs = list.Items
		b.byNS[pod.Namespace] = pdbs
	}
	var matching []*policyv1.PodDisruptionBudget
	for i := range pdbs {
		// policy/v1: an empty selector selects every pod of the namespace, a missing one none.
		sel, err := metav1.LabelSelectorAsSelector(pdbs[i].Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) {
			matching = append(matching, &pdbs[i])
		}
	}
	switch {
	case len(matching) == 0 || pod.Status.Phase == corev1.PodPending:
		return "", nil
	case len(matching) > 1:
		names := make([]string, len(matching))
		for i, pdb := range matching {
			names[i] = pdb.Namespace + "/" + pdb.Name
		}
		sort.Strings(names)
		return fmt.Sprintf("selected by more than one PodDisruptionBudget (%s): the eviction API refuses such pods", strings.Join(names, ", ")), nil
	}
	pdb := matching[0]
	if !podutils.IsPodReady(pod) && (unhealthyAlwaysAllowed(pdb) || (pdb.Status.DesiredHealthy > 0 && pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy)) {
		return "", nil
	}
	if pdb.Status.DisruptionsAllowed <= 0 {
		return fmt.Sprintf("PodDisruptionBudget %s/%s allows %d disruptions now (needs %d healthy, has %d)",
			pdb.Namespace, pdb.Name, pdb.Status.DisruptionsAllowed, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy), nil
	}
	if b.uses == nil {
		b.uses = map[*policyv1.PodDisruptionBudget]int{}
	}
	b.uses[pdb]++
	return "", nil
}

// oneByOne notes the budgets that let some but not all of the node's pods go at once: the drain
// waits for replacements to be ready between them.
func (b *budgetReader) oneByOne() []string {
	var out []string
	for pdb, n := range b.uses {
		if allowed := int(pdb.Status.DisruptionsAllowed); n > allowed {
			out = append(out, fmt.Sprintf("PodDisruptionBudget %s/%s allows %d disruption(s) now and selects %d pods on this node: they go as their replacements become ready",
				pdb.Namespace, pdb.Name, allowed, n))
		}
	}
	sort.Strings(out)
	return out
}

func unhealthyAlwaysAllowed(pdb *policyv1.PodDisruptionBudget) bool {
	p := pdb.Spec.UnhealthyPodEvictionPolicy
	return p != nil && *p == policyv1.AlwaysAllow
}
