package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// uncordons returns the uncordons among actions.
func uncordons(actions []NodeAction) int {
	n := 0
	for _, a := range actions {
		if s, ok := a.Action.(nodedrain.Start); ok && s.Op == nodedrain.OpUncordon {
			n++
		}
	}
	return n
}

// A node view from before the drain's own uncordon still shows edgedrain's record (an informer
// behind the write: seen under load in the cluster tests, where it made an idle node's drain
// uncordon a second time and say a cordon had landed late); it says nothing. A view newer than
// the uncordon that shows the record is a cordon that landed after it: that one is undone.
func TestAViewOlderThanTheUncordonIsNoCordonFound(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := NewCore(nodedrain.DefaultLimits(), 1)
	out := c.Resume(ResumeInput{Statuses: map[string]nodedrain.NodeDrainStatus{"a": {Node: "a", RequestID: "r1",
		Status: nodedrain.StatusNotRequested, CordonedByUs: true, UpdatedAt: now}}, CordonedByUs: map[string]bool{"a": true}}, now)
	require.Equal(t, 1, uncordons(out), "the resumed cordon is undone")
	c.Handle("a", nodedrain.EvResult{Op: nodedrain.OpUncordon, ResourceVersion: "120"}, now)
	d, _ := c.Drain("a")
	require.False(t, d.Status.CordonedByUs)

	view := func(rv string) []nodedrain.NodeInfo {
		return []nodedrain.NodeInfo{{Name: "a", Ready: true, CordonRecord: true, ResourceVersion: rv}}
	}
	out, _ = c.Admit(view("119"), AdmissionVerdict{}, now.Add(time.Second))
	assert.Zero(t, uncordons(out), "a view from before the uncordon")
	d, _ = c.Drain("a")
	assert.False(t, d.Status.CordonedByUs)
	out, _ = c.Admit(view("121"), AdmissionVerdict{}, now.Add(2*time.Second))
	assert.Equal(t, 1, uncordons(out), "a record written after the uncordon is a cordon that landed late")
	d, _ = c.Drain("a")
	assert.True(t, d.Status.CordonedByUs)
}

// Resource versions the API server did not make comparable (or none) leave the view as it is.
func TestOlderThanOnlyForComparableVersions(t *testing.T) {
	assert.True(t, olderThan("99", "100"))
	assert.False(t, olderThan("100", "100"))
	assert.False(t, olderThan("101", "100"))
	assert.False(t, olderThan("", "100"))
	assert.False(t, olderThan("99", ""))
	assert.False(t, olderThan("abc", "100"))
}
