package nodedrain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func testPolicy() Limits {
	p := DefaultLimits()
	p.CordonAttempts, p.DrainAttempts = 3, 3
	return p
}

func req(id string) *NodeDrainRequest {
	return &NodeDrainRequest{Node: "edge-1.shop", RequestID: id, RequestedAt: t0, RequestedBy: RequesterDeviceOp, Context: "reboot"}
}

// run feeds events to a drain one after another, advancing the clock by each step's delay.
type run struct {
	t       *testing.T
	d       Drain
	now     time.Time
	p       Limits
	actions []Action // of the last step
}

func newRun(t *testing.T) *run {
	return &run{t: t, d: Drain{Status: NodeDrainStatus{Node: "edge-1.shop", Status: StatusNotRequested}}, now: t0, p: testPolicy()}
}

func (r *run) step(ev Event) *run {
	r.t.Helper()
	before := r.d
	r.d, r.actions = Step(r.d, ev, r.now, r.p)
	recordStep(r.t, before, ev, r.now, r.p, r.d, r.actions) // (the transition table: transitions_test.go)
	return r
}

// at moves the clock to the drain's retry time and fires the timer.
func (r *run) fire() *run {
	r.t.Helper()
	require.NotEqual(r.t, OpNone, r.d.RetryOp, "no timer set")
	r.now = r.d.RetryAt
	return r.step(EvTimer{})
}

func (r *run) ok(op Op, mods ...func(*EvResult)) *run {
	r.t.Helper()
	e := EvResult{Op: op, RequestID: r.d.Status.RequestID, Safe: true, Cordoned: true, ByUs: true}
	for _, m := range mods {
		m(&e)
	}
	return r.step(e)
}

func failWith(err error) func(*EvResult) { return func(e *EvResult) { e.Err = err } }

func (r *run) expect(status DrainStatus, starts ...Op) *run {
	r.t.Helper()
	require.Equal(r.t, status, r.d.Status.Status, "status (message %q)", r.d.Status.Message)
	var got []Op
	for _, a := range r.actions {
		if s, ok := a.(Start); ok {
			got = append(got, s.Op)
		}
	}
	require.Equal(r.t, starts, got, "operations started")
	return r
}

func (r *run) published() []DrainStatus {
	var out []DrainStatus
	for _, a := range r.actions {
		if p, ok := a.(Publish); ok {
			out = append(out, p.Status.Status)
		}
	}
	return out
}

func (r *run) has(want Action) bool {
	for _, a := range r.actions {
		if fmt.Sprintf("%T", a) == fmt.Sprintf("%T", want) {
			return true
		}
	}
	return false
}

func TestHappyPath(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).expect(StatusRequested)
	assert.Equal(t, []DrainStatus{StatusRequested}, r.published())
	r.step(EvAdmit{}).expect(StatusStarting, OpCordon)
	assert.Equal(t, 1, r.d.Status.Attempt)
	r.ok(OpCordon).expect(StatusCordoned, OpGate)
	assert.True(t, r.d.Status.CordonedByUs)
	r.ok(OpGate).expect(StatusCordoned, OpEvict)
	r.step(EvProgress{RequestID: "a", Evicted: 3, Total: 10}).expect(StatusCordoned)
	assert.Contains(t, r.d.Status.Message, "evicted 3/10")
	r.ok(OpEvict).expect(StatusCordoned, OpFinalGate)
	r.ok(OpFinalGate).expect(StatusCordoned, OpCheckCordon)
	r.ok(OpCheckCordon).expect(StatusComplete)
	require.True(t, r.has(Outcome{}), "completion reported for the metric")
	for _, a := range r.actions {
		if o, ok := a.(Outcome); ok {
			assert.Equal(t, StatusComplete, o.Result)
			assert.Equal(t, t0, o.Since)
		}
	}
	// The node is back: the agent withdraws; we uncordon, then idle.
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
	assert.True(t, r.d.Status.CordonedByUs, "still ours until the uncordon succeeds")
	assert.Equal(t, "a", r.d.Status.RequestID, "NOTREQUESTED names the withdrawn request")
	assert.Equal(t, r.now, r.d.Status.ReturningSince, "back from its operation: the return gate holds the slot")
	assert.True(t, r.d.Status.HoldsSlot())
	r.ok(OpUncordon).expect(StatusNotRequested, OpReturnGate)
	assert.False(t, r.d.Status.CordonedByUs)
	assert.Equal(t, "a", r.d.Status.RequestID, "still naming the withdrawn request after the uncordon")
	r.ok(OpReturnGate).expect(StatusNotRequested)
	assert.False(t, r.d.Returning(), "healthy again: the slot is released")
	assert.False(t, r.d.Status.HoldsSlot())
	require.True(t, r.has(ReturnEnded{}))
}

