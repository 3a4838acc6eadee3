package nodedrain

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decommissionReq(id string) *NodeDrainRequest {
	r := req(id)
	r.Context = "decommission disk worn out"
	return r
}

// drainedForDecommission runs a decommission up to the checks before COMPLETE.
func drainedForDecommission(t *testing.T) *run {
	r := newRun(t).step(EvRequest{Request: decommissionReq("d1")})
	require.True(t, r.d.Status.Decommission)
	r.step(EvAdmit{}).ok(OpCordon).ok(OpGate).ok(OpEvict).ok(OpFinalGate)
	return r
}

func TestDeclaresDecommission(t *testing.T) {
	for ctx, want := range map[string]bool{"decommission": true, "decommission disk failed": true,
		"decommissioned": false, "reboot decommission": false, "": false, " decommission": false} {
		r := NodeDrainRequest{RequestedBy: RequesterDeviceOp, Context: ctx}
		assert.Equal(t, want, DeclaresDecommission(r), "context %q", ctx)
	}
	assert.False(t, DeclaresDecommission(NodeDrainRequest{RequestedBy: RequesterUpdate, Context: "decommission"}),
		"only DEVICEOP decommissions")
}

func TestDecommissionDeletesTheNodeBeforeComplete(t *testing.T) {
	r := drainedForDecommission(t)
	r.expect(StatusCordoned, OpCheckCordon)
	for _, a := range r.actions {
		if s, ok := a.(Start); ok {
			assert.True(t, s.Decommission, "the gates and checks are told it is a decommission")
		}
	}
	r.ok(OpCheckCordon).expect(StatusCordoned, OpDeleteNode)
	assert.Contains(t, r.d.Status.Message, "deleting its Node object")
	r.ok(OpDeleteNode).expect(StatusComplete)
	assert.True(t, r.d.Status.SlotReleased, "a node out of the cluster holds no slot")
	assert.True(t, r.d.Decommissioned())
	assert.False(t, r.d.Status.CordonedByUs, "the Node is gone: nothing to uncordon")
	assert.Equal(t, OpForget, r.d.RetryOp, "keys removed after the linger if nobody withdraws")
	assert.Equal(t, r.now.Add(r.p.DecommissionLinger), r.d.RetryAt)

	// The agent withdraws once its command ran: NOTREQUESTED names the request (an agent that
	// did not withdraw it learns it was), nothing is uncordoned, no return gate holds a slot,
	// and the keys go after the linger.
	r.step(EvRequest{}).expect(StatusNotRequested)
	assert.Equal(t, []DrainStatus{StatusNotRequested}, r.published())
	assert.Equal(t, "d1", r.d.Status.RequestID)
	assert.False(t, r.d.Returning())
	assert.NotContains(t, startedOps(r.actions), OpUncordon)
	assert.Equal(t, OpForget, r.d.RetryOp)
	assert.Equal(t, r.now.Add(r.p.DecommissionLinger), r.d.RetryAt)
	r.fire().expect(StatusNotRequested, OpForget)
	r.ok(OpForget)
	assert.Contains(t, r.actions, Action(Forgotten{}))
	assert.Equal(t, StatusNotRequested, r.d.Status.Status)
	assert.Empty(t, r.d.Status.RequestID)
}

func TestDecommissionForgetsAfterTheLinger(t *testing.T) {
	r := drainedForDecommission(t).ok(OpCheckCordon).ok(OpDeleteNode)
	r.fire().expect(StatusComplete, OpForget)
	// The echo of the request's removal by this very forget changes nothing (simulation, seed
	// 754416: it restarted the linger and published NOTREQUESTED, a status for a node gone).
	r.step(EvRequest{}).expect(StatusComplete)
	assert.Empty(t, r.actions, "no Cancel, no publication")
	assert.Equal(t, OpForget, r.d.Waiting)
	r.step(EvResult{Op: OpForget, RequestID: "d1", Err: errors.New("bus down")})
	assert.Equal(t, OpForget, r.d.RetryOp, "a failed removal is retried")
	assert.NotContains(t, r.actions, Action(Forgotten{}))
	// The request goes first: its removal's echo after the status's removal failed is no
	// withdrawal either (no NOTREQUESTED, no new linger).
	r.step(EvRequest{}).expect(StatusComplete)
	assert.Empty(t, r.published())
	assert.Equal(t, OpForget, r.d.RetryOp)
	assert.Equal(t, r.now.Add(r.p.UncordonRetry), r.d.RetryAt)
	r.fire().ok(OpForget)
	assert.Contains(t, r.actions, Action(Forgotten{}))
}

