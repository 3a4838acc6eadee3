package nodedrain

import (
	"errors"
	"fmt"
	"time"
)

// This file is the coordinator's drain of one node as a pure state machine (DESIGN §3):
// Step(drain, event, now, policy) returns the next drain and the actions to take. It does no I/O
// and reads no clock; retries, backoff and timeouts arrive as events. The coordinator's executor
// performs the actions (Kubernetes and bus I/O) and feeds their results back as events.
//
//	NOTREQUESTED -> REQUESTED -> STARTING -> CORDONED -> (gate) -> (evict) -> (gate) -> COMPLETE
//	                    |            \-> FAILEDCORDON           \-> DRAINRETRYING -> ... -> FAILEDDRAIN
//	                    \-> NOTSUPPORTED (no other node to drain to)
//
// A withdrawn request cancels whatever is under way, uncordons the node if the coordinator
// cordoned it, and returns to NOTREQUESTED. A new request ID for the node starts over.

// Op is the I/O operation a drain is waiting on; results for any other op are stale and ignored.
type Op int

// Operations the machine asks the executor to perform.
const (
	OpNone        Op = iota
	OpCordon         // cordon the node, recording that edgedrain did
	OpGate           // ask the volume gate before eviction
	OpEvict          // one eviction attempt, bounded by Policy.DrainAttemptTimeout
	OpFinalGate      // ask the volume gate again before COMPLETE
	OpCheckCordon    // confirm the node is still cordoned before COMPLETE
	OpUncordon       // uncordon the node (only ever one edgedrain cordoned)
	OpReturnGate     // check a node back from its operation is healthy again (the return gate)
	OpDeleteNode     // decommission: delete the drained node's Node object (if still cordoned)
	OpForget         // decommission: remove the node's status (and its request, if still this one) from the bus
)

var opNames = [...]string{"none", "cordon", "volume gate", "eviction", "final volume gate", "cordon check", "uncordon", "return gate",
	"node deletion", "forget"}

