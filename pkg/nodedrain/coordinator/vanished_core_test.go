package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Admission's view ends a drain whose Node object has been missing for NodeGoneAfter, counted
// from the first pass that saw it missing; a Node seen again starts the count afresh, and an
// empty view (a failed list) ends nothing.
func TestCoreEndsTheDrainOfAVanishedNode(t *testing.T) {
	now, c, both, onlyB := cordonedDrainOfA()
	d, _ := c.Drain("a")
	require.Equal(t, nodedrain.StatusCordoned, d.Status.Status)

	status := func() nodedrain.DrainStatus { d, _ := c.Drain("a"); return d.Status.Status }
	c.Admit(onlyB, AdmissionVerdict{}, now)
	c.Admit(both, AdmissionVerdict{}, now.Add(30*time.Second)) // registered again: the count starts afresh
	c.Admit(onlyB, AdmissionVerdict{}, now.Add(40*time.Second))
	c.Admit(nil, AdmissionVerdict{}, now.Add(40*time.Second+nodedrain.NodeGoneAfter))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "an empty view ended the drain")
	c.Admit(onlyB, AdmissionVerdict{}, now.Add(40*time.Second+nodedrain.NodeGoneAfter-time.Millisecond))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "ended before NodeGoneAfter")
	c.Admit(onlyB, AdmissionVerdict{}, now.Add(40*time.Second+nodedrain.NodeGoneAfter))
	assert.Equal(t, nodedrain.StatusFailedDrain, status())
	d, _ = c.Drain("a")
	assert.False(t, d.Draining())
}

// Under a declared whole-cluster shutdown admission counts a COMPLETE node whose Node object is
// missing as down, its slot free: the slot is released on the bus too before another drain is
// admitted in its place (simulation, seed 5006715: kubectl delete node on a node COMPLETE for
// the shutdown and still up, and the next drain admitted while the bus showed both holding).
func TestDeclaredShutdownReleasesTheSlotOfAVanishedNode(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := func(node string) *nodedrain.NodeDrainRequest {
		return &nodedrain.NodeDrainRequest{Node: node, RequestID: node + "-r", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp,
			Context: nodedrain.ClusterShutdownContext}
	}
	c := NewCore(nodedrain.DefaultLimits(), 1)
	c.Resume(ResumeInput{
		Requests: map[string]*nodedrain.NodeDrainRequest{"a": req("a"), "b": req("b"), "c": req("c")},
		Statuses: map[string]nodedrain.NodeDrainStatus{
			"a": {Node: "a", RequestID: "a-r", Status: nodedrain.StatusComplete, Attempt: 1, UpdatedAt: now, CordonedByUs: true},
			"b": {Node: "b", RequestID: "b-r", Status: nodedrain.StatusRequested, UpdatedAt: now},
			"c": {Node: "c", RequestID: "c-r", Status: nodedrain.StatusRequested, UpdatedAt: now}},
	}, now)
	withoutA := []nodedrain.NodeInfo{{Name: "b", Ready: true, Schedulable: true}, {Name: "c", Ready: true, Schedulable: true}}
	_, ev := c.Admit(withoutA, AdmissionVerdict{}, now)
	require.True(t, ev.ConfirmDeclared)
	c.ConfirmDeclared()
	out, ev := c.Admit(withoutA, AdmissionVerdict{}, now)
	require.True(t, ev.WholeCluster)
	d, _ := c.Drain("a")
	require.True(t, d.Status.SlotReleased, "a's Node object is missing: down for the shutdown, as admission counts it")
	assert.Contains(t, d.Status.Message, ReleasedUnderShutdown)
	// What the bus gets, in order: a's release, then the admission it allows (one only).
	var published []string
	for _, na := range out {
		if p, ok := na.Action.(nodedrain.Publish); ok && (p.Status.SlotReleased || p.Status.Status == nodedrain.StatusStarting) {
			published = append(published, na.Node+" "+p.Status.Status.String())
		}
	}
	assert.Equal(t, []string{"a COMPLETE", "b STARTING"}, published)
}

// The idle status of a node out of the cluster (no Node object, unseen by admission) leaves the
// bus after seenFor: OpForget, then the drain is forgotten. A node present, a drain not idle, or
// an empty view (a failed list) forgets nothing.
func TestCoreForgetsTheIdleStatusOfANodeOutOfTheCluster(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := NewCore(nodedrain.DefaultLimits(), 1)
	c.Resume(ResumeInput{Statuses: map[string]nodedrain.NodeDrainStatus{
		"gone": {Node: "gone", Status: nodedrain.StatusNotRequested, RequestID: "r1"},
		"here": {Node: "here", Status: nodedrain.StatusNotRequested, RequestID: "r2"},
	}}, now)
	here := []nodedrain.NodeInfo{{Name: "here", Ready: true, Schedulable: true}}
	forgets := func(out []NodeAction) []string {
		var nodes []string
		for _, a := range out {
			if s, ok := a.Action.(nodedrain.Start); ok && s.Op == nodedrain.OpForget {
				nodes = append(nodes, a.Node)
			}
		}
		return nodes
	}
	out, _ := c.Admit(here, AdmissionVerdict{}, now)
	assert.Empty(t, forgets(out))
	out, _ = c.Admit(nil, AdmissionVerdict{}, now.Add(time.Hour))
	assert.Empty(t, forgets(out), "an empty view forgot a status")
	out, _ = c.Admit(here, AdmissionVerdict{}, now.Add(seenFor-time.Second))
	assert.Empty(t, forgets(out), "forgotten before seenFor")
	out, _ = c.Admit(here, AdmissionVerdict{}, now.Add(seenFor))
	assert.Equal(t, []string{"gone"}, forgets(out))
	c.Handle("gone", nodedrain.EvResult{Op: nodedrain.OpForget, RequestID: "r1"}, now.Add(seenFor))
	_, known := c.Drain("gone")
	assert.False(t, known, "the drain is forgotten once its status is gone")
}

