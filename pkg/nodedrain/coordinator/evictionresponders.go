package coordinator

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// responderHeartbeatDeadline is the Eviction API's deadline for an active responder's
	// heartbeat (its types' documentation; the API server's status validation uses the same):
	// past it, the eviction controller would interrupt the responder and pass to the next one.
	responderHeartbeatDeadline = 20 * time.Minute
	// responderSilentAfter is when edgedrain stops waiting for an active responder that gave no
	// sign of life (heartbeat, else start): the deadline and a generous margin, since Kubernetes
	// v1.37 runs no controller that would interrupt it, and a responder that died would otherwise
	// hold the drain until every attempt failed.
	responderSilentAfter = responderHeartbeatDeadline + 10*time.Minute
)

// responders is what the Evictions of a pod say about evicting it now.
type responders struct {
	// Hold is why the pod must not be evicted yet: a responder other than the imperative evictor
	// is active ("" none).
	Hold string
	// Responder names the responder Hold waits for.
	Responder string
	// Silent reports an active responder that stopped heartbeating and no longer counts.
	Silent string
}

// readResponders reads the Evictions of the pod whose UID is uid (others are ignored, as are nil
// and odd objects). A responder of the pod's own that is Active holds its eviction; the
// imperative evictor (the default responder, which would evict through the eviction API as
// edgedrain does), one that completed, was cancelled or interrupted, and an Eviction that
// reached its end (TargetEvicted or Failed) do not. An Active responder silent for longer than
// responderSilentAfter does not either, and is reported.
func readResponders(evictions []*lifecyclev1alpha1.Eviction, uid types.UID, now time.Time) responders {
	var out responders
	evictions = slices.Clone(evictions) // (sorted here: the caller's order is the caller's)
	sort.SliceStable(evictions, func(i, j int) bool { return nameOf(evictions[i]) < nameOf(evictions[j]) })
	for _, ev := range evictions {
		if ev == nil || ev.Spec.Target.Pod == nil || ev.Spec.Target.Pod.UID != uid || ev.DeletionTimestamp != nil ||
			meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted)) ||
			meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed)) {
			continue
		}
		for _, tr := range ev.Status.TargetResponders {
			if tr.State != lifecyclev1alpha1.ResponderStateActive || tr.Name == "" ||
				tr.Name == lifecyclev1alpha1.EvictionResponderImperativeEviction {
				continue
			}
			st := responderStatus(ev, tr.Name)
			lastSign, what := signOfLife(st, ev)
			if !lastSign.IsZero() && now.Sub(lastSign) > responderSilentAfter {
				if out.Silent == "" {
					out.Silent = fmt.Sprintf("responder %s of Eviction %s/%s is Active but silent for %s (%s; the API's heartbeat "+
						"deadline is %s): no longer waited for, evicting directly", tr.Name, ev.Namespace, ev.Name,
						ago(now, lastSign), what, responderHeartbeatDeadline)
				}
				continue
			}
			if out.Hold == "" {
				out.Hold, out.Responder = activeReason(tr.Name, st, now), tr.Name
			}
		}
	}
	return out
}

func nameOf(ev *lifecyclev1alpha1.Eviction) string {
	if ev == nil {
		return ""
	}
	return ev.Namespace + "/" + ev.Name
}

// responderStatus is the status the responder name reports in ev, nil if none.
func responderStatus(ev *lifecyclev1alpha1.Eviction, name string) *lifecyclev1alpha1.ResponderStatus {
	for i := range ev.Status.Responders {
		if ev.Status.Responders[i].Name == name {
			return &ev.Status.Responders[i]
		}
	}
	return nil
}

// signOfLife is the responder's last sign of life: its heartbeat, else its start, else (an odd
// object: the API requires a start for an active responder) the Eviction's creation.
func signOfLife(st *lifecyclev1alpha1.ResponderStatus, ev *lifecyclev1alpha1.Eviction) (time.Time, string) {
	switch {
	case st != nil && st.HeartbeatTime != nil:
		return st.HeartbeatTime.Time, "last heartbeat"
	case st != nil && st.StartTime != nil:
		return st.StartTime.Time, "started, no heartbeat since"
	}
	return ev.CreationTimestamp.Time, "no start time; Eviction created"
}

// activeReason is the blocker's reason for a pod an active responder holds: "responder NAME
// active", its message, and how long since it started and last reported.
func activeReason(name string, st *lifecyclev1alpha1.ResponderStatus, now time.Time) string {
	var b strings.Builder
	b.WriteString("responder " + name + " active")
	if st == nil {
		b.WriteString(" (no status reported)")
		return b.String()
	}
	if st.Message != nil && strings.TrimSpace(*st.Message) != "" {
		b.WriteString(": " + strings.TrimSpace(*st.Message))
	}
	var when []string
	if t := timeOf(st.StartTime); !t.IsZero() {
		when = append(when, "started "+ago(now, t)+" ago")
	}
	if t := timeOf(st.HeartbeatTime); !t.IsZero() {
		when = append(when, "last heartbeat "+ago(now, t)+" ago")
	} else {
		when = append(when, "no heartbeat yet")
	}
	if t := timeOf(st.ExpectedCompletionTime); !t.IsZero() {
		if t.After(now) {
			when = append(when, "expects to complete in "+t.Sub(now).Round(time.Second).String())
		} else {
			when = append(when, "expected to complete "+ago(now, t)+" ago")
		}
	}
	b.WriteString(" (" + strings.Join(when, ", ") + ")")
	return b.String()
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// ago is how long before now t was, to the second (never negative: clocks differ).
func ago(now, t time.Time) string {
	return max(now.Sub(t), 0).Round(time.Second).String()
}