func TestCordonRetriesThenFails(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).expect(StatusStarting, OpCordon)
	boom := errors.New("nodes \"edge-1.shop\" is forbidden")
	var waits []time.Duration
	for attempt := 1; attempt < r.p.CordonAttempts; attempt++ {
		r.ok(OpCordon, failWith(boom)).expect(StatusStarting)
		waits = append(waits, r.d.RetryAt.Sub(r.now))
		r.step(EvTimer{}).expect(StatusStarting) // too early: nothing starts
		r.fire().expect(StatusStarting, OpCordon)
		assert.Equal(t, attempt+1, r.d.Status.Attempt)
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, waits, "backoff doubles")
	r.ok(OpCordon, failWith(boom)).expect(StatusFailedCordon)
	assert.Contains(t, r.d.Status.Message, "forbidden")
	assert.Contains(t, r.d.Status.Message, "after 3 attempts")
}

func TestBackoffCapped(t *testing.T) {
	p := DefaultLimits()
	var got []time.Duration
	for i := 1; i <= 6; i++ {
		got = append(got, Backoff(i, p.CordonBackoff, p.CordonBackoffMax))
	}
	assert.Equal(t, []time.Duration{1e9, 2e9, 4e9, 8e9, 10e9, 10e9}, got)
}

func TestUnreachableCordonDoesNotUseAttempts(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	for range 20 {
		r.ok(OpCordon, failWith(errors.New("connection refused")), func(e *EvResult) { e.Unreachable = true }).expect(StatusStarting)
		r.fire().expect(StatusStarting, OpCordon)
	}
	assert.Equal(t, 1, r.d.Status.Attempt)
}

func TestEvictionRetriesThenFailsNamingBlockers(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).expect(StatusCordoned, OpEvict)
	pdb := []Blocker{{Kind: BlockerPod, Namespace: "db", Name: "db-0", Reason: "PodDisruptionBudget db/pdb allows 0 disruptions"}}
	refuse := func(e *EvResult) { e.Err = errors.New("1 pod would not go"); e.Blockers = pdb }
	for attempt := 1; attempt < r.p.DrainAttempts; attempt++ {
		r.ok(OpEvict, refuse).expect(StatusDrainRetrying)
		assert.Equal(t, pdb, r.d.Status.Blockers)
		assert.Equal(t, attempt, r.d.Status.Attempt)
		r.fire().expect(StatusDrainRetrying, OpEvict)
		assert.Equal(t, attempt+1, r.d.Status.Attempt)
	}
	r.ok(OpEvict, refuse).expect(StatusFailedDrain)
	assert.Equal(t, pdb, r.d.Status.Blockers)
	assert.True(t, r.d.Status.CordonedByUs, "a failed drain leaves the node cordoned")
	// The agent withdraws after a failure: uncordon.
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
}

func TestEvictionRecoversAfterRetry(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
	r.ok(OpEvict, failWith(errors.New("timeout"))).expect(StatusDrainRetrying)
	r.fire().ok(OpEvict).expect(StatusDrainRetrying, OpFinalGate)
	r.ok(OpFinalGate).ok(OpCheckCordon).expect(StatusComplete)
}

func TestVolumeGateBlocksUntilSafe(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon)
	vol := []Blocker{{Kind: BlockerVolume, Name: "pvc-x", Reason: "last healthy replica", Progress: 45}}
	blocked := func(e *EvResult) { e.Safe = false; e.Blockers = vol }
	r.ok(OpGate, blocked).expect(StatusCordoned)
	assert.Equal(t, vol, r.d.Status.Blockers)
	assert.Contains(t, r.d.Status.Message, "1 volume(s)")
	r.ok(OpGate, blocked) // stale: nothing is waiting for a gate now
	r.fire().expect(StatusCordoned, OpGate)
	r.ok(OpGate, blocked).expect(StatusCordoned)
	assert.Empty(t, r.published(), "an unchanged blocker list is not republished")
	r.fire().ok(OpGate).expect(StatusCordoned, OpEvict)
	assert.Empty(t, r.d.Status.Blockers)
	// The final gate blocks too.
	r.ok(OpEvict).ok(OpFinalGate, blocked).expect(StatusCordoned)
	r.fire().ok(OpFinalGate).expect(StatusCordoned, OpCheckCordon)
}

