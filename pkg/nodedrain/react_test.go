package nodedrain

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var volBlocked = func(e *EvResult) {
	e.Safe = false
	e.Blockers = []Blocker{{Kind: BlockerVolume, Name: "pvc-x", Reason: "last healthy replica"}}
}

// A change seen while a gate waits for its recheck brings the recheck to GateReact after the
// change; the answer after it is the gate's, as always.
func TestChangeBringsABlockedGateForward(t *testing.T) {
	for _, op := range []Op{OpGate, OpFinalGate} {
		t.Run(op.String(), func(t *testing.T) {
			r := newRun(t)
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon)
			if op == OpFinalGate {
				r.ok(OpGate).ok(OpEvict)
			}
			r.ok(op, volBlocked).expect(StatusCordoned)
			require.Equal(t, r.now.Add(r.p.GateRecheck), r.d.RetryAt, "no change yet: the recheck timer")
			require.True(t, r.d.ReactsToChange())
			r.now = r.now.Add(300 * time.Millisecond)
			r.step(EvChanged{}).expect(StatusCordoned)
			assert.Equal(t, r.now.Add(r.p.GateReact), r.d.RetryAt, "a change brings the recheck forward")
			assert.Empty(t, r.actions, "nothing is started or published before GateReact")
			// A second change inside GateReact does not push it back.
			at := r.d.RetryAt
			r.now = r.now.Add(10 * time.Millisecond)
			r.step(EvChanged{})
			assert.Equal(t, at, r.d.RetryAt)
			r.fire().expect(StatusCordoned, op)
		})
	}
}

// A check that was in flight when something changed may have read the world before it: a
// blocked answer is asked again after GateReact, not after GateRecheck. Without a change it
// waits GateRecheck.
func TestChangeDuringACheckAsksAgainSoon(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict)
	require.Equal(t, OpFinalGate, r.d.Waiting)
	r.step(EvChanged{})
	assert.True(t, r.d.ChangedDuring)
	r.ok(OpFinalGate, volBlocked)
	assert.Equal(t, r.now.Add(r.p.GateReact), r.d.RetryAt)
	r.fire().expect(StatusCordoned, OpFinalGate)
	assert.False(t, r.d.ChangedDuring, "the new check reads the world after the change")
	r.ok(OpFinalGate, volBlocked)
	assert.Equal(t, r.now.Add(r.p.GateRecheck), r.d.RetryAt, "no change during this check: the timer")
}

// The return gate reacts the same way: a node back from its reboot frees its slot as soon as
// it is healthy, not at the next recheck.
func TestChangeBringsTheReturnGateForward(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon)
	r.step(EvRequest{}).ok(OpUncordon).expect(StatusNotRequested, OpReturnGate)
	require.Equal(t, OpReturnGate, r.d.Waiting)
	r.ok(OpReturnGate, func(e *EvResult) {
		e.Safe, e.Blockers = false, []Blocker{{Kind: BlockerPod, Name: "web-0", Reason: "not Ready"}}
	})
	require.Equal(t, r.now.Add(r.p.GateRecheck), r.d.RetryAt)
	r.step(EvChanged{})
	assert.Equal(t, r.now.Add(r.p.GateReact), r.d.RetryAt)
	r.fire().expect(StatusNotRequested, OpReturnGate)
	r.ok(OpReturnGate)
	assert.False(t, r.d.Returning())
}

// Changes never hurry a retry that is not a blocked gate's: a cordon or eviction backoff, a
// gate that failed (not blocked), the pause after a COMPLETE the bus refused.
func TestChangeLeavesOtherRetriesAlone(t *testing.T) {
	boom := errors.New("boom")
	cases := map[string]func(r *run){
		"cordon backoff": func(r *run) { r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon, failWith(boom)) },
		"eviction backoff": func(r *run) {
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict, failWith(boom))
		},
		"gate error": func(r *run) {
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate, failWith(boom))
		},
		"gate error after a blocked answer": func(r *run) {
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate, volBlocked)
			r.fire().ok(OpGate, failWith(boom))
		},
		"COMPLETE refused by the bus": func(r *run) {
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon)
			r.step(EvPublishFailed{})
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRun(t)
			setup(r)
			require.NotEqual(t, OpNone, r.d.RetryOp)
			at := r.d.RetryAt
			assert.False(t, r.d.ReactsToChange())
			r.now = r.now.Add(10 * time.Millisecond)
			r.step(EvChanged{})
			assert.Equal(t, at, r.d.RetryAt)
			assert.Empty(t, r.actions)
		})
	}
}

func TestPolicyValidateGateReact(t *testing.T) {
	p := DefaultLimits()
	require.NoError(t, p.Validate())
	p.GateReact = 0
	require.NoError(t, p.Validate(), "0: a change starts the recheck at once")
	p.GateReact = -time.Millisecond
	require.ErrorContains(t, p.Validate(), "gate reaction delay")
	p.GateReact = p.GateRecheck + time.Millisecond
	require.NoError(t, p.Validate(), "above the recheck it is the recheck: a lower --volume-recheck alone stays valid")
}

// A gate held only by what no informer sees change (a Prometheus alert or query, the policy) is
// not asked again on changes: under steady unrelated churn it is asked every GateRecheck, not
// at the churn's pace (review: 11 checks a second, each a pod list and a Prometheus query).
func TestChangesDoNotHurryAGateHeldByAnAlert(t *testing.T) {
	for name, blocker := range map[string]Blocker{
		"alert":  {Kind: "Alert", Name: "NodeMaintenanceFreeze", Reason: "firing"},
		"volume": {Kind: BlockerVolume, Name: "pvc-x", Reason: "last healthy replica"},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRun(t)
			r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict)
			const took, churn = 40 * time.Millisecond, 50 * time.Millisecond
			end, checks := r.now.Add(time.Minute), 0
			for r.now.Before(end) {
				if r.d.Waiting == OpFinalGate {
					r.now = r.now.Add(took)
					r.step(EvChanged{}) // something changed while it was asked
					r.ok(OpFinalGate, func(e *EvResult) { e.Safe, e.Blockers, e.At = false, []Blocker{blocker}, r.now })
					checks++
					continue
				}
				for r.now.Add(churn).Before(r.d.RetryAt) {
					r.now = r.now.Add(churn)
					r.step(EvChanged{})
				}
				r.fire()
			}
			if name == "alert" {
				assert.LessOrEqual(t, checks, 31, "every GateRecheck (2 s) in a minute")
			} else {
				assert.Greater(t, checks, 500, "a volume blocker is asked again soon after each change")
			}
		})
	}
}

// However often things change, a slow check is asked again no sooner than it took: checks run
// at most half the time.
func TestChangesWaitAsLongAsTheLastCheckTook(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon)
	r.now = r.now.Add(400 * time.Millisecond) // the check took 400 ms
	r.step(EvChanged{})
	r.ok(OpGate, volBlocked)
	assert.Equal(t, r.now.Add(400*time.Millisecond), r.d.RetryAt, "changed during a 400 ms check: asked again 400 ms later, not 50")
	r.step(EvChanged{})
	assert.Equal(t, r.now.Add(400*time.Millisecond), r.d.RetryAt)
}
