package nodedrain

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completed runs a drain of request a to COMPLETE.
func completed(t *testing.T) *run {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon).
		expect(StatusComplete)
	return r
}

func unhealthy(e *EvResult) {
	e.Safe = false
	e.Blockers = []Blocker{{Kind: BlockerVolume, Name: "pvc-1", Reason: "replica rebuilding", Progress: 40}}
}

func TestReturnGateHoldsTheSlotUntilHealthy(t *testing.T) {
	r := completed(t)
	r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested, OpReturnGate)
	r.ok(OpReturnGate, unhealthy).expect(StatusNotRequested)
	assert.True(t, r.d.Returning())
	assert.Equal(t, "pvc-1", r.d.Status.Blockers[0].Name, "the status shows what the gate waits for")
	assert.Contains(t, r.d.Status.Message, "waiting for volume pvc-1")
	r.fire().expect(StatusNotRequested, OpReturnGate)
	r.ok(OpReturnGate, failWith(errors.New("connection refused"))).expect(StatusNotRequested)
	assert.True(t, r.d.Returning(), "an error keeps the slot (fail closed, bounded by the timeout)")
	assert.Contains(t, r.d.Status.Message, "connection refused")
	r.fire().ok(OpReturnGate).expect(StatusNotRequested)
	assert.False(t, r.d.Returning())
	assert.Empty(t, r.d.Status.Blockers)
	for _, a := range r.actions {
		if e, ok := a.(ReturnEnded); ok {
			assert.Equal(t, ReturnHealthy, e.Result)
		}
	}
}

func TestReturnGateTimesOut(t *testing.T) {
	for _, waiting := range []bool{true, false} {
		r := completed(t)
		r.step(EvRequest{}).ok(OpUncordon)
		since := r.d.Status.ReturningSince
		if !waiting {
			r.ok(OpReturnGate, unhealthy) // a recheck is scheduled
		}
		r.now = since.Add(r.p.ReturnTimeout)
		require.Equal(t, r.now, r.d.ReturnDeadline(r.p))
		r.step(EvTimer{}).expect(StatusNotRequested)
		assert.False(t, r.d.Returning(), "slot released after the timeout")
		assert.Equal(t, OpNone, r.d.Waiting)
		assert.Equal(t, OpNone, r.d.RetryOp)
		assert.Contains(t, r.d.Status.Message, "timed out")
		var ended *ReturnEnded
		for _, a := range r.actions {
			if e, ok := a.(ReturnEnded); ok {
				ended = &e
			}
		}
		require.NotNil(t, ended)
		assert.Equal(t, ReturnTimedOut, ended.Result)
		assert.Equal(t, r.p.ReturnTimeout, ended.Waited)
		if waiting {
			assert.True(t, r.has(Cancel{}), "the check in flight is cancelled")
		}
		// A late answer of the cancelled check changes nothing.
		r.ok(OpReturnGate).expect(StatusNotRequested)
	}
}

func TestReturnGateSkipped(t *testing.T) {
	t.Run("gate off", func(t *testing.T) {
		r := completed(t)
		r.p.ReturnTimeout = 0
		r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested)
		assert.False(t, r.d.Returning())
	})
	t.Run("slot released: the node never came back in time", func(t *testing.T) {
		r := completed(t)
		r.step(EvReleaseSlot{Reason: "node NotReady for 30m"}).expect(StatusComplete)
		assert.True(t, r.d.Status.SlotReleased)
		assert.True(t, r.has(SlotReleased{}))
		r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested)
		assert.False(t, r.d.Returning(), "it came back after its slot was given away: no gate")
		assert.False(t, r.d.Status.SlotReleased)
	})
	t.Run("declared whole-cluster shutdown", func(t *testing.T) {
		r := newRun(t)
		q := req("a")
		q.Context = ClusterShutdownContext
		r.step(EvRequest{Request: q}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon)
		r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested)
		assert.False(t, r.d.Returning())
	})
	t.Run("withdrawn before COMPLETE", func(t *testing.T) {
		r := newRun(t)
		r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
		r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested)
		assert.False(t, r.d.Returning())
	})
}

