package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A refused write is written again at once unless it is a COMPLETE decided more than
// MaxAnswerAge ago that is not on the bus already; a later status of the node forgets it.
func TestARefusedCompleteIsRewrittenOnlyOnFreshChecksOrWhenLanded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-nodedrain.MaxAnswerAge - time.Millisecond)
	complete := nodedrain.NodeDrainStatus{Node: "a", RequestID: "r1", Status: nodedrain.StatusComplete, UpdatedAt: old}
	l := Landed{}

	assert.False(t, l.MayRewrite(complete, now), "old checks, not on the bus")
	fresh := complete
	fresh.UpdatedAt = now.Add(-nodedrain.MaxAnswerAge)
	assert.True(t, l.MayRewrite(fresh, now), "checks within MaxAnswerAge")
	cordoned := complete
	cordoned.Status = nodedrain.StatusCordoned
	assert.True(t, l.MayRewrite(cordoned, now), "not a COMPLETE")

	l.Note(complete)
	assert.True(t, l.MayRewrite(complete, now), "on the bus already: a repair puts it back")
	other := complete
	other.RequestID = "r2"
	assert.False(t, l.MayRewrite(other, now), "another request's COMPLETE")
	l.Note(cordoned)
	assert.False(t, l.MayRewrite(complete, now), "a later status replaced it")

	// A failed write to the key (it may have landed): the COMPLETE may be off the bus.
	l.Note(complete)
	l.Forget("a")
	assert.False(t, l.MayRewrite(complete, now), "forgotten: maybe replaced")
}
