package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Resume releases the volume gate's work for every node whose drain does not hold it (anything
// but a drain under way or COMPLETE): a release that failed when the last coordinator stopped
// is not lost (simulation, seed 4331: a queued node kept its storage eviction for good).
func TestResumeReleasesWhatNoDrainHolds(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := func(id string) *nodedrain.NodeDrainRequest {
		return &nodedrain.NodeDrainRequest{Node: "n", RequestID: id, RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp}
	}
	st := func(node, id string, s nodedrain.DrainStatus) nodedrain.NodeDrainStatus {
		return nodedrain.NodeDrainStatus{Node: node, RequestID: id, Status: s, Attempt: 1}
	}
	in := ResumeInput{
		Requests: map[string]*nodedrain.NodeDrainRequest{"queued": req("q"), "draining": req("d"), "complete": req("c"), "failed": req("f")},
		Statuses: map[string]nodedrain.NodeDrainStatus{
			"queued": st("queued", "q", nodedrain.StatusRequested), "draining": st("draining", "d", nodedrain.StatusCordoned),
			"complete": st("complete", "c", nodedrain.StatusComplete), "failed": st("failed", "f", nodedrain.StatusFailedDrain),
			"idle": st("idle", "", nodedrain.StatusNotRequested),
		},
		Held: []string{"unknown"},
	}
	released := map[string]bool{}
	for _, a := range NewCore(nodedrain.DefaultLimits(), 1).Resume(in, now) {
		if a.Release {
			released[a.Node] = true
		}
	}
	assert.Equal(t, map[string]bool{"queued": true, "failed": true, "idle": true, "unknown": true}, released)
}

// A decommissioned node, forgotten once its keys are gone, does not come back as a node of the
// cluster with the echo of its request's removal or a late result (review: it held the last
// node of a shrunk cluster back for good); a resumed coordinator releases its gate's work.
func TestForgottenNodeStaysForgotten(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := &nodedrain.NodeDrainRequest{Node: "old", RequestID: "d1", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp,
		Context: nodedrain.DecommissionContext}
	st := nodedrain.NodeDrainStatus{Node: "old", RequestID: "d1", Status: nodedrain.StatusComplete, Decommission: true,
		SlotReleased: true, UpdatedAt: now}
	c := NewCore(nodedrain.DefaultLimits(), 1)
	var released bool
	for _, a := range c.Resume(ResumeInput{Statuses: map[string]nodedrain.NodeDrainStatus{"old": st}}, now) {
		released = released || a.Release
	}
	assert.True(t, released, "its request went while no coordinator ran: the gate's work is released")
	var forgot bool
	for _, a := range c.Timers(now.Add(nodedrain.DefaultLimits().DecommissionLinger)) {
		if s, ok := a.Action.(nodedrain.Start); ok && s.Op == nodedrain.OpForget {
			forgot = true
		}
	}
	assert.True(t, forgot, "its keys are removed after the linger")
	c.Handle("old", nodedrain.EvResult{Op: nodedrain.OpForget, RequestID: "d1"}, now)
	_, known := c.Drain("old")
	assert.False(t, known, "forgotten")

	assert.Empty(t, c.Handle("old", nodedrain.EvRequest{}, now), "the echo of the request's removal")
	assert.Empty(t, c.Handle("old", nodedrain.EvResult{Op: nodedrain.OpForget, RequestID: "d1"}, now), "a late result")
	_, known = c.Drain("old")
	assert.False(t, known, "still forgotten")
	c.Handle("old", nodedrain.EvRequest{Request: r}, now)
	d, known := c.Drain("old")
	assert.True(t, known, "a new request for the name is taken up")
	assert.Equal(t, nodedrain.StatusRequested, d.Status.Status)
}

// A COMPLETE node that went down under a declared whole-cluster shutdown releases its slot for
// good: once the last node up, answered NOTSUPPORTED, withdraws (the declaration is over), the
// nodes still down do not hold their slots again while the drain admitted under the
// declaration runs (review of seed 873019: three holders with max-concurrent-drains 1).
func TestDeclaredShutdownReleaseOutlastsTheDeclaration(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := func(node string) *nodedrain.NodeDrainRequest {
		return &nodedrain.NodeDrainRequest{Node: node, RequestID: node + "-r", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp,
			Context: nodedrain.ClusterShutdownContext}
	}
	st := func(node string, s nodedrain.DrainStatus) nodedrain.NodeDrainStatus {
		return nodedrain.NodeDrainStatus{Node: node, RequestID: node + "-r", Status: s, Attempt: 1, UpdatedAt: now,
			CordonedByUs: s == nodedrain.StatusComplete}
	}
	c := NewCore(nodedrain.DefaultLimits(), 1)
	c.Resume(ResumeInput{
		Requests: map[string]*nodedrain.NodeDrainRequest{"a": req("a"), "b": req("b"), "c": req("c"), "d": req("d"), "e": req("e")},
		Statuses: map[string]nodedrain.NodeDrainStatus{"a": st("a", nodedrain.StatusComplete), "b": st("b", nodedrain.StatusComplete),
			"c": st("c", nodedrain.StatusNotSupported), "d": st("d", nodedrain.StatusRequested), "e": st("e", nodedrain.StatusRequested)},
	}, now)
	// c went down as its NOTSUPPORTED told it; d drains to e.
	nodes := []nodedrain.NodeInfo{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d", Ready: true, Schedulable: true},
		{Name: "e", Ready: true, Schedulable: true}}
	out, ev := c.Admit(nodes, AdmissionVerdict{}, now)
	assert.True(t, ev.ConfirmDeclared, "acting on the declaration waits for the requests read afresh")
	assert.Empty(t, out)
	c.ConfirmDeclared()
	_, ev = c.Admit(nodes, AdmissionVerdict{}, now)
	assert.True(t, ev.WholeCluster)
	for _, n := range []string{"a", "b", "c"} {
		d, _ := c.Drain(n)
		assert.True(t, d.Status.SlotReleased, "%s went down under the declaration", n)
		assert.Contains(t, d.Status.Message, ReleasedUnderShutdown)
		c.Handle(n, nodedrain.EvPublished{Status: d.Status.Status, Holds: d.Status.HoldsSlot()}, now)
	}
	c.ConfirmDeclared()
	_, ev = c.Admit(nodes, AdmissionVerdict{}, now) // the releases are on the bus
	assert.True(t, ev.WholeCluster)
	d, _ := c.Drain("d")
	assert.Equal(t, nodedrain.StatusStarting, d.Status.Status, "d is admitted: a and b are down for the shutdown")

	nodes[2].Ready = true                     // c is back
	c.Handle("c", nodedrain.EvRequest{}, now) // and withdraws: the declaration is over
	_, ev = c.Admit(nodes, AdmissionVerdict{}, now)
	assert.False(t, ev.WholeCluster)
	var holders []string
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if d, _ := c.Drain(n); d.Status.HoldsSlot() || d.BusHolds {
			holders = append(holders, n)
		}
	}
	assert.Equal(t, []string{"d"}, holders)
}

