package policy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func testPod(ns, name, node string, phase corev1.PodPhase, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func podBlocker(ns, name, sel string) nodedrain.Blocker {
	return nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: ns, Name: name,
		Reason: "matches the blocking pod selector " + sel}
}

func TestPodBlockers(t *testing.T) {
	backup := map[string]string{"edgedrain.io/blocks": "true", "app": "backup"}
	web := map[string]string{"app": "web"}
	deleting := testPod("ops", "deleting", "n1", corev1.PodRunning, backup)
	deleting.DeletionTimestamp = &metav1.Time{}
	pods := []*corev1.Pod{
		testPod("ops", "zeta", "n1", corev1.PodRunning, backup),
		testPod("apps", "web-1", "n1", corev1.PodRunning, web),
		testPod("ops", "alpha", "n1", corev1.PodPending, backup),
		testPod("db", "dump", "n1", corev1.PodUnknown, backup),
		testPod("ops", "done", "n1", corev1.PodSucceeded, backup),
		testPod("ops", "crashed", "n1", corev1.PodFailed, backup),
		testPod("ops", "elsewhere", "n2", corev1.PodRunning, backup),
		testPod("ops", "unscheduled", "", corev1.PodPending, backup),
		deleting,
		nil,
	}
	const selText = "edgedrain.io/blocks=true"
	sel, err := labels.Parse(selText)
	require.NoError(t, err)

	cases := []struct {
		name    string
		node    string
		sel     labels.Selector
		selText string
		want    []nodedrain.Blocker
	}{{
		name: "running, pending, unknown and deleting pods on the node that match block, sorted",
		node: "n1", sel: sel, selText: selText,
		want: []nodedrain.Blocker{
			podBlocker("db", "dump", selText),
			podBlocker("ops", "alpha", selText),
			podBlocker("ops", "deleting", selText),
			podBlocker("ops", "zeta", selText),
		},
	}, {
		name: "another node's pods only",
		node: "n2", sel: sel, selText: selText,
		want: []nodedrain.Blocker{podBlocker("ops", "elsewhere", selText)},
	}, {
		name: "no selector blocks nothing",
		node: "n1", sel: nil, selText: "",
	}, {
		name: "a selector that matches nothing blocks nothing",
		node: "n1", sel: labels.Nothing(), selText: "nothing",
	}, {
		name: "no node name matches no pod, not the unscheduled ones",
		node: "", sel: sel, selText: selText,
	}, {
		name: "a node with no pods",
		node: "n3", sel: sel, selText: selText,
	}, {
		name: "set-based selector; the reason shows the selector's own text when none is given",
		node: "n1", sel: mustSelector(t, "app in (web)"), selText: "",
		want: []nodedrain.Blocker{podBlocker("apps", "web-1", "app in (web)")},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := PodBlockers(pods, tc.node, tc.sel, tc.selText)
			assert.Equal(t, tc.want, got)
			for _, b := range got {
				require.NoError(t, nodedrain.NodeDrainStatus{Node: "n1", Status: 1, Blockers: []nodedrain.Blocker{b}}.Validate())
			}
		})
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	require.NoError(t, err)
	return sel
}

func TestPodBlockersCapsAtMaxBlockers(t *testing.T) {
	sel := mustSelector(t, "block=yes")
	for _, n := range []int{nodedrain.MaxBlockers, nodedrain.MaxBlockers + 1, nodedrain.MaxBlockers + 250} {
		t.Run(fmt.Sprint(n, " pods"), func(t *testing.T) {
			pods := make([]*corev1.Pod, n)
			for i := range pods {
				pods[i] = testPod("ns", fmt.Sprintf("p%05d", i), "n1", corev1.PodRunning, map[string]string{"block": "yes"})
			}
			got := PodBlockers(pods, "n1", sel, "block=yes")
			require.Len(t, got, nodedrain.MaxBlockers)
			if n == nodedrain.MaxBlockers {
				assert.Equal(t, podBlocker("ns", fmt.Sprintf("p%05d", n-1), "block=yes"), got[len(got)-1])
			} else {
				assert.Equal(t, nodedrain.Blocker{Kind: nodedrain.BlockerPod,
					Name:   fmt.Sprintf("and %d more pods", n-(nodedrain.MaxBlockers-1)),
					Reason: "also match the blocking pod selector block=yes"}, got[len(got)-1])
				assert.Equal(t, "p00998", got[len(got)-2].Name)
			}
			require.NoError(t, nodedrain.NodeDrainStatus{Node: "n1", Status: 1, Blockers: got}.Validate())
		})
	}
}