func TestDecommissionNodeDeletionFailures(t *testing.T) {
	r := drainedForDecommission(t).ok(OpCheckCordon)
	r.step(EvResult{Op: OpDeleteNode, RequestID: "d1", Err: errors.New("forbidden")})
	assert.Equal(t, StatusCordoned, r.d.Status.Status)
	assert.Equal(t, OpFinalGate, r.d.RetryOp, "time passes before the next try: the checks before COMPLETE run again")
	r.fire().ok(OpFinalGate).ok(OpCheckCordon).expect(StatusCordoned, OpDeleteNode)
	// Found uncordoned at the deletion: cordoned again, never deleted schedulable.
	r.step(EvResult{Op: OpDeleteNode, RequestID: "d1"}).expect(StatusStarting, OpCordon)
}

func TestDecommissionWaitsForTheAPI(t *testing.T) {
	r := drainedForDecommission(t)
	r.step(EvAPIUnreachable{For: time.Hour, Safe: true})
	assert.Equal(t, StatusCordoned, r.d.Status.Status, "the API-unreachable exception does not decommission")
	assert.Contains(t, r.d.Status.Message, "a decommission waits")
}

func TestDecommissionResume(t *testing.T) {
	r := drainedForDecommission(t).ok(OpCheckCordon).ok(OpDeleteNode)
	st := r.d.Status
	p := testPolicy()
	// Request withdrawn while no coordinator ran: NOTREQUESTED names it, the keys go later.
	d, actions := Resume(st, nil, t0.Add(time.Hour), p)
	assert.Empty(t, startedOps(actions))
	assert.Equal(t, StatusNotRequested, d.Status.Status)
	assert.Equal(t, OpForget, d.RetryOp)
	// Resumed again after that withdrawal, past the linger: the keys go now.
	d, actions = Resume(d.Status, nil, d.Status.UpdatedAt.Add(p.DecommissionLinger), p)
	assert.Equal(t, []Op{OpForget}, startedOps(actions))
	assert.True(t, d.Decommissioned())
	// Request still there: the linger goes on from the COMPLETE.
	d, actions = Resume(st, decommissionReq("d1"), st.UpdatedAt.Add(time.Minute), p)
	assert.Empty(t, actions)
	assert.Equal(t, OpForget, d.RetryOp)
	assert.Equal(t, st.UpdatedAt.Add(p.DecommissionLinger), d.RetryAt)
	// A new machine with the name asks for a reboot: a new drain, no return gate.
	r.step(EvRequest{Request: req("r2")})
	assert.Equal(t, StatusRequested, r.d.Status.Status)
	assert.False(t, r.d.Returning())
	assert.False(t, r.d.Status.Decommission)
	assert.NotContains(t, startedOps(r.actions), OpForget)
}

func startedOps(actions []Action) []Op {
	var out []Op
	for _, a := range actions {
		if s, ok := a.(Start); ok {
			out = append(out, s.Op)
		}
	}
	return out
}

func TestAdmissionNeverLetsADecommissionProceedUndrained(t *testing.T) {
	d := Drain{Status: NodeDrainStatus{Node: "a", Status: StatusRequested, RequestID: "d1"}, Request: decommissionReq("d1")}
	d.Request.Node = "a"
	adm := Admit(map[string]Drain{"a": d}, []NodeInfo{{Name: "a", Ready: true, Schedulable: true}}, 1)
	assert.Empty(t, adm.NotSupported, "a single node cannot be decommissioned undrained")
	assert.Contains(t, adm.Queued["a"], "a decommission waits")
	assert.False(t, slices.Contains(adm.Admit, "a"))
}

// A withdrawal while the Node deletion is in flight waits for it: deleted, the node's keys go
// (no uncordon of a Node that is gone); not deleted, the node is uncordoned as after any drain.
func TestDecommissionWithdrawnWhileTheNodeIsDeleted(t *testing.T) {
	r := drainedForDecommission(t).ok(OpCheckCordon).expect(StatusCordoned, OpDeleteNode)
	r.step(EvRequest{})
	assert.Equal(t, OpDeleteNode, r.d.Waiting, "the deletion already sent is waited for")
	assert.NotContains(t, startedOps(r.actions), OpUncordon)
	deleted := *r
	deleted.ok(OpDeleteNode).expect(StatusNotRequested)
	assert.Equal(t, OpForget, deleted.d.RetryOp, "deleted: its keys go after the linger")
	deleted.fire().ok(OpForget)
	assert.Contains(t, deleted.actions, Action(Forgotten{}))

	r.step(EvResult{Op: OpDeleteNode, RequestID: "d1", Err: errors.New("context canceled")}).expect(StatusNotRequested, OpUncordon)
}