// A node whose agent withdrew its request lately runs an agent, even while its Node does not
// show Ready yet (a kubelet slower than the agent after a reboot): a whole-cluster shutdown is
// not declared without its request (simulation, seed 502990: it had lost the shutdown's
// sentinel with its reboot, and the last two nodes went down at once with one slot).
func TestAWithdrawalIsAnAgentUp(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := func(node, ctx string) *nodedrain.NodeDrainRequest {
		return &nodedrain.NodeDrainRequest{Node: node, RequestID: node + "-r", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp, Context: ctx}
	}
	st := func(node string, s nodedrain.DrainStatus) nodedrain.NodeDrainStatus {
		return nodedrain.NodeDrainStatus{Node: node, RequestID: node + "-r", Status: s, Attempt: 1, UpdatedAt: now}
	}
	c := NewCore(nodedrain.DefaultLimits(), 1)
	c.Resume(ResumeInput{
		Requests: map[string]*nodedrain.NodeDrainRequest{"a": req("a", nodedrain.ClusterShutdownContext),
			"b": req("b", nodedrain.ClusterShutdownContext), "c": req("c", "reboot")},
		Statuses: map[string]nodedrain.NodeDrainStatus{"a": st("a", nodedrain.StatusRequested), "b": st("b", nodedrain.StatusRequested),
			"c": st("c", nodedrain.StatusComplete)},
	}, now)
	nodes := []nodedrain.NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b", Ready: true, Schedulable: true}, {Name: "c"}}
	c.Handle("c", nodedrain.EvRequest{}, now) // c is back from its reboot, its Node still NotReady
	_, ev := c.Admit(nodes, AdmissionVerdict{}, now.Add(time.Second))
	assert.False(t, ev.WholeCluster || ev.ConfirmDeclared, "c's agent runs and asks nothing")
	_, ev = c.Admit(nodes, AdmissionVerdict{}, now.Add(backFor))
	assert.True(t, ev.WholeCluster || ev.ConfirmDeclared, "NotReady since long after its withdrawal, c is down")

	// A coordinator taking over after the withdrawal knows it from c's status (review).
	for _, cs := range []nodedrain.NodeDrainStatus{st("c", nodedrain.StatusNotRequested), st("c", nodedrain.StatusComplete)} {
		c = NewCore(nodedrain.DefaultLimits(), 1)
		c.Resume(ResumeInput{
			Requests: map[string]*nodedrain.NodeDrainRequest{"a": req("a", nodedrain.ClusterShutdownContext),
				"b": req("b", nodedrain.ClusterShutdownContext)},
			Statuses: map[string]nodedrain.NodeDrainStatus{"a": st("a", nodedrain.StatusRequested), "b": st("b", nodedrain.StatusRequested),
				"c": cs},
		}, now.Add(time.Second))
		_, ev = c.Admit(nodes, AdmissionVerdict{}, now.Add(2*time.Second))
		assert.False(t, ev.WholeCluster || ev.ConfirmDeclared, "resumed with c's request withdrawn (status %s), c's agent runs", cs.Status)
	}
	// A withdrawal older than backFor says nothing.
	c = NewCore(nodedrain.DefaultLimits(), 1)
	c.Resume(ResumeInput{
		Requests: map[string]*nodedrain.NodeDrainRequest{"a": req("a", nodedrain.ClusterShutdownContext),
			"b": req("b", nodedrain.ClusterShutdownContext)},
		Statuses: map[string]nodedrain.NodeDrainStatus{"a": st("a", nodedrain.StatusRequested), "b": st("b", nodedrain.StatusRequested),
			"c": st("c", nodedrain.StatusNotRequested)},
	}, now.Add(backFor))
	_, ev = c.Admit(nodes, AdmissionVerdict{}, now.Add(backFor+time.Second))
	assert.True(t, ev.WholeCluster || ev.ConfirmDeclared, "c withdrew long ago and is NotReady: down")
}
