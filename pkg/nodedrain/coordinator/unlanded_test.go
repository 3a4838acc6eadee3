package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A failed COMPLETE is recorded as one a later write may prove never landed only while it is
// the only COMPLETE of its request that may have landed: once the drain is CompleteSent (an
// earlier COMPLETE failed, its reply maybe lost after it landed, and its record was dropped or
// names another revision), no later write says anything about that one, and the drain must stay
// CompleteSent (its agent may be rebooting): it is not recorded, and a record of another revision
// is dropped (review: a second failed COMPLETE cleared the mark the first had set).
func TestNoteUnlandedOnlyForTheOnlyCompleteThatMayHaveLanded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := &nodedrain.NodeDrainRequest{Node: "a", RequestID: "r1", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp}
	core := func(sent bool) *Core {
		c := NewCore(nodedrain.DefaultLimits(), 1)
		c.Resume(ResumeInput{Requests: map[string]*nodedrain.NodeDrainRequest{"a": req},
			Statuses: map[string]nodedrain.NodeDrainStatus{"a": {Node: "a", RequestID: "r1", Status: nodedrain.StatusCordoned,
				CordonedByUs: true, CompleteSent: sent, UpdatedAt: now, StartedAt: now}},
			CordonedByUs: map[string]bool{"a": true}}, now)
		return c
	}
	st := nodedrain.NodeDrainStatus{Node: "a", RequestID: "r1", Status: nodedrain.StatusComplete}

	fresh := core(false)
	got := noteUnlanded(map[string]unlandedComplete{}, fresh, st, 7)
	assert.Equal(t, map[string]unlandedComplete{"a": {requestID: "r1", fence: 7}}, got, "the first COMPLETE that failed")

	sent := core(true)
	assert.Empty(t, noteUnlanded(map[string]unlandedComplete{}, sent, st, 9), "an earlier COMPLETE may be on the bus")
	assert.Equal(t, map[string]unlandedComplete{"a": {requestID: "r1", fence: 7}},
		noteUnlanded(map[string]unlandedComplete{"a": {requestID: "r1", fence: 7}}, sent, st, 7), "the same one failing again")
	assert.Empty(t, noteUnlanded(map[string]unlandedComplete{"a": {requestID: "r1", fence: 7}}, sent, st, 9),
		"a second COMPLETE fenced elsewhere: the first may have landed")
}
