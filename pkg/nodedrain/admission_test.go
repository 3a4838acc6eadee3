package nodedrain

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		assert.Empty(t, a.Queued)
		assert.True(t, strings.HasPrefix(a.NotSupported["a"], "single-node cluster"), a.NotSupported["a"])
		assert.False(t, a.WholeCluster)
	})
	t.Run("single node declaring a cluster shutdown", func(t *testing.T) {
		a := Admit(map[string]Drain{"a": declaring(drainIn(StatusRequested, "a", 0))}, nodes("a"), 1)
		assert.False(t, a.WholeCluster, "one node is no whole-cluster shutdown")
		assert.True(t, strings.HasPrefix(a.NotSupported["a"], "single-node cluster"), a.NotSupported["a"])
	})
	t.Run("other nodes cordoned or not ready: the drain waits", func(t *testing.T) {
		ns := []NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b", Ready: false, Schedulable: true}, {Name: "c", Ready: true}}
		a := Admit(map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}, ns, 1)
		assert.Empty(t, a.Admit)
		assert.Empty(t, a.NotSupported, "never NOTSUPPORTED while other nodes exist")
		assert.Equal(t, "waiting: no other Ready, schedulable node can take the workloads now", a.Queued["a"])
	})
	t.Run("two nodes, the other NotReady: queued, not NOTSUPPORTED", func(t *testing.T) {
		ns := nodes("a", "b")
		ns[1].Ready = false
		a := Admit(map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}, ns, 2)
		assert.Empty(t, a.Admit)
		assert.Empty(t, a.NotSupported)
		assert.Contains(t, a.Queued["a"], "no other Ready, schedulable node")
		// b is back: a may start.
		ns[1].Ready = true
		a = Admit(map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}, ns, 2)
		assert.Equal(t, []string{"a"}, a.Admit)
	})
	t.Run("the other node in maintenance: queued behind it even with room under the limit", func(t *testing.T) {
		drains := map[string]Drain{"a": drainIn(StatusCordoned, "a", 0), "b": drainIn(StatusRequested, "b", time.Second)}
		a := Admit(drains, nodes("a", "b"), 2)
		assert.Empty(t, a.Admit)
		assert.Empty(t, a.NotSupported)
		assert.Contains(t, a.Queued["b"], "no other Ready, schedulable node")
	})
	t.Run("unknown node waits", func(t *testing.T) {
		a := Admit(map[string]Drain{"x": drainIn(StatusRequested, "x", 0)}, nodes("a", "b"), 1)
		assert.Contains(t, a.Queued["x"], "not (yet) in the cluster")
	})
}

// declaring makes d's request declare a planned whole-cluster shutdown.
func declaring(d Drain) Drain {
	r := *d.Request
	r.Context = ClusterShutdownContext
	d.Request = &r
	return d
}