func TestUncordonedDuringDrainCordonsAgain(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	r.ok(OpCheckCordon, func(e *EvResult) { e.Cordoned = false }).expect(StatusStarting, OpCordon)
	r.ok(OpCordon).expect(StatusCordoned, OpGate)
	r.ok(OpGate).expect(StatusCordoned, OpEvict)
}

func TestOperatorCordonedNodeStaysCordoned(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.ok(OpCordon, func(e *EvResult) { e.ByUs = false }).expect(StatusCordoned, OpGate)
	assert.False(t, r.d.Status.CordonedByUs)
	r.ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon).expect(StatusComplete)
	r.step(EvRequest{}).expect(StatusNotRequested, OpReturnGate) // no uncordon; the return gate
}

func TestWithdrawCancels(t *testing.T) {
	stages := map[string]func(*run){
		"requested": func(r *run) {},
		"starting":  func(r *run) { r.step(EvAdmit{}) },
		"gate":      func(r *run) { r.step(EvAdmit{}).ok(OpCordon) },
		"evicting":  func(r *run) { r.step(EvAdmit{}).ok(OpCordon).ok(OpGate) },
		"retrying":  func(r *run) { r.step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict, failWith(errors.New("x"))) },
	}
	for name, to := range stages {
		t.Run(name, func(t *testing.T) {
			r := newRun(t)
			r.step(EvRequest{Request: req("a")})
			to(r)
			// STARTING: the cordon is in flight and may still land, so the uncordon waits for
			// its result (then runs whatever it was: a no-op on a node without the annotation).
			starting := r.d.Status.Status == StatusStarting
			cordoned := r.d.Status.CordonedByUs
			r.step(EvRequest{})
			if starting {
				r.expect(StatusNotRequested)
				assert.True(t, r.d.UncordonAfter)
			} else if cordoned {
				r.expect(StatusNotRequested, OpUncordon)
			} else {
				r.expect(StatusNotRequested)
			}
			assert.Equal(t, name != "requested", r.has(Cancel{}), "cancel what is under way")
			assert.True(t, r.has(Outcome{}), "withdrawal reported")
			// NOTREQUESTED keeps naming the withdrawn request, so that its agent learns that its
			// operation was cancelled (edgedrainctl withdraw).
			assert.Equal(t, "a", r.d.Status.RequestID)
			require.Equal(t, []DrainStatus{StatusNotRequested}, r.published())
			for _, a := range r.actions {
				if p, ok := a.(Publish); ok {
					assert.Equal(t, "a", p.Status.RequestID, "the published NOTREQUESTED names the withdrawn request")
				}
			}
			// Results of the cancelled drain are ignored.
			r.step(EvResult{Op: OpEvict, RequestID: "a"}).expect(StatusNotRequested)
			assert.Equal(t, OpNone, r.d.RetryOp, "no retry left behind")
			if starting {
				r.step(EvResult{Op: OpCordon, RequestID: "a", ByUs: true}).expect(StatusNotRequested, OpUncordon)
			}
		})
	}
}

// A withdrawal's NOTREQUESTED names the withdrawn request (and its requester), whatever the
// drain had reached; the next request replaces it.
func TestWithdrawnStatusNamesTheRequest(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
	r.ok(OpEvict, failWith(errors.New("x")))
	r.fire().ok(OpEvict, failWith(errors.New("x")))
	r.fire().ok(OpEvict, failWith(errors.New("x"))).expect(StatusFailedDrain)
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
	assert.Equal(t, "a", r.d.Status.RequestID)
	assert.Equal(t, RequesterDeviceOp, r.d.Status.RequestedBy)
	assert.Zero(t, r.d.Status.Attempt)
	r.ok(OpUncordon).expect(StatusNotRequested)
	// The withdrawal delivered again changes nothing.
	r.step(EvRequest{}).expect(StatusNotRequested)
	assert.Empty(t, r.published())
	assert.Equal(t, "a", r.d.Status.RequestID)
	// The next request is named instead.
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested)
	assert.Equal(t, "b", r.d.Status.RequestID)
	r.step(EvRequest{}).expect(StatusNotRequested)
	assert.Equal(t, "b", r.d.Status.RequestID)
}

