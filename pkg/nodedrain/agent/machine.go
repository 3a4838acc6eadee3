package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// This file holds the agent's decisions as a pure state machine (DESIGN §4): Step(machine,
// event, now, policy) returns the next machine and the actions to take. It does no I/O and
// reads no clock; the runtime (Agent) performs the actions (bus, commands, files) and feeds
// their results back as events.
//
//	idle --trigger--> pending --NOTREQUESTED: publish--> deferred --COMPLETE (ours)--> cleared --> running
//	                     \--NOTSUPPORTED--> cleared          |  \--FAILED*: withdraw--> backoff --timer--> pending
//	running --ok, update/decommission--> idle (withdraw)      running --ok, reboot/shutdown--> waiting-boot
//	running --error--> cleared (retry after backoff)     new boot ID at start--> idle (withdraw)

// Limits holds the agent's delays and retry bounds. DefaultLimits gives the defaults.
type Limits struct {
	// DrainRetryBackoff is how long the agent waits after a failed drain (FAILEDCORDON,
	// FAILEDDRAIN) before it asks again; it doubles with each failure up to DrainRetryBackoffMax.
	DrainRetryBackoff, DrainRetryBackoffMax time.Duration
	// CommandRetryBackoff is how long the agent waits after a failed command before it runs it
	// again; it doubles with each failure up to CommandRetryBackoffMax.
	CommandRetryBackoff, CommandRetryBackoffMax time.Duration
	// RebootTimeout is how long the agent waits, after a reboot or shutdown command returned
	// success, for the node to go down. If the agent is still running with the same boot ID
	// after that, the command counts as failed and is run again.
	RebootTimeout time.Duration
	// BusRetry is the wait before a failed publish or withdrawal of the request is tried again.
	BusRetry time.Duration
	// UpdateReboots says the update command reboots the node: an update is then over when the
	// node comes back with a new boot ID, like a reboot, not when its command returns.
	UpdateReboots bool
}

// DefaultLimits returns the default delays: ask again 5 minutes after a failed drain, doubling
// to an hour; run a failed command again after 30 seconds, doubling to 10 minutes; give a node
// 10 minutes to go down after its reboot command returned.
func DefaultLimits() Limits {
	return Limits{
		DrainRetryBackoff: 5 * time.Minute, DrainRetryBackoffMax: time.Hour,
		CommandRetryBackoff: 30 * time.Second, CommandRetryBackoffMax: 10 * time.Minute,
		RebootTimeout: 10 * time.Minute,
		BusRetry:      2 * time.Second,
	}
}

// Validate reports a policy the machine cannot run.
func (p Limits) Validate() error {
	switch {
	case p.DrainRetryBackoff <= 0 || p.DrainRetryBackoffMax < p.DrainRetryBackoff:
		return fmt.Errorf("drain retry backoff %s..%s: want 0 < initial ≤ max", p.DrainRetryBackoff, p.DrainRetryBackoffMax)
	case p.CommandRetryBackoff <= 0 || p.CommandRetryBackoffMax < p.CommandRetryBackoff:
		return fmt.Errorf("command retry backoff %s..%s: want 0 < initial ≤ max", p.CommandRetryBackoff, p.CommandRetryBackoffMax)
	case p.RebootTimeout <= 0:
		return fmt.Errorf("reboot timeout must be positive, got %s", p.RebootTimeout)
	case p.BusRetry <= 0:
		return fmt.Errorf("bus retry must be positive, got %s", p.BusRetry)
	}
	return nil
}

// Phase is where the node's operation stands.
type Phase string

// The phases of an operation.
const (
	// PhaseIdle means no operation is wanted; the agent's request is withdrawn.
	PhaseIdle Phase = "idle"
	// PhasePending means an operation is wanted and no request is published yet: the agent waits
	// for the node's status to be known and NOTREQUESTED.
	PhasePending Phase = "pending"
	// PhaseDeferred means the request is published and the operation waits for COMPLETE.
	PhaseDeferred Phase = "deferred"
	// PhaseBackoff means the drain failed: the request is withdrawn until RetryAt.
	PhaseBackoff Phase = "backoff"
	// PhaseCleared means the operation may run; its command starts at RetryAt (a retry after a
	// failed command) or at once.
	PhaseCleared Phase = "cleared"
	// PhaseRunning means the command is running.
	PhaseRunning Phase = "running"
	// PhaseWaitingBoot means a reboot or shutdown command returned and the agent waits for the
	// node to go down (a new boot ID), at most until RetryAt.
	PhaseWaitingBoot Phase = "waiting-boot"
)

func (p Phase) valid() bool {
	switch p {
	case PhaseIdle, PhasePending, PhaseDeferred, PhaseBackoff, PhaseCleared, PhaseRunning, PhaseWaitingBoot:
		return true
	}
	return false
}

// deferred reports whether the operation is held back for the drain (the deferred_operations metric).
func (p Phase) deferred() bool {
	return p == PhasePending || p == PhaseDeferred || p == PhaseBackoff
}

