package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A node that stops matching --node-selector is still there (issue 23): a drain under way on it
// ends after NodeGoneAfter as FAILEDDRAIN saying so, never a go-ahead, and keeps what it knows
// of its cordon so that its request's withdrawal undoes it; a COMPLETE one keeps its slot (not
// released as a Node gone: simulation, seed 648).
func TestNodeLeavingTheSelector(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := func(node, id string) *nodedrain.NodeDrainRequest {
		return &nodedrain.NodeDrainRequest{Node: node, RequestID: id, RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp}
	}
	c := NewCore(nodedrain.DefaultLimits(), 2)
	c.SetStaleHolderTimeout(10 * time.Minute)
	c.Resume(ResumeInput{
		Requests: map[string]*nodedrain.NodeDrainRequest{"draining": req("draining", "d1"), "complete": req("complete", "c1")},
		Statuses: map[string]nodedrain.NodeDrainStatus{
			"draining": {Node: "draining", RequestID: "d1", Status: nodedrain.StatusCordoned, Attempt: 1, CordonedByUs: true, UpdatedAt: now},
			"complete": {Node: "complete", RequestID: "c1", Status: nodedrain.StatusComplete, CordonedByUs: true, UpdatedAt: now},
		},
		CordonedByUs: map[string]bool{"draining": true, "complete": true},
	}, now)
	nodes := []nodedrain.NodeInfo{{Name: "draining", Ready: true, Unmanaged: true}, {Name: "complete", Ready: true, Unmanaged: true},
		{Name: "other", Ready: true, Schedulable: true}}
	c.Admit(nodes, AdmissionVerdict{}, now)
	c.Admit(nodes, AdmissionVerdict{}, now.Add(nodedrain.NodeGoneAfter-time.Second))
	d, _ := c.Drain("draining")
	assert.Equal(t, nodedrain.StatusCordoned, d.Status.Status, "not before NodeGoneAfter")
	actions, _ := c.Admit(nodes, AdmissionVerdict{}, now.Add(nodedrain.NodeGoneAfter))
	d, _ = c.Drain("draining")
	assert.Equal(t, nodedrain.StatusFailedDrain, d.Status.Status)
	assert.Contains(t, d.Status.Message, "--node-selector")
	for _, a := range actions {
		_, released := a.Action.(nodedrain.SlotReleased)
		assert.False(t, released && a.Node == "complete", "a COMPLETE node still there keeps its slot")
	}
	cd, _ := c.Drain("complete")
	assert.False(t, cd.Status.SlotReleased)
	// The agent withdraws (or asks again): edgedrain's cordon is undone.
	var uncordon bool
	for _, a := range c.Handle("draining", nodedrain.EvRequest{}, now.Add(nodedrain.NodeGoneAfter+time.Second)) {
		if s, ok := a.Action.(nodedrain.Start); ok && s.Op == nodedrain.OpUncordon {
			uncordon = true
		}
	}
	require.True(t, uncordon, "the withdrawal uncordons the node")
}