func TestNewRequestIDRestarts(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
	// The old drain's cordon is undone (the simulation found it kept without an admission slot,
	// blocking other drains' volumes); the new drain waits for that before admission.
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested, OpUncordon)
	assert.True(t, r.has(Cancel{}))
	assert.Equal(t, "b", r.d.Status.RequestID)
	r.step(EvAdmit{}).expect(StatusRequested) // not while uncordoning
	r.step(EvResult{Op: OpEvict, RequestID: "a"}).expect(StatusRequested)
	r.ok(OpUncordon).expect(StatusRequested)
	assert.False(t, r.d.Status.CordonedByUs)
	r.step(EvAdmit{}).expect(StatusStarting, OpCordon)
	r = newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
	r.step(EvRequest{Request: req("b")})
	// The same request delivered again changes nothing.
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested)
	assert.Empty(t, r.actions)
}

func TestUncordonRetriedUntilItWorks(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon)
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
	for range 5 {
		r.ok(OpUncordon, failWith(errors.New("etcd timeout"))).expect(StatusNotRequested)
		assert.True(t, r.d.Status.CordonedByUs)
		assert.Contains(t, r.d.Status.Message, "uncordon failed")
		r.fire().expect(StatusNotRequested, OpUncordon)
	}
	r.ok(OpUncordon).expect(StatusNotRequested, OpReturnGate)
	assert.False(t, r.d.Status.CordonedByUs)
}

func TestNotSupportedAndQueued(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")})
	r.step(EvQueued{Message: "waiting: edge-2 in maintenance"}).expect(StatusRequested)
	assert.Equal(t, "waiting: edge-2 in maintenance", r.d.Status.Message)
	r.step(EvNotSupported{Reason: "single node"}).expect(StatusNotSupported)
	assert.True(t, r.has(Outcome{}))
	r.step(EvAdmit{}).expect(StatusNotSupported) // too late: no drain
}

func TestAPIUnreachable(t *testing.T) {
	t.Run("safe volumes let the operation proceed", func(t *testing.T) {
		r := newRun(t)
		r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon).ok(OpGate)
		r.step(EvAPIUnreachable{For: 5 * time.Minute, Safe: true}).expect(StatusComplete)
		assert.True(t, r.has(Cancel{}))
		assert.Contains(t, r.d.Status.Message, "unreachable for 5m0s")
		assert.True(t, r.d.Status.APIUnreachable, "the COMPLETE says it is the rule's, for the agent")
		r.step(EvPublishFailed{}).expect(StatusCordoned)
		assert.False(t, r.d.Status.APIUnreachable, "checked again, the drain is no longer the rule's")
	})
	t.Run("unsafe volumes keep blocking and say why", func(t *testing.T) {
		r := newRun(t)
		r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).ok(OpCordon)
		vol := []Blocker{{Kind: BlockerVolume, Name: "pvc-x", Reason: "last healthy replica"}}
		r.step(EvAPIUnreachable{For: 6 * time.Minute, Blockers: vol}).expect(StatusCordoned)
		assert.Contains(t, r.d.Status.Message, "not proceeding")
		assert.Equal(t, vol, r.d.Status.Blockers)
	})
	t.Run("idle node is not touched", func(t *testing.T) {
		r := newRun(t)
		r.step(EvAPIUnreachable{For: time.Hour, Safe: true}).expect(StatusNotRequested)
		assert.Empty(t, r.actions)
	})
}

