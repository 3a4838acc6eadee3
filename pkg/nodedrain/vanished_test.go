package nodedrain

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 23, defect 4b: a drain whose Node object is gone ends, failed and saying why, at
// whatever step it was, and frees its slot; it never goes COMPLETE.
func TestGoneNodeEndsTheDrain(t *testing.T) {
	stages := map[string]struct {
		to   func(*run)
		want DrainStatus
	}{
		"cordon retry": {func(r *run) { r.step(EvAdmit{}).ok(OpCordon, failWith(errors.New("not found"))) }, StatusFailedCordon},
		"gate":         {func(r *run) { r.step(EvAdmit{}).ok(OpCordon) }, StatusFailedDrain},
		"evicting":     {func(r *run) { r.step(EvAdmit{}).ok(OpCordon).ok(OpGate) }, StatusFailedDrain},
		"retrying":     {func(r *run) { r.step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict, failWith(errors.New("x"))) }, StatusFailedDrain},
		"check":        {func(r *run) { r.step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate) }, StatusFailedDrain},
	}
	for name, c := range stages {
		t.Run(name, func(t *testing.T) {
			r := newRun(t)
			r.step(EvRequest{Request: req("a")})
			c.to(r)
			require.True(t, r.d.Draining())
			r.step(EvNodeGone{For: NodeGoneAfter}).expect(c.want)
			assert.Contains(t, r.d.Status.Message, "Node object has been gone for 1m0s")
			assert.True(t, r.has(Cancel{}), "what was under way stops")
			assert.True(t, r.has(Outcome{}))
			assert.False(t, r.d.Draining())
			assert.Equal(t, OpNone, r.d.Waiting)
			assert.Equal(t, OpNone, r.d.RetryOp)
			r.step(EvTimer{}).expect(c.want) // nothing resumes it
			// The agent withdraws on FAILED: the uncordon looks (the drain's cordon went with
			// the Node object, or lies on a Node registered since).
			r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
		})
	}
}

// A cordon in flight answers first (it may still land): EvNodeGone waits for it.
func TestGoneNodeWaitsForACordonInFlight(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).expect(StatusStarting, OpCordon)
	r.step(EvNodeGone{For: NodeGoneAfter}).expect(StatusStarting)
	assert.Equal(t, OpCordon, r.d.Waiting)
	r.ok(OpCordon, failWith(errors.New(`nodes "edge-1.shop" not found`))).expect(StatusStarting)
	r.step(EvNodeGone{For: NodeGoneAfter}).expect(StatusFailedCordon)
}

// A decommission's Node going is its purpose: its own rule decides (NodeGoneAfter at its
// deletion).
func TestGoneNodeLeavesADecommissionToItsOwnRule(t *testing.T) {
	r := drainedForDecommission(t)
	waiting := r.d.Waiting
	r.step(EvNodeGone{For: NodeGoneAfter}).expect(StatusCordoned)
	assert.Empty(t, r.actions)
	assert.Equal(t, waiting, r.d.Waiting)
}

// The check before COMPLETE that finds the Node missing never completes: it asks again.
func TestMissingNodeIsNeverComplete(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, func(e *EvResult) { e.Cordoned, e.Missing = false, true }).expect(StatusCordoned)
	assert.Contains(t, r.d.Status.Message, "the Node object is missing")
	r.fire().expect(StatusCordoned, OpFinalGate)
}

// A Node registered again (a new UID) before COMPLETE is a new node: the drain starts over on
// it, even under a cordon (the drained node's was someone else's too).
func TestReplacedNodeIsDrainedAnew(t *testing.T) {
	uid := func(u string) func(*EvResult) { return func(e *EvResult) { e.UID = u } }
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.ok(OpCordon, uid("u1"), func(e *EvResult) { e.ByUs = false }).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, uid("u2")).expect(StatusStarting, OpCordon)
	assert.Contains(t, r.d.Status.Message, "Node object was replaced")
	r.ok(OpCordon, uid("u2"), func(e *EvResult) { e.ByUs = false }).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, uid("u2")).expect(StatusComplete)
}

// After a resume the UID is not known: the check does not take that for a replaced node.
func TestUnknownUIDIsNoReplacement(t *testing.T) {
	r := newRun(t)
	r.d, r.actions = Resume(NodeDrainStatus{Node: "edge-1.shop", RequestID: "a", Status: StatusCordoned, CordonedByUs: true},
		req("a"), r.now, r.p)
	r.ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, func(e *EvResult) { e.UID = "u9" }).expect(StatusComplete)
}