// A decommission's COMPLETE does not keep a planned whole-cluster shutdown from being declared:
// its node is out of the cluster, once that COMPLETE is on the bus. Decided but not yet
// published it may go back to CORDONED (its publication failing), the node still in the
// cluster (simulation, seed 1310013, R2).
func TestDecommissionedNodeDoesNotHoldBackAClusterShutdown(t *testing.T) {
	r := drainedForDecommission(t).ok(OpCheckCordon).ok(OpDeleteNode)
	require.True(t, r.d.Decommissioned())
	shutdownOf := func(gone Drain) map[string]Drain {
		sd := func(node string) Drain {
			q := &NodeDrainRequest{Node: node, RequestID: node + "-s", RequestedAt: t0, RequestedBy: RequesterDeviceOp, Context: ClusterShutdownContext}
			return Drain{Status: NodeDrainStatus{Node: node, Status: StatusRequested, RequestID: q.RequestID}, Request: q}
		}
		return map[string]Drain{"edge-1.shop": gone, "b": sd("b"), "c": sd("c")}
	}
	ready := []NodeInfo{{Name: "b", Ready: true, Schedulable: true}, {Name: "c", Ready: true, Schedulable: true}}
	assert.False(t, Admit(shutdownOf(r.d), ready, 1).WholeCluster, "its COMPLETE is not on the bus yet")
	r.step(EvPublished{Status: StatusComplete, Holds: false})
	gone := r.d
	assert.True(t, Admit(shutdownOf(gone), ready, 1).WholeCluster)
}

// A Node found missing at its deletion counts as deleted only once missing for NodeGoneAfter:
// one deleted by someone else may register again, and is then drained again (simulation, seed
// 772961: COMPLETE went out while the Node came back, uncordoned).
func TestDecommissionWaitsForAMissingNode(t *testing.T) {
	r := drainedForDecommission(t).ok(OpCheckCordon).expect(StatusCordoned, OpDeleteNode)
	missing := func(e *EvResult) { e.Missing = true }
	r.ok(OpDeleteNode, missing).expect(StatusCordoned)
	assert.Contains(t, r.d.Status.Message, "missing (registering again?)")
	r.fire().ok(OpFinalGate).ok(OpCheckCordon).ok(OpDeleteNode, missing).expect(StatusCordoned)
	// It registered again, uncordoned: drained again from the cordon.
	back := *r
	back.fire().ok(OpFinalGate).step(EvResult{Op: OpCheckCordon, RequestID: "d1", At: back.now}).expect(StatusStarting, OpCordon)
	// Still missing a minute after it was first found so: deleted.
	r.now = r.d.MissingSince.Add(NodeGoneAfter)
	r.step(EvTimer{}).ok(OpFinalGate).ok(OpCheckCordon).ok(OpDeleteNode, missing).expect(StatusComplete)
	assert.True(t, r.d.Decommissioned())
}

// The deletion names the Node object the drain emptied (the UID its cordon and checks found):
// an object registered under the name since (deleted, and its kubelet registering it again) is
// not deleted, and is drained anew from the cordon.
func TestDecommissionDeletesOnlyTheNodeItDrained(t *testing.T) {
	r := newRun(t).step(EvRequest{Request: decommissionReq("d1")})
	uid := func(e *EvResult) { e.UID = "uid-1" }
	r.step(EvAdmit{}).ok(OpCordon, uid).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon, uid)
	r.expect(StatusCordoned, OpDeleteNode)
	var start Start
	for _, a := range r.actions {
		if s, ok := a.(Start); ok {
			start = s
		}
	}
	assert.Equal(t, "uid-1", start.UID, "the deletion names the object drained")
	r.step(EvResult{Op: OpDeleteNode, RequestID: "d1", UID: "uid-2"}).expect(StatusStarting, OpCordon)
	assert.Contains(t, r.d.Status.Message, "replaced before its deletion")
	assert.False(t, r.d.Decommissioned())
}

