package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The responders of a pod's Evictions, read as the eviction attempt reads them: who holds the
// eviction, who does not, and odd objects that must not crash or hold anything.
func TestEvictionRequestResponders(t *testing.T) {
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	const uid = types.UID("0b6c2f1e-3f0a-4d7c-9a51-2f6a3c1d9e01")
	const kubevirt = "kubevirt.io/migration-controller"
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	eviction := func(name string, target types.UID, tr []lifecyclev1alpha1.TargetResponder, rs []lifecyclev1alpha1.ResponderStatus) *lifecyclev1alpha1.Eviction {
		return &lifecyclev1alpha1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.Time{Time: now.Add(-time.Minute)}},
			Spec:       lifecyclev1alpha1.EvictionSpec{Target: lifecyclev1alpha1.EvictionTarget{Pod: &lifecyclev1alpha1.EvictionPodReference{Name: "vm", UID: target}}},
			Status:     lifecyclev1alpha1.EvictionStatus{TargetResponders: tr, Responders: rs},
		}
	}
	responder := func(name string, prio int32, state lifecyclev1alpha1.ResponderStateType) lifecyclev1alpha1.TargetResponder {
		return lifecyclev1alpha1.TargetResponder{Name: name, Priority: ptr.To(prio), State: state}
	}
	imperative := lifecyclev1alpha1.EvictionResponderImperativeEviction
	active := func(rs ...lifecyclev1alpha1.ResponderStatus) *lifecyclev1alpha1.Eviction {
		return eviction("e", uid, []lifecyclev1alpha1.TargetResponder{
			responder(kubevirt, 10000, lifecyclev1alpha1.ResponderStateActive),
			responder(imperative, 100, lifecyclev1alpha1.ResponderStateInactive)}, rs)
	}
	migrating := lifecyclev1alpha1.ResponderStatus{Name: kubevirt, StartTime: at(90 * time.Second), HeartbeatTime: at(5 * time.Second),
		ExpectedCompletionTime: &metav1.Time{Time: now.Add(2 * time.Minute)}, Message: ptr.To("migrating to node-b")}

	tests := []struct {
		name      string
		evictions []*lifecyclev1alpha1.Eviction
		hold      []string // all in Hold; none: no hold
		silent    bool
	}{
		{name: "no Eviction"},
		{name: "a responder of the pod's own is active", evictions: []*lifecyclev1alpha1.Eviction{active(migrating, lifecyclev1alpha1.ResponderStatus{Name: imperative})},
			hold: []string{"responder " + kubevirt + " active: migrating to node-b", "started 1m30s ago", "last heartbeat 5s ago", "expects to complete in 2m0s"}},
		{name: "active, no heartbeat yet", evictions: []*lifecyclev1alpha1.Eviction{active(lifecyclev1alpha1.ResponderStatus{Name: kubevirt, StartTime: at(3 * time.Second)})},
			hold: []string{"responder " + kubevirt + " active (started 3s ago, no heartbeat yet)"}},
		{name: "active without a status of its own", evictions: []*lifecyclev1alpha1.Eviction{active()},
			hold: []string{"responder " + kubevirt + " active (no status reported)"}},
		{name: "completed: the imperative evictor's turn", evictions: []*lifecyclev1alpha1.Eviction{eviction("e", uid, []lifecyclev1alpha1.TargetResponder{
			responder(kubevirt, 10000, lifecyclev1alpha1.ResponderStateCompleted),
			responder(imperative, 100, lifecyclev1alpha1.ResponderStateActive)}, nil)}},
		{name: "only the imperative evictor", evictions: []*lifecyclev1alpha1.Eviction{eviction("e", uid, []lifecyclev1alpha1.TargetResponder{
			responder(imperative, 100, lifecyclev1alpha1.ResponderStateActive)}, nil)}},
		{name: "interrupted and cancelled", evictions: []*lifecyclev1alpha1.Eviction{eviction("e", uid, []lifecyclev1alpha1.TargetResponder{
			responder(kubevirt, 10000, lifecyclev1alpha1.ResponderStateInterrupted),
			responder("db.example/handover", 5000, lifecyclev1alpha1.ResponderStateCanceled)}, nil)}},
		{name: "silent past the deadline and its margin", evictions: []*lifecyclev1alpha1.Eviction{active(lifecyclev1alpha1.ResponderStatus{Name: kubevirt,
			StartTime: at(2 * time.Hour), HeartbeatTime: at(responderSilentAfter + time.Minute)})}, silent: true},
		{name: "past the API's deadline, within the margin: still waited for", evictions: []*lifecyclev1alpha1.Eviction{active(lifecyclev1alpha1.ResponderStatus{Name: kubevirt,
			StartTime: at(time.Hour), HeartbeatTime: at(responderHeartbeatDeadline + time.Minute)})},
			hold: []string{"last heartbeat 21m0s ago"}},
		{name: "another pod's Eviction", evictions: []*lifecyclev1alpha1.Eviction{eviction("e", "another-uid", []lifecyclev1alpha1.TargetResponder{
			responder(kubevirt, 10000, lifecyclev1alpha1.ResponderStateActive)}, []lifecyclev1alpha1.ResponderStatus{migrating})}},
		{name: "an Eviction that ended (TargetEvicted)", evictions: func() []*lifecyclev1alpha1.Eviction {
			ev := active(migrating)
			ev.Status.Conditions = []metav1.Condition{{Type: string(lifecyclev1alpha1.EvictionConditionTargetEvicted), Status: metav1.ConditionTrue}}
			return []*lifecyclev1alpha1.Eviction{ev}
		}()},
		{name: "nil and odd objects", evictions: []*lifecyclev1alpha1.Eviction{nil, {}, eviction("e", uid, nil, nil),
			eviction("f", uid, []lifecyclev1alpha1.TargetResponder{{State: lifecyclev1alpha1.ResponderStateActive}}, nil)}},
		{name: "an active responder with no times at all: its Eviction's age counts", evictions: func() []*lifecyclev1alpha1.Eviction {
			ev := active(lifecyclev1alpha1.ResponderStatus{Name: kubevirt})
			ev.CreationTimestamp = metav1.Time{Time: now.Add(-time.Hour)}
			return []*lifecyclev1alpha1.Eviction{ev}
		}(), silent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readResponders(tt.evictions, uid, now)
			if len(tt.hold) == 0 {
				assert.Empty(t, got.Hold, "the pod is held")
				assert.Empty(t, got.Responder)
			} else {
				assert.Equal(t, kubevirt, got.Responder)
				for _, want := range tt.hold {
					assert.Contains(t, got.Hold, want)
				}
			}
			if tt.silent {
				assert.True(t, strings.HasPrefix(got.Silent, "responder "+kubevirt), got.Silent)
				assert.Contains(t, got.Silent, "no longer waited for")
			} else {
				assert.Empty(t, got.Silent)
			}
		})
	}
}

// A node name too long for a label value gets a digest of it, which is a valid label value and
// the same every time.
func TestEvictionRequestNodeLabel(t *testing.T) {
	assert.Equal(t, "node-1", nodeLabelValue("node-1"))
	long := strings.Repeat("a", 70) + ".example.com"
	got := nodeLabelValue(long)
	assert.Equal(t, got, nodeLabelValue(long))
	assert.LessOrEqual(t, len(got), 63)
	assert.True(t, strings.HasPrefix(got, "sha256-"))
}