// The normal kernel-update day: every node asks at once with an ordinary context. That is no
// whole-cluster shutdown: each node is drained in turn, within max-concurrent, and none goes
// down undrained.
func TestEveryNodeAskingIsNotAWholeClusterShutdown(t *testing.T) {
	drains := map[string]Drain{}
	for i, n := range []string{"a", "b", "c"} {
		d := drainIn(StatusRequested, n, time.Duration(i)*time.Second)
		d.Request.Context = "reboot"
		drains[n] = d
	}
	ns := nodes("a", "b", "c")
	a := Admit(drains, ns, 1)
	assert.False(t, a.WholeCluster)
	assert.Equal(t, []string{"a"}, a.Admit)
	assert.Empty(t, a.NotSupported)
	assert.Contains(t, a.Queued["b"], "a in maintenance")
	assert.Contains(t, a.Queued["c"], "queued behind b")

	// a is drained and reboots: it holds its slot while down, nobody else starts.
	drains["a"] = Drain{Status: NodeDrainStatus{Node: "a", Status: StatusComplete, RequestID: "a-r"}, Request: drains["a"].Request}
	ns[0].Ready, ns[0].Schedulable = false, false
	a = Admit(drains, ns, 1)
	assert.False(t, a.WholeCluster)
	assert.Empty(t, a.Admit)
	assert.Empty(t, a.NotSupported)
	assert.Len(t, a.Queued, 2)

	// a is back and withdraws: b starts; c waits, and is never told to go down undrained.
	drains["a"] = Drain{Status: NodeDrainStatus{Node: "a", Status: StatusNotRequested, RequestID: "a-r"}}
	ns[0].Ready, ns[0].Schedulable = true, true
	a = Admit(drains, ns, 1)
	assert.Equal(t, []string{"b"}, a.Admit)
	assert.Empty(t, a.NotSupported)
	assert.Contains(t, a.Queued["c"], "b in maintenance")

	// With room for two at once, a and b drain (c can take their workloads) and c waits for a slot.
	drains["a"] = drainIn(StatusRequested, "a", 0)
	drains["a"].Request.Context = "reboot"
	a = Admit(drains, nodes("a", "b", "c"), 2)
	assert.False(t, a.WholeCluster)
	assert.Equal(t, []string{"a", "b"}, a.Admit)
	assert.Empty(t, a.NotSupported)
	assert.Equal(t, "waiting: a, b in maintenance (max-concurrent-drains 2)", a.Queued["c"])
	// a and b draining (admitted earlier) with room for a third: c still waits, for a node that
	// can take its workloads, and is not NOTSUPPORTED without a declared shutdown.
	drains["a"], drains["b"] = drainIn(StatusStarting, "a", 0), drainIn(StatusCordoned, "b", time.Second)
	a = Admit(drains, nodes("a", "b", "c"), 3)
	assert.False(t, a.WholeCluster)
	assert.Empty(t, a.Admit)
	assert.Empty(t, a.NotSupported)
	assert.Equal(t, "waiting: no other Ready, schedulable node can take the workloads now", a.Queued["c"])
}

// A declared whole-cluster shutdown: every node asks at once with context "cluster-shutdown",
// one drain at a time, and it cannot deadlock.
func TestWholeClusterShutdownDoesNotDeadlock(t *testing.T) {
	drains := map[string]Drain{
		"a": declaring(drainIn(StatusRequested, "a", 0)),
		"b": declaring(drainIn(StatusRequested, "b", time.Second)),
		"c": declaring(drainIn(StatusRequested, "c", 2*time.Second)),
	}
	complete := func(name string) Drain {
		d := drains[name]
		d.Status.Status = StatusComplete
		return d
	}
	ns := nodes("a", "b", "c")
	a := Admit(drains, ns, 1)
	assert.True(t, a.WholeCluster)
	assert.Equal(t, []string{"a"}, a.Admit)

	// a completes and is still up: it holds its slot.
	drains["a"] = complete("a")
	ns[0].Schedulable = false
	assert.Empty(t, Admit(drains, ns, 1).Admit)
	// a goes down: b may start.
	ns[0].Ready = false
	assert.Equal(t, []string{"b"}, Admit(drains, ns, 1).Admit)
	// b completes and goes down: c is the last node up, nothing to drain to.
	drains["b"] = complete("b")
	ns[1].Ready, ns[1].Schedulable = false, false
	a = Admit(drains, ns, 1)
	assert.True(t, a.WholeCluster)
	assert.Empty(t, a.Admit)
	assert.Empty(t, a.Queued)
	assert.Contains(t, a.NotSupported["c"], "declared whole-cluster shutdown")

	// One node whose request does not declare it: no whole-cluster shutdown, c waits.
	r := *drains["a"].Request
	r.Context = "reboot"
	drains["a"] = Drain{Status: drains["a"].Status, Request: &r}
	a = Admit(drains, ns, 1)
	assert.False(t, a.WholeCluster)
	assert.Empty(t, a.NotSupported)
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.Queued["c"], "a, b in maintenance", "a and b hold their slots while down outside a declared shutdown")
}