func TestResume(t *testing.T) {
	a := req("a")
	tests := []struct {
		name   string
		status DrainStatus
		req    *NodeDrainRequest
		byUs   bool
		want   DrainStatus
		starts []Op
		timer  Op
	}{
		{name: "requested waits for admission", status: StatusRequested, req: a, want: StatusRequested},
		{name: "starting redoes the idempotent cordon", status: StatusStarting, req: a, want: StatusStarting, starts: []Op{OpCordon}},
		{name: "cordoned redoes the gate", status: StatusCordoned, req: a, byUs: true, want: StatusCordoned, starts: []Op{OpGate}},
		{name: "retrying schedules the next attempt now", status: StatusDrainRetrying, req: a, byUs: true, want: StatusDrainRetrying, timer: OpEvict},
		{name: "complete waits for the withdrawal", status: StatusComplete, req: a, byUs: true, want: StatusComplete},
		{name: "withdrawn while we were down uncordons", status: StatusComplete, byUs: true, want: StatusNotRequested, starts: []Op{OpUncordon}},
		{name: "idle with our cordon left uncordons", status: StatusNotRequested, byUs: true, want: StatusNotRequested, starts: []Op{OpUncordon}},
		{name: "idle stays idle", status: StatusNotRequested, want: StatusNotRequested},
		{name: "new request while we were down", status: StatusComplete, req: req("b"), byUs: true, want: StatusRequested, starts: []Op{OpUncordon}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NodeDrainStatus{Node: "edge-1.shop", RequestID: "a", Status: tt.status, Attempt: 2, CordonedByUs: tt.byUs}
			d, actions := Resume(st, tt.req, t0, testPolicy())
			assert.Equal(t, tt.want, d.Status.Status)
			var starts []Op
			for _, a := range actions {
				if s, ok := a.(Start); ok {
					starts = append(starts, s.Op)
				}
			}
			assert.Equal(t, tt.starts, starts)
			assert.Equal(t, tt.timer, d.RetryOp)
			if tt.timer == OpEvict {
				d, actions = Step(d, EvTimer{}, t0, testPolicy())
				require.Len(t, actions, 2)
				assert.Equal(t, Start{Op: OpEvict, Attempt: 3}, actions[0])
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	require.NoError(t, DefaultLimits().Validate())
	bad := map[string]func(*Limits){
		"cordon attempts": func(p *Limits) { p.CordonAttempts = 0 },
		"drain attempts":  func(p *Limits) { p.DrainAttempts = -1 },
		"attempt timeout": func(p *Limits) { p.DrainAttemptTimeout = 0 },
		"cordon backoff":  func(p *Limits) { p.CordonBackoffMax = p.CordonBackoff / 2 },
		"drain backoff":   func(p *Limits) { p.DrainBackoff = -1 },
		"gate recheck":    func(p *Limits) { p.GateRecheck = 0 },
	}
	for name, mod := range bad {
		t.Run(name, func(t *testing.T) {
			p := DefaultLimits()
			mod(&p)
			err := p.Validate()
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), strings.Fields(name)[0]), err.Error())
		})
	}
}

// Regression (simulation, seed 776): the cordon was applied but its reply was lost (a transport
// error: retried, CordonedByUs unknown); the request is withdrawn before the retry. The node
// carries edgedrain's annotation, so the withdrawal must uncordon it, or it stays cordoned.
func TestWithdrawAfterLostCordonReplyUncordons(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.step(EvResult{Op: OpCordon, RequestID: "a", Err: errors.New("connection reset"), Unreachable: true})
	require.Equal(t, StatusStarting, r.d.Status.Status)
	require.False(t, r.d.Status.CordonedByUs)
	r.step(EvRequest{})
	r.expect(StatusNotRequested, OpUncordon)
}

// Regression (simulation, seed 1421): withdrawn while the cordon write was in flight, the
// uncordon read the node before the cordon landed, found nothing of ours, and the node stayed
// cordoned. The uncordon now waits for the cordon's result; a new request meanwhile is not
// admitted before it is done.
func TestWithdrawDuringCordonUncordonsAfterIt(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{}).expect(StatusStarting, OpCordon)
	r.step(EvRequest{}).expect(StatusNotRequested)
	r.step(EvRequest{Request: req("b")}).expect(StatusRequested)
	r.step(EvAdmit{}).expect(StatusRequested) // not admitted while the old cordon is pending
	r.step(EvResult{Op: OpCordon, RequestID: "a", ByUs: true}).expect(StatusRequested, OpUncordon)
	r.ok(OpUncordon).expect(StatusRequested)
	r.step(EvAdmit{}).expect(StatusStarting, OpCordon)
}

// Regression (simulation, seed 457): the coordinator crashed during the last eviction attempt
// (status DRAINRETRYING "eviction attempt 5"); resumed, it started attempt 6 of 5.
func TestResumeNeverPassesTheAttemptLimit(t *testing.T) {
	p := testPolicy()
	st := NodeDrainStatus{Node: "edge-1.shop", RequestID: "a", Status: StatusDrainRetrying, Attempt: p.DrainAttempts, CordonedByUs: true}
	d, _ := Resume(st, req("a"), t0, p)
	require.Equal(t, OpEvict, d.RetryOp)
	require.Equal(t, p.DrainAttempts, d.NextAttempt, "the interrupted last attempt is redone as itself")
	st.Attempt = 2
	d, _ = Resume(st, req("a"), t0, p)
	require.Equal(t, 3, d.NextAttempt, "after a failed attempt 2 comes attempt 3")
}