func TestNewRequestWaitsForTheReturnGate(t *testing.T) {
	r := completed(t)
	r.step(EvRequest{}).ok(OpUncordon).ok(OpReturnGate, unhealthy)
	since := r.d.Status.ReturningSince
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested, OpReturnGate)
	assert.Equal(t, since, r.d.Status.ReturningSince, "the node keeps its slot until healthy (review F3)")
	assert.True(t, r.d.Status.HoldsSlot())
	a := AdmitWith(AdmitInput{Drains: map[string]Drain{"edge-1.shop": r.d}, Nodes: nodes("edge-1.shop", "edge-2.shop"), MaxConcurrent: 1})
	assert.Empty(t, a.Admit, "not admitted while returning")
	r.ok(OpReturnGate, unhealthy).expect(StatusRequested)
	r.fire().ok(OpReturnGate).expect(StatusRequested)
	assert.False(t, r.d.Returning())
	assert.Equal(t, "b", r.d.Status.RequestID)
	r.step(EvPublished{Status: StatusRequested}) // the bus shows it no longer holds the slot
	a = AdmitWith(AdmitInput{Drains: map[string]Drain{"edge-1.shop": r.d}, Nodes: nodes("edge-1.shop", "edge-2.shop"), MaxConcurrent: 1})
	assert.Equal(t, []string{"edge-1.shop"}, a.Admit, "healthy: its new request queues like any other")
}

func TestNewRequestOverCompleteStartsTheReturnGate(t *testing.T) {
	r := completed(t)
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested, OpUncordon)
	assert.True(t, r.d.Returning(), "the node may have gone down on the COMPLETE the new request replaces")
	r.ok(OpUncordon).expect(StatusRequested, OpReturnGate)
}

func TestResumeAfterAWithdrawalUnseen(t *testing.T) {
	st := NodeDrainStatus{Node: "edge-1.shop", RequestID: "a", Status: StatusComplete, RequestedBy: RequesterDeviceOp, CordonedByUs: true}
	d, actions := Resume(st, nil, t0.Add(time.Minute), testPolicy())
	assert.True(t, d.Returning(), "withdrawn while no coordinator ran: the return gate all the same (review F1)")
	assert.Equal(t, []Action{Start{Op: OpUncordon}}, actions[len(actions)-1:])
	st.CordonedByUs = false
	d, _ = Resume(st, nil, t0.Add(time.Minute), testPolicy())
	assert.True(t, d.Returning())
	st.DeclaredShutdown = true
	d, _ = Resume(st, nil, t0.Add(time.Minute), testPolicy())
	assert.False(t, d.Returning(), "a declared whole-cluster shutdown has no return gate")
	returning := NodeDrainStatus{Node: "edge-1.shop", RequestID: "b", Status: StatusRequested, ReturningSince: t0}
	d, actions = Resume(returning, req("b"), t0.Add(time.Minute), testPolicy())
	assert.True(t, d.Returning())
	assert.Equal(t, []Action{Start{Op: OpReturnGate}}, actions, "a new request waiting in the return gate carries on")
}

func TestLostCompleteReplyStillStartsTheReturnGate(t *testing.T) {
	r := completed(t)
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	r.step(EvRequest{})
	assert.True(t, r.d.Returning(), "the COMPLETE may have landed and the node gone down on it (review F2)")
}

func TestACompleteKnownNotToHaveLandedIsNoLongerSent(t *testing.T) {
	r := completed(t)
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	require.True(t, r.d.Status.CompleteSent)
	require.False(t, r.d.mayGiveWay(), "the COMPLETE may have landed: the drain cannot give way")
	r.step(EvCompleteNotLanded{RequestID: "other"})
	assert.True(t, r.d.Status.CompleteSent, "another request's COMPLETE says nothing of this one's")
	r.step(EvCompleteNotLanded{RequestID: "a"}).expect(StatusCordoned)
	assert.False(t, r.d.Status.CompleteSent, "a later write fenced on the same revision landed: the COMPLETE never did")
	assert.True(t, r.d.mayGiveWay(), "a drain whose COMPLETE never landed may give way again")
	r.step(EvRequest{})
	assert.False(t, r.d.Returning(), "the node never had its COMPLETE: no return gate")
}

func TestACompleteThatLandedStaysComplete(t *testing.T) {
	r := completed(t)
	r.step(EvCompleteNotLanded{RequestID: "a"}).expect(StatusComplete)
	r.step(EvRequest{})
	assert.True(t, r.d.Returning())
}

func TestStaleCordonAnswerChecksEverythingAgain(t *testing.T) {
	for name, mod := range map[string]func(*EvResult){
		"error": failWith(errors.New("timeout")),
		"stale": func(e *EvResult) { e.At = t0.Add(-time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			r := newRun(t)
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
			r.ok(OpCheckCordon, mod)
			if r.d.RetryOp != OpNone {
				r.fire()
			}
			r.expect(StatusCordoned, OpFinalGate)
		})
	}
}

func TestReleaseKeepsBusHoldsUntilPublished(t *testing.T) {
	r := completed(t)
	r.step(EvPublished{Status: StatusComplete})
	r.step(EvReleaseSlot{Reason: "gone"})
	assert.True(t, r.d.BusHolds, "the bus shows the slot held until the release lands (review F4/B4)")
	r.step(EvPublished{Status: StatusComplete})
	assert.False(t, r.d.BusHolds)
}