// The declaration outlasts the NOTSUPPORTED that tells the last node up to proceed: a node
// that comes up meanwhile (its kubelet back) drains while the nodes that went down keep holding
// no slot (seed 873019: the declaration ended with the NOTSUPPORTED, two nodes held slots with
// max-concurrent-drains 1).
//
// The node answered NOTSUPPORTED is in maintenance until it has gone down: nothing drains to it.
func TestWholeClusterShutdownOutlastsItsNotSupported(t *testing.T) {
	drains := map[string]Drain{
		"a": declaring(drainIn(StatusComplete, "a", 0)),
		"b": declaring(drainIn(StatusComplete, "b", time.Second)),
		"c": declaring(drainIn(StatusNotSupported, "c", 2*time.Second)),
		"d": declaring(drainIn(StatusRequested, "d", 3*time.Second)),
		"e": declaring(drainIn(StatusRequested, "e", 4*time.Second)),
	}
	ns := nodes("a", "b", "c", "d", "e")
	ns[0].Ready, ns[1].Ready = false, false
	a := Admit(drains, ns, 1)
	assert.True(t, a.WholeCluster)
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.Queued["d"], "c in maintenance", "c, told to go down undrained, is still up")

	ns[2].Ready = false // c went down as told
	a = Admit(drains, ns, 1)
	assert.True(t, a.WholeCluster, "the NOTSUPPORTED ended the declaration")
	assert.Equal(t, []string{"d"}, a.Admit)
	assert.Equal(t, []string{"e"}, slices.Collect(maps.Keys(a.Queued)))
}

// A node answered NOTSUPPORTED goes down undrained: it is in maintenance, and no workload is
// drained to it, until it is back and its agent withdraws (or its slot is released as a stale
// holder's). A cluster seen as one node (the other's Node object deleted long enough) answers
// NOTSUPPORTED; the other node registering again meanwhile waits for it (simulation, seed
// 6001898: both went down at once).
func TestANotSupportedNodeIsInMaintenance(t *testing.T) {
	drains := map[string]Drain{
		"a": drainIn(StatusNotSupported, "a", 0),
		"b": drainIn(StatusRequested, "b", time.Second),
	}
	a := Admit(drains, nodes("a", "b"), 1)
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.Queued["b"], "a in maintenance")

	a = Admit(drains, nodes("a", "b"), 2)
	assert.Empty(t, a.Admit, "with a second slot, b still has nowhere to drain to")
	assert.Contains(t, a.Queued["b"], "no other Ready, schedulable node")

	released := drains["a"]
	released.Status.SlotReleased = true
	drains["a"] = released
	ns := nodes("a", "b", "c")
	ns[0].Ready = false
	a = Admit(drains, ns, 1)
	assert.Equal(t, []string{"b"}, a.Admit, "a's slot was released: b drains to c")
}

func TestDeclaresClusterShutdown(t *testing.T) {
	tests := []struct {
		by      Requester
		context string
		want    bool
	}{
		{RequesterDeviceOp, "cluster-shutdown", true},
		{RequesterDeviceOp, "cluster-shutdown planned power work", true},
		{RequesterDeviceOp, "cluster-shutdownx", false},
		{RequesterDeviceOp, "cluster-shutdown-x", false},
		{RequesterDeviceOp, "Cluster-Shutdown", false},
		{RequesterDeviceOp, " cluster-shutdown", false},
		{RequesterDeviceOp, "reboot", false},
		{RequesterDeviceOp, "", false},
		{RequesterUpdate, "cluster-shutdown", false},
		{RequesterUpdate, "cluster-shutdown planned power work", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %q", tt.by, tt.context), func(t *testing.T) {
			r := NodeDrainRequest{Node: "a", RequestID: "a-r", RequestedAt: t0, RequestedBy: tt.by, Context: tt.context}
			assert.Equal(t, tt.want, DeclaresClusterShutdown(r))
		})
	}
}

func TestRebootOutsideWholeClusterHoldsSlotWhileDown(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusComplete, "a", 0), "b": drainIn(StatusRequested, "b", time.Second)}
	ns := nodes("a", "b", "c")
	ns[0].Ready = false // rebooting
	a := Admit(drains, ns, 1)
	assert.False(t, a.WholeCluster)
	assert.Empty(t, a.Admit, "b must wait until a is back and withdraws")
}

