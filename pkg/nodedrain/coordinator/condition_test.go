package coordinator

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The node's conditions follow its drain: EdgedrainMaintenance (reason: the status, message:
// the status's) and Kubernetes' lifecycle conditions — MaintenancePlanned while the request
// waits, DrainInProgress while evicting, Drained and MaintenanceInProgress at COMPLETE — next
// to the kubelet's own conditions, all removed once the node is idle. On the shared cluster,
// whose API server runs without the NodeLifecycleConditions gate.
func TestNodeConditionFollowsTheDrain(t *testing.T) {
	conditionsFollowTheDrain(t, newHarness(t, "condition", 3))
}

// The same with the NodeLifecycleConditions gate on (API server and controller manager).
func TestNodeConditionFollowsTheDrainWithTheGateOn(t *testing.T) {
	c := testenv.StartTestCluster(t, testenv.ClusterConfig{ControlPlaneConfig: testenv.ControlPlaneConfig{FeatureGates: "NodeLifecycleConditions=true"}})
	conditionsFollowTheDrain(t, newHarnessOn(t, c, "condition-gate", 3))
}

func conditionsFollowTheDrain(t *testing.T, h *harness) {
	target := h.deploy("web", 3, 1)
	other := h.nodes[0]
	if other == target {
		other = h.nodes[1]
	}
	h.run(h.config(h.c.Client))
	seen := watchConditions(t, h, target)
	seenOther := watchConditions(t, h, other)

	h.request(target, "r1", time.Now())
	st := h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	// The other node's request waits behind it (one drain at a time): planned, not in progress.
	h.request(other, "r2", time.Now())
	h.waitStatus(other, nodedrain.StatusRequested, 10*time.Second)
	require.Eventually(t, func() bool {
		return ourConditions(h.node(other)) == "EdgedrainMaintenance=REQUESTED MaintenancePlanned=EdgedrainRequested"
	}, 10*time.Second, 50*time.Millisecond, "the waiting node's conditions: %s", ourConditions(h.node(other)))
	// (Its message is the status's first; a new message alone waits conditionMessageEvery.)
	planned := findCondition(h.node(other), corev1.NodeMaintenancePlanned)
	assert.True(t, strings.HasPrefix(planned.Message, "edgedrain REQUESTED: waiting"), planned.Message)

	require.Eventually(t, func() bool {
		return ourConditions(h.node(target)) ==
			"Drained=EdgedrainDrained EdgedrainMaintenance=COMPLETE MaintenanceInProgress=EdgedrainMaintenance"
	}, 10*time.Second, 50*time.Millisecond, "conditions at COMPLETE: %s", ourConditions(h.node(target)))
	n := h.node(target)
	own := findCondition(n, NodeConditionType)
	assert.Equal(t, st.Message, own.Message)
	assert.False(t, own.LastTransitionTime.IsZero())
	drained := findCondition(n, corev1.NodeDrained)
	assert.Equal(t, "edgedrain COMPLETE: "+st.Message, drained.Message)
	assert.Equal(t, corev1.ConditionTrue, drained.Status)
	ready := findCondition(n, corev1.NodeReady)
	require.NotNil(t, ready, "the kubelet's Ready condition is kept")
	assert.Equal(t, corev1.ConditionTrue, ready.Status)

	h.withdraw(target)
	h.waitFor(target, 10*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs && s.ReturningSince.IsZero()
	})
	require.Eventually(t, func() bool { return ourConditions(h.node(target)) == "" }, 10*time.Second, 50*time.Millisecond,
		"conditions stay on an idle node: %s", ourConditions(h.node(target)))
	require.Eventually(t, func() bool { r := seen(); return len(r) > 1 && r[len(r)-1] == "" }, 10*time.Second, 20*time.Millisecond,
		"the watch did not see the conditions go: %v", seen())
	assert.True(t, containsWith(seen(), "DrainInProgress=EdgedrainDraining"), "the drain showed DrainInProgress: %q", seen())
	assert.True(t, containsWith(seen(), "EdgedrainMaintenance=CORDONED"), "the drain showed CORDONED: %q", seen())
	for _, s := range seen() {
		assert.False(t, strings.Contains(s, "Drained=") && strings.Contains(s, "DrainInProgress="),
			"drained and draining at once: %q", s)
	}

	// The waiting node goes in its turn: planned no more, then in progress.
	h.waitStatus(other, nodedrain.StatusComplete, 60*time.Second)
	require.Eventually(t, func() bool {
		return !strings.Contains(ourConditions(h.node(other)), "MaintenancePlanned") &&
			strings.Contains(ourConditions(h.node(other)), "MaintenanceInProgress=EdgedrainMaintenance")
	}, 10*time.Second, 50*time.Millisecond, "conditions at COMPLETE: %s", ourConditions(h.node(other)))
	assert.True(t, containsWith(seenOther(), "MaintenancePlanned=EdgedrainRequested"), "%q", seenOther())
}

