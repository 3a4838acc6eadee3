package policy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

func waitingOn(node string) []coordinator.Waiting {
	return []coordinator.Waiting{{Node: node, Request: nodedrain.NodeDrainRequest{Node: node, RequestID: "r1", RequestedBy: nodedrain.RequesterDeviceOp}}}
}

// A check made under an earlier policy does not admit a drain once the policy changed: it
// waits for a check under the new one (found by review: a new blocking selector was ignored
// for up to 3 × Every).
func TestVerdictOfAnEarlierPolicyDoesNotCount(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "batch", Labels: map[string]string{"app": "critical"}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	client := fake.NewClientset(policyMap("ns", "blockers:\n  podSelector: \"app=other\"\n"), pod)
	src, _, _ := runSource(t, client, "ns")
	ev, err := NewEvaluator(EvaluatorConfig{Source: src, Client: client, Every: time.Minute})
	require.NoError(t, err)
	w := waitingOn("n1")
	require.Equal(t, "checking", ev.Admission(w, time.Now()).Holds["n1"].Reason)
	ev.checkAll(context.Background())
	require.Empty(t, ev.Admission(w, time.Now()).Holds, "nothing blocks under the first policy")

	gen := src.State().Generation
	_, err = client.CoreV1().ConfigMaps("ns").Update(context.Background(), policyMap("ns", "blockers:\n  podSelector: \"app=critical\"\n"), metav1.UpdateOptions{})
	require.NoError(t, err)
	waitGeneration(t, src, gen+1)
	assert.Equal(t, "checking", ev.Admission(w, time.Now()).Holds["n1"].Reason, "the earlier check no longer admits")
	ev.checkAll(context.Background())
	h := ev.Admission(w, time.Now()).Holds["n1"]
	assert.Equal(t, "blockers", h.Reason)
	require.Len(t, h.Blockers, 1)
	assert.Equal(t, "batch", h.Blockers[0].Name)
}

// With --preflight=warn a prediction that fails is a warning, not a hold; with hold it holds.
func TestFailedPredictionWarnsOrHolds(t *testing.T) {
	for mode, held := range map[coordinator.Preflight]bool{coordinator.PreflightWarn: false, coordinator.PreflightHold: true} {
		t.Run(mode.String(), func(t *testing.T) {
			ev, err := NewEvaluator(EvaluatorConfig{Client: fake.NewClientset(), Every: time.Minute, Preflight: mode,
				Predict: func(context.Context, string, nodedrain.NodeDrainRequest) ([]nodedrain.Blocker, error) {
					return nil, assert.AnError
				}})
			require.NoError(t, err)
			w := waitingOn("n1")
			ev.Admission(w, time.Now())
			ev.checkAll(context.Background())
			ap := ev.Admission(w, time.Now())
			if held {
				assert.Contains(t, ap.Holds["n1"].Message, "failing closed")
				assert.Contains(t, ap.Holds["n1"].Message, assert.AnError.Error())
				return
			}
			assert.Empty(t, ap.Holds)
			assert.Contains(t, ap.Warnings["n1"].Blockers[0].Reason, "the pre-flight prediction failed")
		})
	}
}