// Regression: a node admitted earlier in the same pass is busy; two nodes that are each
// other's only spare are not both admitted at once, whatever max-concurrent allows.
func TestAdmitCountsNodesAdmittedInThePass(t *testing.T) {
	drains := map[string]Drain{
		"a": drainIn(StatusRequested, "a", time.Second),
		"b": drainIn(StatusRequested, "b", 2*time.Second),
		"c": drainIn(StatusRequested, "c", 3*time.Second),
	}
	a := Admit(drains, nodes("a", "b", "c"), 3)
	assert.Equal(t, []string{"a", "b"}, a.Admit, "c has no spare left once a and b are admitted")
	assert.Contains(t, a.Queued["c"], "no other Ready, schedulable node")
	assert.Empty(t, a.NotSupported)

	two := map[string]Drain{"a": drainIn(StatusRequested, "a", time.Second), "b": drainIn(StatusRequested, "b", 2*time.Second)}
	a = Admit(two, nodes("a", "b"), 2)
	assert.Equal(t, []string{"a"}, a.Admit)
	assert.Contains(t, a.Queued["b"], "no other Ready, schedulable node")
}

// Regression (simulation, seed 29796): node b's Node object was gone for a moment (deleted and
// registering again) while b had a request; a was told NOTSUPPORTED as if alone, rebooted
// undrained, and b drained meanwhile: two nodes down at once.
func TestAdmitNotAloneWhileAnotherNodeHasARequest(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusRequested, "a", time.Second), "b": drainIn(StatusRequested, "b", 2*time.Second)}
	a := Admit(drains, nodes("a"), 1)
	assert.Empty(t, a.NotSupported)
	assert.Contains(t, a.Queued["a"], "no other Ready, schedulable node")
	assert.Contains(t, a.Queued["b"], "not (yet) in the cluster")

	alone := map[string]Drain{"a": drainIn(StatusRequested, "a", time.Second)}
	assert.Contains(t, Admit(alone, nodes("a"), 1).NotSupported["a"], "single-node cluster")
}

// Regression (simulation, seed 4140): in a two-node cluster, b's Node object was gone for a
// moment (re-registering) and b had no request or status: a was told NOTSUPPORTED as if alone,
// rebooted undrained while b was drained next: two nodes down at once. A node the coordinator
// has seen counts.
func TestAdmitNotAloneWhileASeenNodeIsMissing(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusRequested, "a", time.Second)}
	a := AdmitSeen(drains, nodes("a"), 1, map[string]bool{"a": true, "b": true})
	assert.Empty(t, a.NotSupported)
	assert.Contains(t, a.Queued["a"], "no other Ready, schedulable node")
	assert.Contains(t, AdmitSeen(drains, nodes("a"), 1, map[string]bool{"a": true}).NotSupported["a"], "single-node cluster")
}

// Regression (simulation, seed 2177): c is down for an ordinary reboot (COMPLETE, holding the
// slot) and its Node object is missing for a moment; a and b declare a cluster shutdown. That is
// no whole-cluster shutdown: c keeps its slot and nobody else starts.
func TestWholeClusterNeedsEveryRequestToDeclare(t *testing.T) {
	declared := func(status DrainStatus, node string, at time.Duration) Drain {
		d := drainIn(status, node, at)
		d.Request.Context = ClusterShutdownContext
		return d
	}
	drains := map[string]Drain{
		"a": declared(StatusRequested, "a", time.Second),
		"b": declared(StatusRequested, "b", 2*time.Second),
		"c": drainIn(StatusComplete, "c", 0),
	}
	a := Admit(drains, nodes("a", "b"), 1)
	assert.False(t, a.WholeCluster)
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.Queued["a"], "c in maintenance")
}

// Regression (simulation, seed 8403): two Node objects re-registering at once, and neither node
// with a request at that moment: the third is still not alone, because edgedrain knows them.
func TestAdmitNotAloneWhileOtherNodesAreKnown(t *testing.T) {
	drains := map[string]Drain{
		"a": drainIn(StatusRequested, "a", time.Second),
		"b": {Status: NodeDrainStatus{Node: "b", Status: StatusNotRequested}},
		"c": {Status: NodeDrainStatus{Node: "c", Status: StatusNotRequested}},
	}
	a := Admit(drains, nodes("a"), 1)
	assert.Empty(t, a.NotSupported)
	assert.Contains(t, a.Queued["a"], "no other Ready, schedulable node")
}

