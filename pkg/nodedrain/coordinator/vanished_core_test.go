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
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := NewCore(nodedrain.DefaultPolicy(), 1)
	both := []nodedrain.NodeInfo{{Name: "a", Ready: true, Schedulable: true}, {Name: "b", Ready: true, Schedulable: true}}
	onlyB := both[1:]
	c.Step("a", nodedrain.EvRequest{Request: &nodedrain.NodeDrainRequest{Node: "a", RequestID: "r1", RequestedAt: now,
		RequestedBy: nodedrain.RequesterDeviceOp}}, now)
	c.Admit(both, AdmitPolicy{}, now)
	c.Step("a", nodedrain.EvResult{Op: nodedrain.OpCordon, RequestID: "r1", ByUs: true}, now)
	d, _ := c.Drain("a")
	require.Equal(t, nodedrain.StatusCordoned, d.Status.Status)

	status := func() nodedrain.DrainStatus { d, _ := c.Drain("a"); return d.Status.Status }
	c.Admit(onlyB, AdmitPolicy{}, now)
	c.Admit(both, AdmitPolicy{}, now.Add(30*time.Second)) // registered again: the count starts afresh
	c.Admit(onlyB, AdmitPolicy{}, now.Add(40*time.Second))
	c.Admit(nil, AdmitPolicy{}, now.Add(40*time.Second+nodedrain.NodeGoneAfter))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "an empty view ended the drain")
	c.Admit(onlyB, AdmitPolicy{}, now.Add(40*time.Second+nodedrain.NodeGoneAfter-time.Millisecond))
	assert.Equal(t, nodedrain.StatusCordoned, status(), "ended before NodeGoneAfter")
	c.Admit(onlyB, AdmitPolicy{}, now.Add(40*time.Second+nodedrain.NodeGoneAfter))
	assert.Equal(t, nodedrain.StatusFailedDrain, status())
	d, _ = c.Drain("a")
	assert.False(t, d.Active())
}