func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Limits holds the retry limits and delays of a drain (not a policy: the maintenance policy is
// package policy's, the volume policy package volumes'). DefaultLimits gives the defaults.
type Limits struct {
	// CordonAttempts is how many cordon attempts are made before FAILEDCORDON (≥ 1).
	CordonAttempts int
	// CordonBackoff is the wait after the first failed cordon; it doubles up to CordonBackoffMax.
	CordonBackoff, CordonBackoffMax time.Duration
	// DrainAttempts is how many eviction attempts are made before FAILEDDRAIN (≥ 1).
	DrainAttempts int
	// DrainAttemptTimeout bounds one eviction attempt (> 0).
	DrainAttemptTimeout time.Duration
	// DrainBackoff is the wait after the first failed eviction attempt; it doubles up to DrainBackoffMax.
	DrainBackoff, DrainBackoffMax time.Duration
	// GateRecheck is how often a blocking volume gate (and the return gate) is asked again
	// (> 0): the safety net behind GateReact.
	GateRecheck time.Duration
	// GateReact is how soon a blocking gate is asked again after something it depends on
	// changed (EvChanged): a Longhorn object, a VolumeAttachment, a pod, a node. Changes within
	// it are taken together, and never sooner than the last check took, so that checks take at
	// most half the time however often things change (≥ 0; above GateRecheck it is GateRecheck).
	GateReact time.Duration
	// UncordonRetry is the wait between failed uncordons; they are retried until one succeeds.
	UncordonRetry time.Duration
	// ReturnTimeout bounds the return gate: a node back from its operation holds its admission
	// slot until it is healthy again (Ready, its replicas rebuilt, its pods Ready), at most this
	// long, then releases it anyway. Zero: no return gate (the slot is released at withdrawal).
	ReturnTimeout time.Duration
	// DecommissionLinger is how long a decommissioned node's COMPLETE stays on the bus when its
	// agent does not withdraw the request (the machine was powered off): then the coordinator
	// removes the node's request and status itself. Zero: only the withdrawal removes them.
	DecommissionLinger time.Duration
}

// DefaultLimits returns DESIGN §3's defaults: 10 cordon attempts backing off 1 s doubling to
// 10 s; 5 eviction attempts of at most 5 minutes each, backing off 5 s doubling to 1 minute.
func DefaultLimits() Limits {
	return Limits{
		CordonAttempts: 10, CordonBackoff: time.Second, CordonBackoffMax: 10 * time.Second,
		DrainAttempts: 5, DrainAttemptTimeout: 5 * time.Minute,
		DrainBackoff: 5 * time.Second, DrainBackoffMax: time.Minute,
		GateRecheck: 2 * time.Second, GateReact: 50 * time.Millisecond, UncordonRetry: 2 * time.Second,
		ReturnTimeout: 15 * time.Minute, DecommissionLinger: 10 * time.Minute,
	}
}

// Validate reports a policy the machine cannot run.
func (p Limits) Validate() error {
	switch {
	case p.CordonAttempts < 1:
		return fmt.Errorf("cordon attempts must be at least 1, got %d", p.CordonAttempts)
	case p.DrainAttempts < 1:
		return fmt.Errorf("drain attempts must be at least 1, got %d", p.DrainAttempts)
	case p.DrainAttemptTimeout <= 0:
		return fmt.Errorf("drain attempt timeout must be positive, got %s", p.DrainAttemptTimeout)
	case p.CordonBackoff < 0 || p.CordonBackoffMax < p.CordonBackoff:
		return fmt.Errorf("cordon backoff %s..%s: want 0 ≤ initial ≤ max", p.CordonBackoff, p.CordonBackoffMax)
	case p.DrainBackoff < 0 || p.DrainBackoffMax < p.DrainBackoff:
		return fmt.Errorf("drain backoff %s..%s: want 0 ≤ initial ≤ max", p.DrainBackoff, p.DrainBackoffMax)
	case p.GateRecheck <= 0 || p.UncordonRetry <= 0:
		return fmt.Errorf("gate recheck (%s) and uncordon retry (%s) must be positive", p.GateRecheck, p.UncordonRetry)
	case p.ReturnTimeout < 0:
		return fmt.Errorf("return timeout must not be negative, got %s", p.ReturnTimeout)
	case p.GateReact < 0:
		return fmt.Errorf("gate reaction delay must not be negative, got %s", p.GateReact)
	case p.DecommissionLinger < 0:
		return fmt.Errorf("decommission linger must not be negative, got %s", p.DecommissionLinger)
	}
	return nil
}

// Backoff returns base doubled (failures-1) times, capped at max: the wait after the given
// number of consecutive failures. The coordinator and the agent both back off this way.
func Backoff(failures int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Drain is the coordinator's state for one node. Status is what is published; everything else
// can be rebuilt from the bus and the cluster after a restart (see Resume).
type Drain struct {
	// Status is the node's current status, as published.
	Status NodeDrainStatus
	// ResumedAt is when this coordinator rebuilt the drain from a status on the bus (Resume), on
	// its own clock: the times in that status were written on the clock of whoever wrote it (another
	// replica), and a timeout counted from one of them starts no earlier than this.
	ResumedAt time.Time
	// Request is the request being served; nil when there is none.
	Request *NodeDrainRequest
	// Waiting is the operation whose result the drain waits for (OpNone: none in flight).
	Waiting Op
	// RetryOp is started at RetryAt (a backoff or a recheck); OpNone when no timer is set.
	RetryOp Op
	// RetryAt is when RetryOp starts.
	RetryAt time.Time
	// NextAttempt is the attempt number RetryOp starts as (cordon and eviction retries).
	NextAttempt int
	// GateSafe is whether the volume gate's latest answer for this drain said safe.
	GateSafe bool
	// Evicted says an eviction attempt of this drain succeeded since it was (last) cordoned: a
	// COMPLETE without it came from the API-unreachable rule.
	Evicted bool
	// MissingSince is when a decommission's Node deletion first found the Node missing (zero:
	// it did not); it counts as gone once missing for NodeGoneAfter.
	MissingSince time.Time
	// ForgetFailed says the last removal of a decommissioned node's keys (OpForget) failed: it
	// is retried (Forgetting).
	ForgetFailed bool
	// NodeMissing says the last cordon check found no Node object (deleted; registering again?):
	// the cordon the API confirmed was the old object's, so the API-unreachable rule does not
	// apply until a check finds the node again.
	NodeMissing bool
	// NodeUID is the UID of the Node object the drain's cordon found (empty: not known, as
	// after a resume): another one before COMPLETE is a new Node (the drained one was deleted
	// and the name registered again), which the drain starts over on.
	NodeUID string
	// UncordonAfter says the drain that cordoned was withdrawn or replaced while its cordon was
	// in flight: a write already sent may still land, so the uncordon waits for that cordon's
	// result (Waiting stays OpCordon) and starts then, whatever it was.
	UncordonAfter bool
	// CordonKnown says a cordon of this drain answered, so CordonedByUs is known (false: someone
	// else had cordoned the node). Unknown (a lost reply, COMPLETE without a cordon answer), a
	// withdrawal uncordons: the uncordon only ever undoes edgedrain's own annotation.
	CordonKnown bool
	// UncordonedRV is the Node's resourceVersion as this drain's last uncordon left it (written,
	// or read with no record of edgedrain's on it); empty: not known. A node view older than it
	// may still show the record that uncordon removed: it is no cordon that landed late.
	UncordonedRV string
	// BusHolds says the bus may still show this drain in maintenance: a slot-holding status of
	// it was published (or its publication may have landed), and no status that frees the slot
	// is known to have replaced it there yet. The slot stays taken meanwhile (S3 is about what
	// the bus shows, not only what this coordinator decided).
	BusHolds bool
	// Reactive says RetryOp rechecks a gate that answered blocked on something an informer sees
	// change (a volume, a pod, a node; not a Prometheus alert or query): EvChanged brings it
	// forward to GateReact from the change.
	Reactive bool
	// CheckStarted is when the operation in flight started; CheckTook is how long the last gate
	// check that answered blocked took (the reaction waits at least as long).
	CheckStarted time.Time
	CheckTook    time.Duration
	// ChangedDuring says EvChanged came while a gate check was in flight: that check may have
	// read the world before the change, so a blocked answer is asked again after GateReact.
	ChangedDuring bool
	// CheckedAt is when the checks that decided a decommission's Node deletion began (the
	// cordon check's At): the deletion is not sent on checks older than MaxCheckAge.
	CheckedAt time.Time
}

// Decommissioned reports whether the drain decommissioned its node: its Node object was
// deleted (then its COMPLETE, or the NOTREQUESTED of its withdrawal, has SlotReleased set).
func (d Drain) Decommissioned() bool {
	return d.Status.Decommission && d.Status.SlotReleased
}

// Draining reports whether the drain is under way: admitted, and not yet COMPLETE or failed
// (STARTING, CORDONED, DRAINRETRYING). A draining node holds an admission slot, but so do
// others: holdsSlot (admission.go) is the one rule for that.
func (d Drain) Draining() bool { return d.Status.Status.draining() }

// Idle reports whether the drain is NOTREQUESTED with no request and nothing under way or due
// (no uncordon, no return gate).
func (d Drain) Idle() bool {
	return d.Request == nil && d.Status.Status == StatusNotRequested && d.Waiting == OpNone && d.RetryOp == OpNone &&
		!d.Returning() && !d.UncordonAfter
}

// Cleared reports whether the drain's answer lets the agent run its operation: COMPLETE, or
// NOTSUPPORTED (nowhere to move the workloads), for the request still standing. Either way the
// node goes down: it is in maintenance until it is back, or its slot is released.
func (d Drain) Cleared() bool {
	return (d.Status.Status == StatusComplete || d.Status.Status == StatusNotSupported) && d.Request != nil
}

// Cordoned reports whether the drain is past its cordon: the API answered that the node is
// cordoned (CORDONED, DRAINRETRYING), and the drain has not started over from STARTING.
func (d Drain) Cordoned() bool {
	return d.Status.Status == StatusCordoned || d.Status.Status == StatusDrainRetrying
}

// AwaitsAdmission reports whether the drain is REQUESTED and may be admitted once admission
// allows: not while an uncordon of its own is due, nor while it is in the return gate.
func (d Drain) AwaitsAdmission() bool {
	return d.Status.Status == StatusRequested && d.Request != nil && !d.uncordoning() && !d.Returning()
}

// ReactsToChange reports whether EvChanged matters to the drain: a gate check is in flight, or
// one that answered blocked waits for its recheck.
func (d Drain) ReactsToChange() bool {
	return d.gateInFlight() || (d.Waiting == OpNone && d.Reactive && d.RetryOp != OpNone)
}

func (d Drain) gateInFlight() bool {
	return d.Waiting == OpGate || d.Waiting == OpFinalGate || d.Waiting == OpReturnGate
}

// Returning reports whether the node is back from its operation and holds its admission slot
// until it is healthy again (the return gate).
func (d Drain) Returning() bool { return !d.Status.ReturningSince.IsZero() }

// ReturnDeadline is when the return gate gives up and releases the slot; zero when the drain is
// not returning.
func (d Drain) ReturnDeadline(p Limits) time.Time {
	if !d.Returning() {
		return time.Time{}
	}
	since := d.Status.ReturningSince
	if since.Before(d.ResumedAt) {
		// (Another replica's clock behind this one's made a resumed return gate time out at once,
		// breaking R1.)
		since = d.ResumedAt
	}
	return since.Add(p.ReturnTimeout)
}

// draining reports whether s is the status of a drain under way (Drain.Draining).
func (s DrainStatus) draining() bool {
	switch s {
	case StatusStarting, StatusCordoned, StatusDrainRetrying:
		return true
	}
	return false
}

// uncordoning reports whether an uncordon is under way or due: such a drain is not admitted
// until it is done (a cordon started meanwhile could be undone by it).
func (d Drain) uncordoning() bool {
	return d.Waiting == OpUncordon || d.RetryOp == OpUncordon || d.UncordonAfter
}

// Event is an input to Step: a bus change, an admission decision, an I/O result or a timer.
type Event interface{ event() }

// EvRequest says the node's request changed: Request nil means withdrawn (deleted).
type EvRequest struct{ Request *NodeDrainRequest }

// EvAdmit says admission let the drain start.
type EvAdmit struct{}

// EvQueued says the drain waits for admission; Message says behind whom or what, Blockers
// what holds it (the maintenance policy's blockers, the pre-flight prediction).
type EvQueued struct {
	Message  string
	Blockers []Blocker
}

// EvReleaseSlot says the node never came back from its operation (deleted, or NotReady for too
// long): a COMPLETE drain releases its admission slot; Reason says why.
type EvReleaseSlot struct{ Reason string }

// EvForgetIdle says the drain's node has been out of the cluster long enough (no Node object,
// not seen by admission) while the drain is idle, NOTREQUESTED with no request: its status is
// removed from the bus and the drain forgotten, as a decommissioned node's are. (A decommission
// whose keys were due to go, and over which an operator put a request and withdrew it, left
// its status for good: the simulation, seed 61.)
type EvForgetIdle struct{}

func (EvForgetIdle) event() {}

// EvNotSupported says no other node can take the workloads; Reason says why.
type EvNotSupported struct{ Reason string }

// EvResult is the result of an operation for a request. Err nil is success. Unreachable marks an
// error from an API server that could not be reached (it does not use up an attempt).
type EvResult struct {
	Op          Op
	RequestID   string
	Err         error
	Unreachable bool
	// Safe and Blockers answer OpGate and OpFinalGate; Blockers also name the pods an OpEvict
	// could not evict. Cordoned answers OpCheckCordon and OpDeleteNode (false: the node was
	// found uncordoned and not deleted); ByUs answers OpCordon (false when the node was already
	// cordoned by someone else); Foreign answers OpCheckCordon: the node is cordoned, but not by
	// the cordon edgedrain made (someone uncordoned it and cordoned it again).
	Safe, Cordoned, ByUs, Foreign bool
	Blockers                      []Blocker
	// Missing answers OpDeleteNode and OpCheckCordon: the Node object was not found (deleted
	// already, by this drain before a restart, or by someone else: it may register again).
	Missing bool
	// Pods answers OpCheckCordon: the pods an eviction would take from the node as it was read
	// (kubectl drain's choice: DaemonSet and mirror pods are not among them), which must be none
	// for COMPLETE. An eviction attempt evicts the pods it listed: a pod that lands after that
	// list (created with spec.nodeName, bound by a scheduler that decided before the cordon) is
	// still there when the attempt succeeds.
	Pods []Blocker
	// UID answers OpCordon and OpCheckCordon: the Node object read (a Node deleted and
	// registered again is a new object, with a new UID); empty: not known.
	UID string
	// Kept answers OpUncordon: why the node was left cordoned (its cordon was someone else's,
	// or an operator asked to keep it cordoned); empty when it was uncordoned, or carried no
	// cordon of edgedrain's.
	Kept string
	// ResourceVersion answers OpUncordon: the Node's resourceVersion after it (empty: unknown,
	// or no such Node).
	ResourceVersion string
	// At is when the check began, before its reads (OpFinalGate, OpCheckCordon); zero: unknown.
	// An answer older than MaxAnswerAge when the drain gets it (the coordinator was paused
	// meanwhile) is asked again before COMPLETE. Stamped before the reads, not after: a pause
	// between the reads and the stamp would make an old answer look fresh, and a pod that landed
	// meanwhile would go unseen.
	At time.Time
}

// MaxAnswerAge is how old the last answers before COMPLETE (volumes safe, node still cordoned)
// may be when the drain acts on them.
const MaxAnswerAge = time.Second

// MaxCheckAge is how old the checks before a decommission's Node deletion may be when the
// deletion is sent: the status write between them ("deleting its Node object") takes up to 2 s;
// a coordinator paused there (a stalled VM) would otherwise delete the Node, and then publish
// COMPLETE, on checks made before a pod landed or a blocker appeared.
const MaxCheckAge = 5 * time.Second

// ErrChecksStale answers an operation not sent because the checks that decided it are too old.
var ErrChecksStale = errors.New("the checks before it are too old (the coordinator was paused): not sent")

// EvProgress reports eviction progress within an attempt.
type EvProgress struct {
	RequestID       string
	Evicted, Total  int
	Blockers        []Blocker
	WaitingDeletion int
}

// EvChanged says something a gate check depends on changed (an informer saw a Longhorn object,
// a VolumeAttachment, a pod or a node change): a gate that answered blocked is asked again soon,
// not only at its next GateRecheck. It carries nothing; safety never rests on when it comes.
type EvChanged struct{}

// EvTimer says time has passed; Step starts RetryOp when now ≥ RetryAt.
type EvTimer struct{}

// EvAPIUnreachable says the Kubernetes API has been unreachable for longer than the configured
// timeout; Safe is the volume gate's last known view of this node (from its cache).
type EvAPIUnreachable struct {
	For      time.Duration
	Safe     bool
	Blockers []Blocker
	// Uncordoned says the node informer's last view (before the outage) shows the node
	// schedulable, missing, or another Node object than the one the drain cordoned: the cordon
	// the API confirmed is gone, and pods may have landed before the outage.
	Uncordoned bool
	// ViewBehind says the outage began soon after an earlier one ended, while the informers
	// may still have been listing again: their last view may be older than this outage.
	ViewBehind bool
}

// EvPublished says the drain's status Status reached the bus (the write was acknowledged);
// Holds says that status held an admission slot (NodeDrainStatus.HoldsSlot).
type EvPublished struct {
	Status DrainStatus
	Holds  bool
}

func (EvPublished) event() {}

// EvPublishFailed says the publication of the drain's status failed. A COMPLETE that did not
// reach the bus is not published later as it was: what made it true may have changed meanwhile
// (an operator uncordoned the node), so the drain checks again before COMPLETE.
type EvPublishFailed struct{}

// EvCompleteNotLanded says a COMPLETE of request RequestID whose publication failed is known
// never to have landed: a later status write fenced on the same bucket revision as it landed,
// so the bucket had not moved (the COMPLETE, fenced on that revision too, can no longer land).
// The agent never had it; the drain is no longer one whose COMPLETE was sent.
type EvCompleteNotLanded struct{ RequestID string }

func (EvCompleteNotLanded) event() {}

func (EvPublishFailed) event()  {}
func (EvRequest) event()        {}
func (EvAdmit) event()          {}
func (EvQueued) event()         {}
func (EvNotSupported) event()   {}
func (EvResult) event()         {}
func (EvProgress) event()       {}
func (EvTimer) event()          {}
func (EvChanged) event()        {}
func (EvAPIUnreachable) event() {}
func (EvReleaseSlot) event()    {}

// Action is an output of Step for the executor.
type Action interface{ action() }

// Publish asks for the drain's Status to be published.
type Publish struct{ Status NodeDrainStatus }

// Start asks for Op to be performed for the drain's request; its result comes back as EvResult.
type Start struct {
	Op Op
	// Attempt numbers eviction attempts from 1.
	Attempt int
	// Decommission says the request asks for a decommission (the gates check for it).
	Decommission bool
	// UID, for OpDeleteNode, is the UID of the Node object the drain emptied (empty: not known,
	// as after a resume): another object under the name is not deleted (it answers with its UID).
	UID string
	// CheckedAt, for OpDeleteNode, is when the checks that decided it began (zero: unknown). A
	// deletion whose checks are older than MaxCheckAge when it is about to be sent is not sent:
	// it answers ErrChecksStale, and everything before it is checked again.
	CheckedAt time.Time
}

// Cancel asks for every operation under way for the node to stop at once.
type Cancel struct{}

// Outcome reports that a request reached an end (COMPLETE, a failure, NOTSUPPORTED, withdrawn)
// for the completion-time metric; Since is the request's RequestedAt.
type Outcome struct {
	Result      DrainStatus
	Withdrawn   bool
	RequestedBy Requester
	Since       time.Time
}

// ReturnEnded reports that a return gate ended (Result: ReturnHealthy, ReturnTimedOut with
// Blockers still waited for, or ReturnNewRequest); Waited is how long it held the slot.
type ReturnEnded struct {
	Result   string
	Waited   time.Duration
	Blockers []Blocker
}

// Results of a return gate (ReturnEnded.Result).
const (
	ReturnHealthy    = "healthy"
	ReturnTimedOut   = "timeout"
	ReturnNewRequest = "new-request"
)

// SlotReleased reports that a COMPLETE node that never came back released its slot (Reason).
type SlotReleased struct{ Reason string }

func (ReturnEnded) action()  {}
func (SlotReleased) action() {}
func (Publish) action()      {}
func (Start) action()        {}
func (Cancel) action()       {}
func (Outcome) action()      {}