// Regression (review): a declared shutdown with a node already broken (NotReady, no agent to
// declare) must not deadlock: that node is down already and need not declare.
func TestDeclaredShutdownWithABrokenNode(t *testing.T) {
	declared := func(status DrainStatus, node string, at time.Duration) Drain {
		d := drainIn(status, node, at)
		d.Request.Context = ClusterShutdownContext
		return d
	}
	drains := map[string]Drain{"a": declared(StatusComplete, "a", 0), "b": declared(StatusRequested, "b", time.Second)}
	ns := []NodeInfo{{Name: "a"}, {Name: "b", Ready: true, Schedulable: true}, {Name: "c"}} // a shut down, c broken
	adm := Admit(drains, ns, 1)
	assert.True(t, adm.WholeCluster)
	assert.Contains(t, adm.NotSupported["b"], "declared whole-cluster shutdown", "the last node up proceeds")
	// c's agent was heard from lately (it withdrew a request): it runs there and asks nothing.
	back := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 1, Back: map[string]bool{"c": true}})
	assert.False(t, back.WholeCluster)
	assert.Empty(t, back.NotSupported)

	// Nobody declaring and every other node down is no declared shutdown.
	none := map[string]Drain{"b": drainIn(StatusRequested, "b", time.Second)}
	assert.False(t, Admit(none, ns, 1).WholeCluster)
}

// A drain that leaves maintenance frees its slot only once that status is on the bus: until
// then the bus may still show it in maintenance (seed 101553).
func TestSlotFreedOnlyWhenTheFreeingStatusIsPublished(t *testing.T) {
	p := DefaultLimits()
	failing := drainIn(StatusDrainRetrying, "a", 0)
	failing.BusHolds = true                                                     // as Step sets it with the status
	failing, _ = Step(failing, EvPublished{Status: StatusDrainRetrying}, t0, p) // on the bus
	failing.Waiting, failing.Status.Attempt = OpEvict, p.DrainAttempts
	failing, _ = Step(failing, EvResult{Op: OpEvict, RequestID: "a-r", Err: fmt.Errorf("pods left")}, t0, p)
	if !assert.Equal(t, StatusFailedDrain, failing.Status.Status) {
		return
	}
	drains := map[string]Drain{"a": failing, "b": drainIn(StatusRequested, "b", time.Second)}
	assert.Empty(t, Admit(drains, nodes("a", "b"), 1).Admit, "FAILEDDRAIN not published yet: the bus still shows a in maintenance")

	failing, _ = Step(failing, EvPublished{Status: StatusDrainRetrying}, t0, p) // a late ack of an older status
	drains["a"] = failing
	assert.Empty(t, Admit(drains, nodes("a", "b"), 1).Admit)

	failing, _ = Step(failing, EvPublished{Status: StatusFailedDrain}, t0, p)
	drains["a"] = failing
	assert.Equal(t, []string{"b"}, Admit(drains, nodes("a", "b"), 1).Admit, "FAILEDDRAIN on the bus frees the slot")

	resumed, _ := Resume(NodeDrainStatus{Node: "c", Status: StatusCordoned, RequestID: "c-r"}, nil, t0, p)
	assert.True(t, resumed.BusHolds, "a resumed drain the bus shows in maintenance holds its slot until its next status is published")
}

// Nodes the coordinator does not manage (--node-selector) are still nodes of the cluster: a
// managed node that is the only one selected is drained to them, not told NOTSUPPORTED (which
// lets its agent go down undrained); they keep a whole-cluster shutdown from being declared while
// they are up; and a request from one of them is not served.
func TestUnmanagedNodesAreNodesOfTheCluster(t *testing.T) {
	ns := nodes("a", "b")
	ns[1].Unmanaged = true
	a := Admit(map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}, ns, 1)
	assert.Equal(t, []string{"a"}, a.Admit, "b can take a's workloads")
	assert.Empty(t, a.NotSupported)

	decl := map[string]Drain{"a": declaring(drainIn(StatusRequested, "a", 0)), "c": declaring(drainIn(StatusRequested, "c", time.Second))}
	ns = nodes("a", "b", "c")
	ns[1].Unmanaged = true
	assert.False(t, Admit(decl, ns, 1).WholeCluster, "b is up and asks nothing: no whole-cluster shutdown")

	a = Admit(map[string]Drain{"b": drainIn(StatusRequested, "b", 0)}, ns, 1)
	assert.Empty(t, a.Admit)
	assert.Empty(t, a.NotSupported)
	assert.Contains(t, a.Queued["b"], "not (yet) one this coordinator manages")
}