func TestReleaseSlotOnlyForCompleteDrains(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon)
	r.step(EvReleaseSlot{Reason: "gone"}).expect(StatusCordoned)
	assert.False(t, r.d.Status.SlotReleased, "a drain under way keeps its slot")
}

func TestResumeCarriesOnTheReturnGate(t *testing.T) {
	st := NodeDrainStatus{Node: "edge-1.shop", RequestID: "a", Status: StatusNotRequested, ReturningSince: t0}
	d, actions := Resume(st, nil, t0.Add(time.Minute), testPolicy())
	assert.True(t, d.Returning())
	assert.True(t, d.BusHolds, "the bus shows it holding its slot")
	require.Equal(t, []Action{Start{Op: OpReturnGate}}, actions)
	st.CordonedByUs = true
	_, actions = Resume(st, nil, t0.Add(time.Minute), testPolicy())
	require.Equal(t, []Action{Start{Op: OpUncordon}}, actions, "the uncordon first, then the gate")
}

func TestPublishedReturningKeepsBusHolds(t *testing.T) {
	r := completed(t)
	r.step(EvRequest{}).ok(OpUncordon)
	st := r.d.Status
	r.step(EvPublished{Status: st.Status, Holds: st.HoldsSlot()})
	assert.True(t, r.d.BusHolds)
	r.ok(OpReturnGate)
	r.step(EvPublished{Status: StatusNotRequested, Holds: true}) // the returning one, acknowledged late
	assert.True(t, r.d.BusHolds, "the idle status has not reached the bus yet")
	r.step(EvPublished{Status: StatusNotRequested})
	assert.False(t, r.d.BusHolds)
}

func TestFailedPublicationOfAReleaseKeepsComplete(t *testing.T) {
	r := completed(t)
	r.step(EvReleaseSlot{Reason: "node NotReady for 30m"})
	r.step(EvPublishFailed{}).expect(StatusComplete)
	assert.True(t, r.d.Status.SlotReleased, "the COMPLETE already reached the bus: retried as it is (sim seed 1168)")
	assert.Equal(t, OpNone, r.d.RetryOp)
}

func TestDescribeBlockers(t *testing.T) {
	bs := []Blocker{{Kind: BlockerVolume, Name: "db"}, {Kind: BlockerPod, Namespace: "shop", Name: "web-1"}, {Kind: "Node", Name: "n"},
		{Kind: "Alert", Name: "a"}, {Kind: "Alert", Name: "b"}}
	assert.Equal(t, "volume db, pod shop/web-1, node n and 2 more", DescribeBlockers(bs))
	assert.Equal(t, "volume db", DescribeBlockers(bs[:1]))
	assert.Equal(t, "", DescribeBlockers(nil))
}

// The answer of the check a new request cancelled does not leave the gate with nothing running
// (review 2: the new check's healthy answer was then dropped and only the timeout ended it).
func TestLateAnswerOfACancelledGateCheck(t *testing.T) {
	r := completed(t)
	r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested, OpReturnGate)
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested, OpReturnGate)
	r.step(EvResult{Op: OpReturnGate, RequestID: "a", Err: errors.New("context canceled")})
	assert.Equal(t, OpReturnGate, r.d.Waiting, "the new request's check is still awaited")
	r.ok(OpReturnGate)
	assert.False(t, r.d.Returning(), "healthy: out of the gate")
}

// A COMPLETE whose publication failed is remembered on the bus: a coordinator resuming after it
// still starts the return gate on the withdrawal (review 2).
func TestCompleteSentSurvivesAResume(t *testing.T) {
	r := completed(t)
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	st := r.d.Status
	assert.True(t, st.CompleteSent)
	d, _ := Resume(st, req("a"), r.now.Add(time.Second), r.p)
	r.d = d
	r.step(EvRequest{})
	assert.True(t, r.d.Returning(), "withdrawn after the resume")
	d, _ = Resume(st, nil, r.now, r.p)
	assert.True(t, d.Returning(), "withdrawn while no coordinator ran")
}

// A drain whose COMPLETE was sent (its publication failed) and that then ended FAILED, its Node
// gone, freed its slot then; withdrawn later (the node registered again), it does not take a
// slot back through the return gate: another drain may hold it since (simulation, S3).
func TestAnEndedDrainWhoseCompleteWasSentHasNoReturnGate(t *testing.T) {
	r := completed(t)
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	require.True(t, r.d.Status.CompleteSent)
	r.d.Status.Status, r.d.RetryOp, r.d.Waiting = StatusFailedDrain, OpNone, OpNone // ended: its Node gone for NodeGoneAfter
	r.step(EvRequest{})
	assert.Equal(t, StatusNotRequested, r.d.Status.Status)
	assert.False(t, r.d.Returning(), "back through the return gate, taking a slot it had freed")
}
