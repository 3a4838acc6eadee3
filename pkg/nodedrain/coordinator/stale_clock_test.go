package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The stale-holder timeout is counted on the coordinator's own clock, from when it first saw the
// node NotReady: the Node condition's NotReadySince was written on another machine's clock, and
// a resumed COMPLETE's UpdatedAt on another replica's. Both an hour behind this coordinator's
// clock do not release the slot at once (simulation, issue 23, seed 44: a coordinator whose
// clock was 7 s ahead released a rebooting node's slot 7 s early, R2).
func TestStaleHolderCountsOnItsOwnClock(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	behind := now.Add(-time.Hour)
	req := &nodedrain.NodeDrainRequest{Node: "a", RequestID: "r1", RequestedAt: behind, RequestedBy: nodedrain.RequesterDeviceOp}
	st := nodedrain.NodeDrainStatus{Node: "a", RequestID: "r1", Status: nodedrain.StatusComplete, UpdatedAt: behind, StartedAt: behind}
	nodes := []nodedrain.NodeInfo{{Name: "a", NotReadySince: behind}, {Name: "b", Ready: true, Schedulable: true}}
	_, released := completeHolder(req, st, nodes, now)
	assert.False(t, released(now), "NotReady for an hour by the control plane's clock, but just seen NotReady")
	assert.False(t, released(now.Add(5*time.Minute-time.Second)))
	assert.True(t, released(now.Add(5*time.Minute)), "NotReady for the timeout on this coordinator's clock")
}

// While the coordinator cannot reach the API its informers' view is frozen: a Node that view
// shows gone may have registered again, Ready (simulation, seed 926487: a coordinator cut from
// the API released a COMPLETE holder as "gone for 1m0s" whose Node was back, R2). No slot is
// released on it: the count pauses, and resumes a relist's time after the API answers again
// (paused, not started over: an API that flaps would keep a dead node's slot for good).
func TestNoStaleHolderIsReleasedOnAFrozenView(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := &nodedrain.NodeDrainRequest{Node: "a", RequestID: "r1", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp}
	st := nodedrain.NodeDrainStatus{Node: "a", RequestID: "r1", Status: nodedrain.StatusComplete, UpdatedAt: now, StartedAt: now}
	gone := []nodedrain.NodeInfo{{Name: "b", Ready: true, Schedulable: true}} // a's Node missing from the view
	c, released := completeHolder(req, st, gone, now)
	assert.False(t, released(now), "just seen gone")
	c.SetAPIUnreachable(now.Add(10 * time.Second)) // 10 s counted before
	assert.False(t, released(now.Add(DeletedGrace)), "released on a frozen view")
	assert.False(t, released(now.Add(10*DeletedGrace)), "released on a frozen view")
	c.SetAPIUnreachable(time.Time{})
	back := now.Add(10*DeletedGrace + time.Second)
	assert.False(t, released(back), "released on the view the API's return has not refreshed yet")
	rest := DeletedGrace - 10*time.Second + informerRelist
	assert.False(t, released(back.Add(rest-time.Second)))
	assert.True(t, released(back.Add(rest)), "gone for the grace on a live view, the 10 s before the outage counted")
}

// completeHolder is a coordinator (stale-holder timeout 5 min) resumed with node a's drain
// COMPLETE; released runs an admission pass over nodes at a time and reports whether it
// released a's slot.
func completeHolder(req *nodedrain.NodeDrainRequest, st nodedrain.NodeDrainStatus, nodes []nodedrain.NodeInfo,
	now time.Time) (c *Core, released func(at time.Time) bool) {
	c = NewCore(nodedrain.DefaultLimits(), 1)
	c.SetStaleHolderTimeout(5 * time.Minute)
	c.Resume(ResumeInput{Requests: map[string]*nodedrain.NodeDrainRequest{"a": req},
		Statuses: map[string]nodedrain.NodeDrainStatus{"a": st}, CordonedByUs: map[string]bool{"a": true}}, now)
	return c, func(at time.Time) bool {
		actions, _ := c.Admit(nodes, AdmissionVerdict{}, at)
		for _, a := range actions {
			if _, ok := a.Action.(nodedrain.SlotReleased); ok {
				return true
			}
		}
		return false
	}
}