// A node whose MaintenanceInProgress another writer set is not taken for maintenance: its
// request waits, saying whose condition holds it; the other writer's condition is left as it
// is; another node's request waits too, the one slot taken. Once the condition is cleared the
// drain goes.
func TestAnothersMaintenanceConditionHoldsTheDrain(t *testing.T) {
	h := newHarness(t, "condition-other", 3)
	target := h.deploy("web", 3, 1)
	second := h.nodes[0]
	if second == target {
		second = h.nodes[1]
	}
	patchCondition(t, h, target, map[string]any{"type": "MaintenanceInProgress", "status": "True",
		"reason": "FirmwareRollout", "message": "BIOS update by the vendor's agent"})
	h.run(h.config(h.c.Client))

	h.request(target, "r1", time.Now())
	st := h.waitFor(target, 10*time.Second, "held by the other maintenance", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, "set by another writer")
	})
	assert.Contains(t, st.Message, `MaintenanceInProgress condition was set by another writer (reason FirmwareRollout: "BIOS update by the vendor's agent")`)
	h.request(second, "r2", time.Now())
	st = h.waitFor(second, 10*time.Second, "waiting for the slot", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, "waiting:")
	})
	assert.Equal(t, "waiting: "+target+" in maintenance (max-concurrent-drains 1) (in another writer's maintenance by its MaintenanceInProgress condition: "+target+")", st.Message)
	require.Eventually(t, func() bool {
		return strings.Contains(ourConditions(h.node(target)), "MaintenancePlanned=EdgedrainRequested")
	}, 10*time.Second, 50*time.Millisecond, "%s", ourConditions(h.node(target)))
	theirs := findCondition(h.node(target), corev1.NodeMaintenanceInProgress)
	require.NotNil(t, theirs)
	assert.Equal(t, "FirmwareRollout", theirs.Reason, "the other writer's condition is left as it is")
	assert.False(t, h.node(target).Spec.Unschedulable, "not cordoned")

	patchCondition(t, h, target, map[string]any{"type": "MaintenanceInProgress", "$patch": "delete"})
	h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	require.Eventually(t, func() bool {
		return strings.Contains(ourConditions(h.node(target)), "MaintenanceInProgress=EdgedrainMaintenance")
	}, 10*time.Second, 50*time.Millisecond, "%s", ourConditions(h.node(target)))
}

// patchCondition patches one condition of node's status as another writer would.
func patchCondition(t *testing.T, h *harness, node string, cond map[string]any) {
	t.Helper()
	if _, ok := cond["lastTransitionTime"]; !ok && cond["$patch"] == nil {
		cond["lastTransitionTime"] = metav1.Now()
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	require.NoError(t, err)
	_, err = h.c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// ourConditions lists n's True conditions of the types edgedrain writes (by anyone), "Type=Reason" sorted.
func ourConditions(n *corev1.Node) string {
	var out []string
	for _, c := range n.Status.Conditions {
		for _, t := range conditionTypes {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				out = append(out, string(c.Type)+"="+c.Reason)
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// watchConditions watches node and records each new ourConditions it shows.
func watchConditions(t *testing.T, h *harness, node string) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := h.c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []string
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			s := ourConditions(n)
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func containsWith(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