// A decommission whose cordon is found someone else's before it deletes the Node (an operator
// uncordoned the node and cordoned it again: pods may have landed in between) drains the node
// again under that cordon, as any drain does, before it deletes anything.
func TestDecommissionDrainsAgainUnderARecordon(t *testing.T) {
	r := drainedForDecommission(t)
	r.ok(OpCheckCordon, func(e *EvResult) { e.Foreign = true }).expect(StatusStarting, OpCordon)
	assert.Contains(t, r.d.Status.Message, "cordoned again by someone else")
}

// A decommission's COMPLETE whose publication failed is not sent later as it was: a Node
// registered under the name meanwhile is in the cluster again, and the agent would power it off
// (simulation, D1). Until a publication of it is acknowledged it is checked again as any
// COMPLETE is, keeping SlotReleased (its Node object is gone).
func TestDecommissionCompleteNotPublishedIsCheckedAgain(t *testing.T) {
	uid := func(id string) func(*EvResult) { return func(e *EvResult) { e.UID = id } }
	missing := func(e *EvResult) { e.Missing = true }
	r := newRun(t).step(EvRequest{Request: decommissionReq("d1")})
	r.step(EvAdmit{}).ok(OpCordon, uid("uid-1")).ok(OpGate).ok(OpEvict).ok(OpFinalGate).ok(OpCheckCordon, uid("uid-1"))
	r.ok(OpDeleteNode).expect(StatusComplete)
	require.True(t, r.d.BusHolds, "the bus shows CORDONED until the COMPLETE is acknowledged")
	r.step(EvPublishFailed{}).expect(StatusCordoned)
	assert.Equal(t, OpFinalGate, r.d.RetryOp)
	assert.True(t, r.d.Decommissioned(), "its Node object is gone")

	// Withdrawn meanwhile (the COMPLETE may have landed, its reply lost): a decommissioned
	// node's keys go; nothing to uncordon.
	withdrawn := *r
	withdrawn.step(EvRequest{}).expect(StatusNotRequested)
	assert.Equal(t, OpForget, withdrawn.d.RetryOp)

	// Still missing: COMPLETE again at once, not after another NodeGoneAfter (the agent's pod
	// outlives its Node by less than that).
	again := *r
	again.fire().ok(OpFinalGate).ok(OpCheckCordon).ok(OpDeleteNode, missing).expect(StatusComplete)
	assert.True(t, again.d.Decommissioned())
	// Once acknowledged, a later publication that fails (a repair) is retried as it is.
	again.step(EvPublished{Status: StatusComplete}).step(EvPublishFailed{}).expect(StatusComplete)

	// Registered again under the name: a new node, drained from the cordon before it is deleted.
	r.fire().ok(OpFinalGate).ok(OpCheckCordon, uid("uid-2")).expect(StatusStarting, OpCordon)
	assert.False(t, r.d.Decommissioned())
}

// The deletion carries when the checks that decided it began: the executor does not send it
// on checks a pause has made old (the status write before it held up), and its refusal sends
// the drain back through every check at once, the Node's time missing still counted
// (simulation, seed 2146338: COMPLETE after a 29 s pause while a blocker had appeared).
func TestDecommissionIsNotDeletedOnStaleChecks(t *testing.T) {
	r := drainedForDecommission(t)
	checked := r.now
	r.step(EvResult{Op: OpCheckCordon, RequestID: "d1", Cordoned: true, At: checked}).expect(StatusCordoned, OpDeleteNode)
	var del Start
	for _, a := range r.actions {
		if s, ok := a.(Start); ok && s.Op == OpDeleteNode {
			del = s
		}
	}
	assert.Equal(t, checked, del.CheckedAt, "the deletion names when its checks began")

	missing := func(e *EvResult) { e.Missing = true }
	r.ok(OpDeleteNode, missing).expect(StatusCordoned)
	since := r.d.MissingSince
	require.False(t, since.IsZero())
	r.fire().ok(OpFinalGate).ok(OpCheckCordon).expect(StatusCordoned, OpDeleteNode)
	r.now = r.now.Add(MaxCheckAge + time.Second)
	r.step(EvResult{Op: OpDeleteNode, RequestID: "d1", Err: ErrChecksStale}).expect(StatusCordoned, OpFinalGate)
	assert.Contains(t, r.d.Status.Message, "not deleting the Node object")
	assert.Equal(t, since, r.d.MissingSince, "the Node's time missing still counts")
	assert.NotEqual(t, StatusComplete, r.d.Status.Status)
}