// Regression (review): resumed in REQUESTED with our cordon still on (stopped while undoing it
// for a replaced request), the drain undoes the cordon and is not admitted before that is done.
func TestResumeQueuedWithOurCordonUncordons(t *testing.T) {
	st := NodeDrainStatus{Node: "edge-1.shop", RequestID: "b", Status: StatusRequested, CordonedByUs: true}
	d, actions := Resume(st, req("b"), t0, testPolicy())
	require.Equal(t, OpUncordon, d.Waiting)
	require.Len(t, actions, 1)
	d, _ = Step(d, EvAdmit{}, t0, testPolicy())
	require.Equal(t, StatusRequested, d.Status.Status, "not admitted while uncordoning")
}

// The API-unreachable rule is for a drain under way: one whose cordon the API confirmed. A drain
// whose cordon never answered (it may have landed, its reply lost) has not begun to empty the node:
// it stays STARTING (the simulation found such a COMPLETE letting a node down undrained); withdrawn,
// it still uncordons, since its cordon may have landed (simulation, seed 49979).
func TestAPIUnreachableRuleNeedsAConfirmedCordon(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.step(EvResult{Op: OpCordon, RequestID: "a", Err: errors.New("connection refused"), Unreachable: true})
	r.step(EvAPIUnreachable{For: 5 * time.Minute, Safe: true}).expect(StatusStarting)
	assert.Contains(t, r.d.Status.Message, "cordon was never confirmed")
	assert.False(t, r.has(Cancel{}))
	r.step(EvRequest{}).expect(StatusNotRequested, OpUncordon)
}

// A drain whose last cordon check found no Node object does not go COMPLETE by the
// API-unreachable rule: the cordon the API confirmed was the deleted object's, and the name may
// have registered again schedulable (simulation, seed 2065). A check that finds the node again
// gives the rule back.
func TestAPIUnreachableRuleNeedsTheNodeSeenSinceItWentMissing(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon, func(e *EvResult) { e.Missing, e.Cordoned = true, false })
	r.expect(StatusCordoned)
	r.step(EvAPIUnreachable{For: 5 * time.Minute, Safe: true}).expect(StatusCordoned)
	assert.Contains(t, r.d.Status.Message, "Node object was missing")
	assert.False(t, r.has(Cancel{}))

	r.fire().ok(OpFinalGate).ok(OpCheckCordon, failWith(errors.New("connection refused")))
	r.step(EvAPIUnreachable{For: 6 * time.Minute, Safe: true}).expect(StatusCordoned)
	assert.Contains(t, r.d.Status.Message, "Node object was missing", "an error tells nothing of the node")

	r.fire().ok(OpFinalGate).ok(OpCheckCordon, failWith(nil)).expect(StatusComplete)
	r2 := newRun(t)
	r2.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r2.ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon, func(e *EvResult) { e.Missing, e.Cordoned = true, false })
	r2.fire().ok(OpFinalGate).ok(OpCheckCordon, func(e *EvResult) { e.Cordoned = false })
	r2.expect(StatusStarting, OpCordon) // found again, uncordoned: cordoned again
}

// A COMPLETE that could not be published is checked again (volumes, cordon) after GateRecheck,
// not at once: a bus that refuses writes immediately must not make a loop of checks.
func TestUnpublishedCompleteIsCheckedAgainAfterAPause(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon).expect(StatusComplete)
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	assert.Equal(t, OpFinalGate, r.d.RetryOp)
	assert.Equal(t, r.now.Add(r.p.GateRecheck), r.d.RetryAt)
	r.fire().expect(StatusCordoned, OpFinalGate)
	r.ok(OpFinalGate).ok(OpCheckCordon).expect(StatusComplete)
}

// A COMPLETE of the API-unreachable rule that could not be published is checked again from the
// start, eviction included: its pods were never evicted (simulation, seed 771705: from the
// final gate it went COMPLETE with a pod still on the node once the API was back).
func TestUnpublishedCompleteOfTheAPIRuleEvictsFirst(t *testing.T) {
	r := newRun(t)
	r.step(EvRequest{Request: req("a")}).step(EvAdmit{})
	r.ok(OpCordon).ok(OpGate)
	r.step(EvAPIUnreachable{For: time.Hour, Safe: true}).expect(StatusComplete)
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	assert.Equal(t, OpGate, r.d.RetryOp)
	assert.Contains(t, r.d.Status.Message, "the pods")
	r.fire().expect(StatusCordoned, OpGate)
	r.ok(OpGate).expect(StatusCordoned, OpEvict)
	r.ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon).expect(StatusComplete)
}
