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

// An uncordon in flight when a new request comes is waited for, not doubled: a second one, its
// answer taken for the first's, let the new drain be admitted and cordon the node while it was
// still on its way, and it removed that cordon before COMPLETE (simulation, seed 5008849: COMPLETE
// on a schedulable node, with no fault at all).
func TestNewRequestWaitsForTheUncordonInFlight(t *testing.T) {
	r := newRun(t)
	r.p.ReturnTimeout = 0
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon)
	r.expect(StatusComplete)
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested) // no second uncordon
	assert.Equal(t, OpUncordon, r.d.Waiting)
	assert.False(t, r.d.AwaitsAdmission(), "admissible before the uncordon in flight answered")
	r.step(EvAdmit{}).expect(StatusRequested)
	r.ok(OpUncordon).expect(StatusRequested)
	assert.True(t, r.d.AwaitsAdmission())
	r.step(EvAdmit{}).expect(StatusStarting, OpCordon)
}