// A drain's Node missing from a view the API no longer refreshes (this coordinator cut off from
// it) may be back: the count that ends the drain pauses then, like the stale-holder counts, and
// resumes a relist's time after the API answers again.
func TestNoDrainEndsAsVanishedOnAFrozenView(t *testing.T) {
	now, c, _, onlyB := cordonedDrainOfA()
	status := func() nodedrain.DrainStatus { d, _ := c.Drain("a"); return d.Status.Status }

	c.Admit(onlyB, AdmissionVerdict{}, now)
	c.SetAPIUnreachable(now.Add(10 * time.Second)) // 10 s counted before
	c.Admit(onlyB, AdmissionVerdict{}, now.Add(10*nodedrain.NodeGoneAfter))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "ended as its Node gone on a frozen view")
	c.SetAPIUnreachable(time.Time{})
	back := now.Add(10*nodedrain.NodeGoneAfter + time.Second)
	c.Admit(onlyB, AdmissionVerdict{}, back)
	assert.Equal(t, nodedrain.StatusCordoned, status(), "ended on the first pass after the API answered")
	rest := nodedrain.NodeGoneAfter - 10*time.Second + informerRelist
	c.Admit(onlyB, AdmissionVerdict{}, back.Add(rest-time.Second))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "ended on the view the API's return has not refreshed yet")
	c.Admit(onlyB, AdmissionVerdict{}, back.Add(rest))
	assert.Equal(t, nodedrain.StatusFailedDrain, status(), "gone for NodeGoneAfter on a live view, the 10 s before the outage counted")
}

// A second outage that begins while the count still waits for the first one's relist pauses
// nothing the count had counted: the count begins a relist's time after the second one ends,
// not that late plus the whole second outage again.
func TestASecondOutageInTheRelistWaitPausesNoCountTwice(t *testing.T) {
	now, c, _, onlyB := cordonedDrainOfA()
	status := func() nodedrain.DrainStatus { d, _ := c.Drain("a"); return d.Status.Status }
	at := func(d time.Duration) time.Time { return now.Add(d) }

	c.Admit(onlyB, AdmissionVerdict{}, now) // a's Node gone from now
	c.SetAPIUnreachable(now)
	c.Admit(onlyB, AdmissionVerdict{}, at(10*time.Second))
	c.SetAPIUnreachable(time.Time{})
	c.Admit(onlyB, AdmissionVerdict{}, at(30*time.Second)) // back after 30 s: the count begins 60 s later, at 90 s
	c.SetAPIUnreachable(at(50 * time.Second))              // gone again in that wait
	c.Admit(onlyB, AdmissionVerdict{}, at(60*time.Second))
	c.SetAPIUnreachable(time.Time{})
	c.Admit(onlyB, AdmissionVerdict{}, at(70*time.Second)) // back after 20 s: the count begins 40 s later, at 110 s
	begins := at(110 * time.Second)
	c.Admit(onlyB, AdmissionVerdict{}, begins.Add(nodedrain.NodeGoneAfter-time.Second))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "ended before NodeGoneAfter on a live view")
	c.Admit(onlyB, AdmissionVerdict{}, begins.Add(nodedrain.NodeGoneAfter))
	assert.Equal(t, nodedrain.StatusFailedDrain, status(), "gone for NodeGoneAfter after the second relist wait")
}

// An API that flaps (a /readyz that times out for 3 s once a minute, as a slow API server on a
// small machine does) holds the count back by about twice each blip, not a relist's minute after
// each: the drain of a Node gone for good still ends, within a few minutes.
func TestADrainStillEndsAsVanishedUnderAFlappingAPI(t *testing.T) {
	now, c, _, onlyB := cordonedDrainOfA()
	status := func() nodedrain.DrainStatus { d, _ := c.Drain("a"); return d.Status.Status }

	var ended time.Duration
	for at := time.Duration(0); at < 10*time.Minute && ended == 0; at += time.Second {
		if blip := at % time.Minute; blip >= 30*time.Second && blip < 33*time.Second {
			if blip == 30*time.Second {
				c.SetAPIUnreachable(now.Add(at))
			}
		} else {
			c.SetAPIUnreachable(time.Time{})
		}
		c.Admit(onlyB, AdmissionVerdict{}, now.Add(at))
		if status() == nodedrain.StatusFailedDrain {
			ended = at
		}
	}
	require.NotZero(t, ended, "the drain of a Node gone for good never ended under an API that flaps")
	assert.Less(t, ended, 3*time.Minute, "ended %s after its Node went", ended)
	t.Logf("ended %s after its Node went", ended)
}

// cordonedDrainOfA is a Core (one slot) whose drain of node a, admitted at now, is CORDONED, in a
// cluster of a and b; onlyB is the view without a's Node.
func cordonedDrainOfA() (now time.Time, c *Core, both, onlyB []nodedrain.NodeInfo) {
	now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c = NewCore(nodedrain.DefaultLimits(), 1)
	both = []nodedrain.NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b", Ready: true, Schedulable: true}}
	c.Handle("a", nodedrain.EvRequest{Request: &nodedrain.NodeDrainRequest{Node: "a", RequestID: "r1", RequestedAt: now,
		RequestedBy: nodedrain.RequesterDeviceOp}}, now)
	c.Admit(both, AdmissionVerdict{}, now)
	c.Handle("a", nodedrain.EvResult{Op: nodedrain.OpCordon, RequestID: "r1", ByUs: true}, now)
	return now, c, both, both[1:]
}
