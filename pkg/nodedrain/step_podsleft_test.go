package nodedrain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pod that landed after the eviction attempt listed the node's pods (a scheduler bind decided
// before the cordon, a pod created with spec.nodeName) is found by the check before COMPLETE:
// it is evicted in the next attempt, and COMPLETE waits for a check that finds none.
func TestPodsLandedAfterTheEvictionHoldComplete(t *testing.T) {
	landed := func(e *EvResult) {
		e.Pods = []Blocker{{Kind: BlockerPod, Namespace: "default", Name: "job-4", Reason: "on the node"}}
	}
	r := newRun(t).step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).expect(StatusCordoned, OpCheckCordon)
	r.ok(OpCheckCordon, landed).expect(StatusDrainRetrying)
	assert.Contains(t, r.d.Status.Message, "landed on the node after the attempt listed its pods")
	require.Len(t, r.d.Status.Blockers, 1)
	assert.Equal(t, "job-4", r.d.Status.Blockers[0].Name)
	assert.Equal(t, OpEvict, r.d.RetryOp)
	assert.Equal(t, 2, r.d.NextAttempt, "the landed pods use up an attempt (S5)")
	r.fire().expect(StatusDrainRetrying, OpEvict)
	r.ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon).expect(StatusComplete)

	// On the last attempt, the drain fails as a failed attempt does.
	r = newRun(t).step(EvRequest{Request: req("b")}).step(EvAdmit{})
	r.ok(OpCordon).ok(OpGate)
	for attempt := 1; attempt < r.p.DrainAttempts; attempt++ {
		r.ok(OpEvict, failWith(assert.AnError)).fire()
	}
	r.ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon, landed).expect(StatusFailedDrain)
}

// The API-unreachable rule does not let a drain go COMPLETE when the node informer's last view
// shows the node uncordoned, missing or replaced since the drain's cordon (simulation, seed
// 7001876: the Node registered again schedulable while the drain waited for its volumes).
func TestAPIUnreachableNotOnANodeSeenUncordoned(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
	r.step(EvAPIUnreachable{For: 5 * time.Minute, Safe: true, Uncordoned: true}).expect(StatusCordoned)
	assert.Contains(t, r.d.Status.Message, "the node informer's last view shows the node uncordoned")
	assert.False(t, r.has(Cancel{}), "the drain goes on where it was")
	r.step(EvAPIUnreachable{For: 6 * time.Minute, Safe: true}).expect(StatusComplete)
}
