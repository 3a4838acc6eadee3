package nodedrain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func drainIn(status DrainStatus, node string, at time.Duration) Drain {
	r := &NodeDrainRequest{Node: node, RequestID: node + "-r", RequestedAt: t0.Add(at), RequestedBy: RequesterDeviceOp}
	return Drain{Status: NodeDrainStatus{Node: node, Status: status, RequestID: r.RequestID}, Request: r}
}

func nodes(names ...string) []NodeInfo {
	out := make([]NodeInfo, len(names))
	for i, n := range names {
		out[i] = NodeInfo{Name: n, Ready: true, Schedulable: true}
	}
	return out
}

func TestAdmitOldestFirstWithinLimit(t *testing.T) {
	drains := map[string]Drain{
		"c": drainIn(StatusRequested, "c", 1*time.Second),
		"a": drainIn(StatusRequested, "a", 3*time.Second),
		"b": drainIn(StatusRequested, "b", 2*time.Second),
		"d": {Status: NodeDrainStatus{Node: "d", Status: StatusNotRequested}},
	}
	a := Admit(drains, nodes("a", "b", "c", "d"), 1)
	assert.Equal(t, []string{"c"}, a.Admit)
	assert.Contains(t, a.Queued["b"], "c in maintenance")
	assert.NotContains(t, a.Queued["b"], "behind")
	assert.Contains(t, a.Queued["a"], "queued behind b")
	assert.False(t, a.WholeCluster)

	a = Admit(drains, nodes("a", "b", "c", "d"), 2)
	assert.Equal(t, []string{"c", "b"}, a.Admit)
}

func TestAdmitCountsRunningAndCompleteDrains(t *testing.T) {
	for _, holding := range []DrainStatus{StatusStarting, StatusCordoned, StatusDrainRetrying, StatusComplete} {
		t.Run(holding.String(), func(t *testing.T) {
			drains := map[string]Drain{
				"a": drainIn(holding, "a", 0),
				"b": drainIn(StatusRequested, "b", time.Second),
			}
			a := Admit(drains, nodes("a", "b", "c"), 1)
			assert.Empty(t, a.Admit)
			assert.Contains(t, a.Queued["b"], "a in maintenance")
		})
	}
	t.Run("failed drains free the slot", func(t *testing.T) {
		drains := map[string]Drain{"a": drainIn(StatusFailedDrain, "a", 0), "b": drainIn(StatusRequested, "b", time.Second)}
		assert.Equal(t, []string{"b"}, Admit(drains, nodes("a", "b", "c"), 1).Admit)
	})
}

func TestAdmitNotSupported(t *testing.T) {
	t.Run("single node", func(t *testing.T) {
		a := Admit(map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}, nodes("a"), 1)
		assert.Empty(t, a.Admit)
		assert.Contains(t, a.NotSupported["a"], "no other Ready, schedulable node")
	})
	t.Run("other nodes cordoned or not ready", func(t *testing.T) {
		ns := []NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b", Ready: false, Schedulable: true}, {Name: "c", Ready: true}}
		a := Admit(map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}, ns, 1)
		assert.Contains(t, a.NotSupported, "a")
	})
	t.Run("unknown node waits", func(t *testing.T) {
		a := Admit(map[string]Drain{"x": drainIn(StatusRequested, "x", 0)}, nodes("a", "b"), 1)
		assert.Contains(t, a.Queued["x"], "not (yet) in the cluster")
	})
}

// A planned whole-cluster shutdown: every node asks at once, one drain at a time.
func TestWholeClusterShutdownDoesNotDeadlock(t *testing.T) {
	drains := map[string]Drain{
		"a": drainIn(StatusRequested, "a", 0),
		"b": drainIn(StatusRequested, "b", time.Second),
		"c": drainIn(StatusRequested, "c", 2*time.Second),
	}
	ns := nodes("a", "b", "c")
	a := Admit(drains, ns, 1)
	assert.True(t, a.WholeCluster)
	assert.Equal(t, []string{"a"}, a.Admit)

	// a completes and is still up: it holds its slot.
	drains["a"] = drainIn(StatusComplete, "a", 0)
	ns[0].Schedulable = false
	assert.Empty(t, Admit(drains, ns, 1).Admit)
	// a goes down: b may start.
	ns[0].Ready = false
	assert.Equal(t, []string{"b"}, Admit(drains, ns, 1).Admit)
	// b completes and goes down: c is the last node up, nothing to drain to.
	drains["b"] = drainIn(StatusComplete, "b", time.Second)
	ns[1].Ready, ns[1].Schedulable = false, false
	a = Admit(drains, ns, 1)
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.NotSupported["c"], "whole-cluster shutdown")
}

func TestRebootOutsideWholeClusterHoldsSlotWhileDown(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusComplete, "a", 0), "b": drainIn(StatusRequested, "b", time.Second)}
	ns := nodes("a", "b", "c")
	ns[0].Ready = false // rebooting
	a := Admit(drains, ns, 1)
	assert.False(t, a.WholeCluster)
	assert.Empty(t, a.Admit, "b must wait until a is back and withdraws")
}
