package nodedrain

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Issue 23, defect 4: the check before COMPLETE finds the node cordoned, but not by the drain's
// own cordon (someone uncordoned it, then cordoned it: the executor tells by the field's owner,
// and answers Foreign).
// The node was schedulable meanwhile, so the drain starts over, under that cordon, and never
// counts it as its own: the withdrawal uncordons nothing.
func TestForeignCordonBeforeCompleteDrainsAgainAndIsLeft(t *testing.T) {
	foreign := func(e *EvResult) { e.Foreign = true }
	notOurs := func(e *EvResult) { e.ByUs = false }
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, foreign).expect(StatusStarting, OpCordon)
	assert.Contains(t, r.d.Status.Message, "cordoned again by someone else")
	assert.False(t, r.d.Status.CordonedByUs)
	r.ok(OpCordon, notOurs).expect(StatusCordoned, OpGate)
	r.ok(OpGate).expect(StatusCordoned, OpEvict)
	r.ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, foreign).expect(StatusComplete)
	assert.False(t, r.d.Status.CordonedByUs)
	r.step(EvRequest{}).expect(StatusNotRequested, OpReturnGate) // no uncordon
}

// An uncordon that left the node cordoned (its cordon was someone else's, or an operator asked
// to keep it) says so, instead of "node uncordoned".
func TestUncordonThatLeftTheNodeCordonedSaysWhy(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon)
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
	r.ok(OpUncordon, func(e *EvResult) { e.Kept = "an operator asked to keep it cordoned" }).expect(StatusNotRequested, OpReturnGate)
	assert.Equal(t, "node left cordoned: an operator asked to keep it cordoned; holding its admission slot until it is healthy again",
		r.d.Status.Message)
	assert.False(t, r.d.Status.CordonedByUs)
}