// With two slots and the wait policy, a node whose volume has every other copy on nodes in
// maintenance waits: admitted, its drain and theirs would each wait for the other's copy
// (issue 23, defect 5). A node with no such volume takes the free slot; a volume with no other
// copy at all is the drain's own gate's business, not a reason to queue it.
func TestTwoSlotsDoNotTakeEveryCopyOfAVolume(t *testing.T) {
	peers := map[string][]VolumePeers{
		"a": {{Volume: "v1", Nodes: []string{"b"}}, {Volume: "v3"}},
		"b": {{Volume: "v1", Nodes: []string{"a"}}, {Volume: "v2", Nodes: []string{"a", "c"}}},
		"c": {{Volume: "v2", Nodes: []string{"a", "b"}}},
	}
	in := AdmitInput{MaxConcurrent: 2, Nodes: nodes("a", "b", "c", "d"), Peers: func(n string) []VolumePeers { return peers[n] },
		Drains: map[string]Drain{
			"a": drainIn(StatusRequested, "a", 0),
			"b": drainIn(StatusRequested, "b", time.Second),
			"c": drainIn(StatusRequested, "c", 2*time.Second),
		}}
	a := AdmitWith(in)
	assert.Equal(t, []string{"a", "c"}, a.Admit, "b's v1 has its only other copy on a; c's v2 has one on b")
	assert.Contains(t, a.Queued["b"], "the other copies of volume v1 are on a, in maintenance")

	in.Drains["a"] = drainIn(StatusCordoned, "a", 0)
	in.Drains["c"] = drainIn(StatusCordoned, "c", 2*time.Second)
	in.Drains["b"] = drainIn(StatusRequested, "b", time.Second)
	in.MaxConcurrent = 3
	a = AdmitWith(in)
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.Queued["b"], "the other copies of volume v1 are on a, in maintenance")

	in.Drains["a"] = drainIn(StatusNotRequested, "a", 0)
	a = AdmitWith(in)
	assert.Equal(t, []string{"b"}, a.Admit, "a is back: v1 has its copy there, and v2 one there too, though c is in maintenance")
}

// The last node up told NOTSUPPORTED in a declared whole-cluster shutdown takes a slot in that
// pass: a node down by power loss, whose declaring request still waited, was admitted with it,
// two nodes in maintenance with one slot (simulation, S3).
func TestTheLastNodeUpTakesItsSlotInThePass(t *testing.T) {
	declared := func(node string, at time.Duration) Drain {
		d := drainIn(StatusRequested, node, at)
		d.Request.Context = ClusterShutdownContext
		return d
	}
	// b asked first, a second: a is Ready, b lost power (NotReady); c's Node is gone.
	drains := map[string]Drain{"a": declared("a", 2*time.Second), "b": declared("b", time.Second)}
	ns := []NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b"}}
	ns[0].Priority = 1 // a first in the queue
	adm := Admit(drains, ns, 1)
	assert.True(t, adm.WholeCluster)
	assert.Contains(t, adm.NotSupported["a"], "last node up")
	assert.Empty(t, adm.Admit, "admitted beside the NOTSUPPORTED node with one slot")
	assert.Contains(t, adm.Queued["b"], "a in maintenance")
}