// State is what the agent keeps in its state file, so that a deferred operation survives an
// agent restart.
type State struct {
	Phase       Phase     `json:"phase"`
	Operation   Operation `json:"operation,omitempty"`
	Context     string    `json:"context,omitempty"`
	RequestID   string    `json:"requestID,omitempty"`
	RequestedAt time.Time `json:"requestedAt,omitzero"`
	// BootID is the node's boot ID when the operation was asked for.
	BootID string `json:"bootID,omitempty"`
	// OnBus says the request should be on the bus (published, not withdrawn).
	OnBus bool `json:"onBus,omitempty"`
	// Sentinel is the sentinel file that asked for the operation ("" for a local request), and
	// SentinelModTime its modification time (Unix nanoseconds) then.
	Sentinel        string `json:"sentinel,omitempty"`
	SentinelModTime int64  `json:"sentinelModTime,omitempty"`
	// Caught says the operation is a shutdown started outside edgedrain and caught through
	// logind: it is let through (its lock released) instead of a command being run (caught.go).
	Caught bool `json:"caught,omitempty"`
	// Superseded says a caught shutdown took the place of this operation's own command (it was
	// asked for before the shutdown came): once the node is back the operation ends undone, and
	// its trigger, if still there, asks again.
	Superseded bool `json:"superseded,omitempty"`
	// Released says the caught shutdown was let go (its lock released).
	Released bool `json:"released,omitempty"`
	// Own says the caught shutdown came once the operation's command had run (its own, or one
	// coinciding with it): the command's result decides whether the operation is done.
	Own bool `json:"own,omitempty"`
	// CalledOff says logind called the released shutdown off while the operation's command still
	// ran: the operation ends as such once the command returns (caughtTimedOut).
	CalledOff bool `json:"calledOff,omitempty"`
	// DrainFailures counts FAILEDCORDON / FAILEDDRAIN answers for this operation.
	DrainFailures int `json:"drainFailures,omitempty"`
	// ClearedBy says what let the operation run: a COMPLETE or NOTSUPPORTED from the bus, or an
	// operator's override.
	ClearedBy Clearance `json:"clearedBy,omitzero"`
	// CommandRan says the command was started at least once; CommandStartedAt is the last start.
	CommandRan       bool      `json:"commandRan,omitempty"`
	CommandStartedAt time.Time `json:"commandStartedAt,omitzero"`
	// CommandFailures counts failed runs of the command for this operation.
	CommandFailures int `json:"commandFailures,omitempty"`
	// RetryAt is when the backoff ends (backoff), the command runs again (cleared) or the node
	// is given up on going down (waiting-boot).
	RetryAt time.Time `json:"retryAt,omitzero"`
	// Mine lists the request IDs this agent made, newest last (at most maxMine): it withdraws
	// only these, never another agent's request published under the same node name.
	Mine []string `json:"mine,omitempty"`
	// Handled maps each operation to the modification time (Unix nanoseconds) of the sentinel
	// file whose operation is done, so that a sentinel nobody removed does not ask again.
	Handled map[Operation]int64 `json:"handled,omitempty"`
	// Retired is the boot ID during which a decommission's command succeeded: the node is
	// retired, so the agent takes no other request until the machine boots again (it would be
	// for a Node object that no longer exists, and nothing would ever answer it).
	Retired string `json:"retired,omitempty"`
	// CleanupBefore is set when the agent started without a usable state file: it cannot tell
	// its own old request from another agent's, so its start-up withdrawal also removes a request
	// made before the node booted (stale: no live agent of this boot made it), rather than leave
	// the node held for good. A request made since the boot may be a live agent's and stays.
	// Kept until that withdrawal succeeds, across operations and restarts (an agent
	// restarted while the bus was down no longer knew, and the node stayed held).
	CleanupBefore time.Time `json:"cleanupBefore,omitzero"`
}

