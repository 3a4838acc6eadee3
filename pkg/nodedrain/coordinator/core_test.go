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
	for _, a := range NewCore(nodedrain.DefaultPolicy(), 1).Resume(in, now) {
		if a.Release {
			released[a.Node] = true
		}
	}
	assert.Equal(t, map[string]bool{"queued": true, "failed": true, "idle": true, "unknown": true}, released)
}
