package nodedrain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A return gate resumed from a status another replica wrote counts its timeout no earlier than
// the resume: its ReturningSince is on that replica's clock, which may be minutes behind this
// one's (simulation, issue 23, seed 9002139: the gate timed out at once, R1).
func TestResumedReturnGateTimesOutFromTheResume(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := DefaultLimits()
	p.ReturnTimeout = 2 * time.Minute
	st := NodeDrainStatus{Node: "a", RequestID: "r1", Status: StatusNotRequested, ReturningSince: now.Add(-time.Hour)}
	d, _ := Resume(st, nil, now, p)
	assert.Equal(t, now.Add(2*time.Minute), d.ReturnDeadline(p))
	st.ReturningSince = now.Add(time.Minute) // a clock ahead: later, as written
	d, _ = Resume(st, nil, now, p)
	assert.Equal(t, now.Add(3*time.Minute), d.ReturnDeadline(p))
}