// Under a declared whole-cluster shutdown, a readiness view that may be older than an API outage
// does not make a node the last one up: another node it shows NotReady may be up, and the node
// waits rather than go down undrained beside it.
func TestDeclaredShutdownNoLastNodeOnAnUnsureView(t *testing.T) {
	now := time.Now()
	req := func(node string) *NodeDrainRequest {
		return &NodeDrainRequest{Node: node, RequestID: node + "-r", RequestedAt: now, RequestedBy: RequesterDeviceOp,
			Context: ClusterShutdownContext}
	}
	in := func(unsure bool) AdmitInput {
		return AdmitInput{
			Drains: map[string]Drain{
				"a": {Request: req("a"), Status: NodeDrainStatus{Node: "a", Status: StatusRequested, RequestID: "a-r"}},
				"b": {Request: req("b"), Status: NodeDrainStatus{Node: "b", Status: StatusRequested, RequestID: "b-r"}},
			},
			Nodes:         []NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b", Ready: false, Schedulable: true}},
			MaxConcurrent: 1, ReadyUnsure: unsure,
		}
	}
	sure := AdmitWith(in(false))
	require.True(t, sure.WholeCluster)
	assert.Contains(t, sure.NotSupported, "a", "b is down: a is the last node up")

	unsure := AdmitWith(in(true))
	assert.NotContains(t, unsure.NotSupported, "a")
	assert.Contains(t, unsure.Queued["a"], "readiness may be older")
}

// TestDeclaredShutdownNoLastNodeBesideACordonBeingLifted: under a declared whole-cluster
// shutdown, a node that is up and carries edgedrain's cordon for a drain that holds no slot (its
// request replaced, waiting again) is uncordoned next: the node asking first is not the last
// node up, and waits to be drained to it rather than go down undrained. A node cordoned by
// someone else, or kept cordoned, or whose uncordon failed (retried later), takes nothing, and
// one whose drain is COMPLETE keeps its cordon.
func TestDeclaredShutdownNoLastNodeBesideACordonBeingLifted(t *testing.T) {
	earlier := time.Now()
	req := func(node string, at time.Time) *NodeDrainRequest {
		return &NodeDrainRequest{Node: node, RequestID: node + "-r", RequestedAt: at, RequestedBy: RequesterDeviceOp,
			Context: ClusterShutdownContext}
	}
	in := func(b NodeInfo, bStatus DrainStatus) AdmitInput {
		return AdmitInput{
			Drains: map[string]Drain{
				"a": {Request: req("a", earlier), Status: NodeDrainStatus{Node: "a", Status: StatusRequested, RequestID: "a-r"}},
				"b": {Request: req("b", earlier.Add(time.Minute)), Status: NodeDrainStatus{Node: "b", Status: bStatus, RequestID: "b-r"}},
			},
			Nodes:         []NodeInfo{{Name: "a", Ready: true, Schedulable: true}, b},
			MaxConcurrent: 2,
		}
	}
	ours := NodeInfo{Name: "b", Ready: true, CordonRecord: true, CordonOurs: true}
	lifting := AdmitWith(in(ours, StatusRequested))
	require.True(t, lifting.WholeCluster)
	assert.NotContains(t, lifting.NotSupported, "a", "b is up and its cordon is being lifted: a is not the last node up")
	assert.Contains(t, lifting.Queued["a"], "b is up and edgedrain is lifting its cordon")

	theirs := AdmitWith(in(NodeInfo{Name: "b", Ready: true}, StatusRequested))
	assert.Contains(t, theirs.NotSupported, "a", "b is cordoned by someone else: nothing to drain to")
	kept := AdmitWith(in(NodeInfo{Name: "b", Ready: true, CordonRecord: true}, StatusRequested))
	assert.Contains(t, kept.NotSupported, "a", "b's cordon stays (cordoned again by someone else, or kept by an operator): nothing to drain to")

	down := AdmitWith(in(NodeInfo{Name: "b", CordonRecord: true, CordonOurs: true}, StatusRequested))
	assert.Contains(t, down.NotSupported, "a", "b is down")

	failing := in(ours, StatusRequested)
	failing.Drains["b"] = Drain{Request: failing.Drains["b"].Request, Status: failing.Drains["b"].Status, RetryOp: OpUncordon}
	assert.Contains(t, AdmitWith(failing).NotSupported, "a", "b's uncordon failed and waits to be tried again: it may never be lifted")

	complete := AdmitWith(in(ours, StatusComplete))
	assert.Contains(t, complete.NotSupported, "a", "b is COMPLETE and keeps its cordon")
}