// Machine is the agent's whole view: the durable State and what it knows of the world.
type Machine struct {
	// State is persisted after every step.
	State State
	// Node is this agent's node name.
	Node string
	// Boot is the node's current boot ID (set by EvStart).
	Boot string
	// Bus is the latest status published for this node; nil when none is (or none was seen).
	Bus *nodedrain.NodeDrainStatus
	// BusRevision is the bus revision of Bus (0: unknown): a value read later but older than a
	// value delivered while the read was under way is not taken, and the status is read again.
	BusRevision uint64
	// BusKnown says the status watch has delivered its snapshot, so a nil Bus means "none published".
	BusKnown bool
	// Interrupted says the agent started with a command recorded as running (not one that takes
	// the node down): the bus is read before the request is published again or the command runs
	// again, for the command may have succeeded and its request been withdrawn before the agent
	// could record it (a crash on a failing disk).
	Interrupted bool
	// Override is the forced status from the override file; nil when there is none.
	// OverrideAt is when the last override that lets the current operation run arrived,
	// WithdrawnAt when the bus first said the current request was withdrawn: the later of the two
	// decides for an operation waiting to run. Both are lost with a restart (a withdrawal then
	// counts as the later one: the operation is cancelled, not run).
	Override                *nodedrain.StatusOverride
	OverrideAt, WithdrawnAt time.Time
	// BusSynced says the bus is known to hold what State.OnBus asks for; BusRetryAt is when a
	// failed publish or withdrawal is tried again (zero while one is under way); BusFailures
	// counts the failures in a row.
	BusSynced   bool
	BusRetryAt  time.Time
	BusFailures int
	// Confirmed is the request whose clearing status a ReadStatus confirmed for the next run of
	// the command; Confirming says a ReadStatus is under way; ConfirmRetryAt is when a failed
	// one is tried again.
	Confirmed      string
	Confirming     bool
	ConfirmRetryAt time.Time
	// ConfirmAskedAt is when the last ReadStatus was asked for: a confirmation counts only
	// within ConfirmMaxAge of it.
	ConfirmAskedAt time.Time
	// NotDecommissioned is the request whose confirmation was refused, and said so, because the
	// coordinator's answer does not say the node was decommissioned (said once per request).
	NotDecommissioned string
	// ReadFrom is BusRevision when the ReadStatus under way was asked for: a watch delivery
	// since then is newer than the read's answer.
	ReadFrom uint64
	// UnrecordedRuns counts the starts of the command held back in a row because the state file
	// could not record them (EvRunNotRecorded): the backoff before the next try.
	UnrecordedRuns int
	// Withdrew is the request this agent's last operation withdrew as it ended (in memory: the
	// process that ended it sees the coordinator catch up). Its COMPLETE still on the bus is the
	// coordinator not having seen the withdrawal yet, as after every reboot, not a request left
	// from before.
	Withdrew string
	// RepublishAt is when a published request that nothing has answered yet is published
	// again (zero: not due); only while deferred.
	RepublishAt time.Time
}

// maxMine bounds State.Mine.
const maxMine = 8

// mine reports whether this agent made request id.
func (st State) mine(id string) bool {
	return id != "" && (id == st.RequestID || slices.Contains(st.Mine, id))
}

// Source says where an effective status comes from.
type Source string

// Status sources.
const (
	// SourceNone means no status is known yet (UNKNOWN).
	SourceNone Source = "none"
	// SourceBus means the status was published by the coordinator (or none is, read as NOTREQUESTED).
	SourceBus Source = "bus"
	// SourceOverride means the status is forced by the override file.
	SourceOverride Source = "override"
)

// View is the status the agent acts on: the override if one applies, else the bus.
type View struct {
	Status    nodedrain.DrainStatus
	RequestID string
	Source    Source
	Message   string
}

// overrideApplies reports whether the override is for the current operation: it names no
// requester (or NONE), names this operation's requester, or no operation is pending.
func (m Machine) overrideApplies() bool {
	o := m.Override
	if o == nil {
		return false
	}
	return o.RequestedBy == 0 || o.RequestedBy == nodedrain.RequesterNone ||
		m.State.Phase == PhaseIdle || o.RequestedBy == m.State.Operation.Requester()
}

// Effective returns the status the agent acts on. An override answers the current request; a
// status watch without a value for this node reads as NOTREQUESTED (the coordinator publishes
// nothing for a node that never asked).
func (m Machine) Effective() View {
	switch {
	case m.overrideApplies():
		return View{Status: m.Override.Status, RequestID: m.State.RequestID, Source: SourceOverride,
			Message: "forced by the override file"}
	case m.Bus != nil && m.BusKnown:
		return View{Status: m.Bus.Status, RequestID: m.Bus.RequestID, Source: SourceBus, Message: m.Bus.Message}
	case m.BusKnown:
		return View{Status: nodedrain.StatusNotRequested, Source: SourceBus,
			Message: "no status published for this node: the coordinator is idle for it"}
	}
	return View{Status: nodedrain.StatusUnknown, Source: SourceNone, Message: "no status seen yet"}
}

// NextWake returns when the machine next needs an EvTimer; zero when it does not.
func (m Machine) NextWake() time.Time {
	var t time.Time
	switch m.State.Phase {
	case PhaseBackoff, PhaseWaitingBoot:
		t = m.State.RetryAt
	case PhaseCleared:
		// A run that waits for the status snapshot (Interrupted) waits for an event, not the
		// clock: its RetryAt, once past, would wake the agent at once, again and again, for as
		// long as the bus stays away.
		if !m.Interrupted {
			t = m.State.RetryAt
		}
	}
	if !m.BusSynced && !m.BusRetryAt.IsZero() && (t.IsZero() || m.BusRetryAt.Before(t)) {
		t = m.BusRetryAt
	}
	if !m.ConfirmRetryAt.IsZero() && (t.IsZero() || m.ConfirmRetryAt.Before(t)) {
		t = m.ConfirmRetryAt
	}
	if m.State.Phase == PhaseDeferred && !m.RepublishAt.IsZero() && (t.IsZero() || m.RepublishAt.Before(t)) {
		t = m.RepublishAt
	}
	return t
}

// Request returns the drain request for the current operation.
func (m Machine) Request() nodedrain.NodeDrainRequest {
	return nodedrain.NodeDrainRequest{Node: m.Node, RequestID: m.State.RequestID, RequestedAt: m.State.RequestedAt,
		RequestedBy: m.State.Operation.Requester(), Context: m.State.Context, BootID: m.Boot}
}
