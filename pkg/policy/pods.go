package policy

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// PodBlockers returns a blocker for every pod bound to node (spec.nodeName) that has not ended
// (phase Succeeded or Failed) and whose labels match sel, sorted by namespace and name; selText is
// the selector as the operator wrote it, for the reason (empty: sel's own rendering). A nil sel
// blocks nothing. A pod being deleted still blocks until it has ended: it may still be running.
// At most nodedrain.MaxBlockers are returned; past that the last one says how many more pods match.
func PodBlockers(pods []*corev1.Pod, node string, sel labels.Selector, selText string) []nodedrain.Blocker {
	if sel == nil || node == "" {
		return nil
	}
	if selText == "" {
		selText = sel.String()
	}
	reason := "matches the blocking pod selector " + selText
	var out []nodedrain.Blocker
	for _, pod := range pods {
		if pod == nil || pod.Spec.NodeName != node {
			continue
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, nodedrain.Blocker{
			Kind:      nodedrain.BlockerPod,
			Namespace: pod.Namespace,
			Name:      pod.Name,
			Reason:    reason,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return capBlockers(out, nodedrain.MaxBlockers, func(more int) nodedrain.Blocker {
		return nodedrain.Blocker{
			Kind:   nodedrain.BlockerPod,
			Name:   fmt.Sprintf("and %d more pods", more),
			Reason: "also match the blocking pod selector " + selText,
		}
	})
}

// capBlockers keeps bs within limit entries: past that, the first limit-1 and a summary of the rest.
func capBlockers(bs []nodedrain.Blocker, limit int, summary func(more int) nodedrain.Blocker) []nodedrain.Blocker {
	if len(bs) <= limit {
		return bs
	}
	more := len(bs) - (limit - 1)
	return append(bs[:limit-1:limit-1], summary(more))
}
