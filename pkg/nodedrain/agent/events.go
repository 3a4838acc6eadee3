package agent

import (
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Event is an input to Step: start-up, a trigger, a bus change or result, the override file, a
// command's result or the clock.
type Event interface{ event() }

// EvStart is the first event after the state file was loaded; BootID is the node's boot ID now.
// Fresh says there was no usable state file (missing, or unreadable and moved aside): a request
// under this node's key may be this agent's own from before, which it cannot tell. BootTime is
// when the node booted (zero: unknown). Succeeded is the request whose command last succeeded, as
// the command's own shell recorded it (ReadOutcome; "": none known).
type EvStart struct {
	BootID    string
	Fresh     bool
	BootTime  time.Time
	Succeeded string
}

// EvTrigger asks for an operation: a sentinel file was seen, or a local request came in.
type EvTrigger struct {
	Operation Operation
	Context   string
	// RequestID is the ID a request started by this trigger carries (unique; made by the caller).
	RequestID string
	// Sentinel is the sentinel file that asked ("" for a local request), SentinelModTime its
	// modification time in Unix nanoseconds.
	Sentinel        string
	SentinelModTime int64
	// Caught says the operation is a shutdown started outside edgedrain, caught through logind's
	// delay lock: it is already under way (caught.go).
	Caught bool
}

// EvBusStatus is the status published for this node: a new value, or nil when it was removed.
// Values delivered before EvBusSnapshot are the watch's snapshot.
type EvBusStatus struct {
	Status *nodedrain.NodeDrainStatus
	// Revision is the bus revision of the value (0: unknown). A confirmation read older than
	// it is not taken and is asked again (the watch itself delivers in order). A delivered
	// status never confirms a command itself: only a ReadStatus's answer does.
	Revision uint64
}

// EvBusSnapshot says the status watch has delivered the current value (if any): from now on a
// missing status means none is published.
type EvBusSnapshot struct{}

// EvBusDone is the result of a PublishRequest (Publish true) or a WithdrawRequest.
type EvBusDone struct {
	Publish   bool
	RequestID string
	Err       error
}

// EvOverride is the override file's content after a change; nil when the file is gone.
type EvOverride struct{ Override *nodedrain.StatusOverride }

// EvCommandDone is the result of a RunCommand; Err nil is success.
type EvCommandDone struct {
	RequestID string
	Err       error
}

// EvStatusRead is the result of a ReadStatus: the node's status as the bus holds it now (nil
// when none is published).
type EvStatusRead struct {
	Status *nodedrain.NodeDrainStatus
	// Revision is the bus revision of the value read (0: none published).
	Revision uint64
	Err      error
	// APIReachable says the Kubernetes API answered this node's probe; asked only when Status
	// is a COMPLETE of the API-unreachable rule (apiprobe.go).
	APIReachable bool
}

// EvRunNotRecorded says the runtime did not start the command of a RunCommand: the state file
// could not record its start, or the override file acted on could not be removed (Err says
// which; see NotRecorded), and an agent restarted after a crash would have run it again, or let
// the next operation run without a drain.
type EvRunNotRecorded struct {
	RequestID string
	Err       error
}

// EvTimer says time has passed. RequestID is the ID a request started at this tick would carry.
type EvTimer struct{ RequestID string }

// EvShutdownCalledOff says logind called off the shutdown it had announced
// (PrepareForShutdown(false)): its reboot or power-off job could not start, or was cancelled.
type EvShutdownCalledOff struct{}

func (EvStart) event()             {}
func (EvTrigger) event()           {}
func (EvBusStatus) event()         {}
func (EvBusSnapshot) event()       {}
func (EvBusDone) event()           {}
func (EvOverride) event()          {}
func (EvCommandDone) event()       {}
func (EvShutdownCalledOff) event() {}
func (EvTimer) event()             {}
func (EvStatusRead) event()        {}
func (EvRunNotRecorded) event()    {}

// Action is an output of Step for the runtime.
type Action interface{ action() }

// PublishRequest asks for Request to be published under the node's key; the result comes back
// as EvBusDone.
type PublishRequest struct {
	Request nodedrain.NodeDrainRequest
	// Own lists the requests this agent made: the request is published only over nothing or
	// one of these, never over another agent's request under the same node name.
	Own []string
	// Before: a request made before this time (the node's boot, when the agent started without
	// its state file) is one from before the boot, and is replaced too (zero: none); so is one
	// naming another boot than Boot, the node's boot ID (see Stale).
	Before time.Time
	Boot   string
}

// WithdrawRequest asks for the node's request to be removed from the bus, but only if it is one
// of Own (the requests this agent made): another agent's request under the same node name is
// left alone. The result comes back as EvBusDone. RequestID names the request withdrawn, for
// logs ("" for a clean-up).
type WithdrawRequest struct {
	RequestID string
	Own       []string
	// Pending says the operation still stands (a backoff, then a new request): an agent restarted
	// after a crash that lost this withdrawal would take it for an operator's and cancel it.
	Pending bool
	// Before also withdraws a request made before this time, whoever made it: the clean-up of an
	// agent without its state file, with the node's boot time (zero: only Own), and Boot, the
	// node's boot ID (see Stale).
	Before time.Time
	Boot   string
}

// ReadStatus asks for the node's status to be read from the bus now (not from the watch, which
// may lag or replay history); the result comes back as EvStatusRead. The agent confirms every
// COMPLETE or NOTSUPPORTED this way before it runs its operation, with a read asked for at most
// ConfirmMaxAge before the run.
type ReadStatus struct{}

// RunCommand asks for the operation's command to run; its result comes back as EvCommandDone.
type RunCommand struct {
	Operation Operation
	Context   string
	RequestID string
	// Attempt numbers the runs of this operation's command from 1.
	Attempt int
}

// LetShutdownProceed lets a caught shutdown go on: the runtime releases its logind delay lock.
// Drained is false when the drain failed and the node goes down undrained.
type LetShutdownProceed struct {
	Operation Operation
	RequestID string
	Drained   bool
	Reason    string
	// Runs says the release is the operation's run, as RunCommand is after a COMPLETE: it is not
	// done while what must be recorded first cannot be (NotRecorded).
	Runs bool
	// Outcome is how a caught shutdown ends, for the metrics: drained, drain-failed or withdrawn
	// ("": not one the agent caught on its own, e.g. its own command's).
	Outcome string
}

// UndrainedShutdown reports (for the log and the metrics) a caught shutdown that took the node
// down before its drain was done, found at the next boot.
type UndrainedShutdown struct {
	Operation Operation
	RequestID string
	Phase     Phase // how far the drain had got
}

// RemoveOverride asks for the override file to be removed: its COMPLETE or NOTSUPPORTED let the
// operation run (or went with a cancelled one).
type RemoveOverride struct{}

// TriggerResult answers an EvTrigger (the reply to a local request).
type TriggerResult struct {
	Accepted bool
	Message  string
}

// DrainFailed reports a failed drain (for the log and the metrics): the request was withdrawn
// and will be made again at RetryAt.
type DrainFailed struct {
	Operation Operation
	Status    nodedrain.DrainStatus
	Failures  int
	RetryAt   time.Time
	Message   string
}

// CommandFailed reports a failed command (for the log and the metrics); it runs again at RetryAt.
type CommandFailed struct {
	Operation Operation
	Failures  int
	RetryAt   time.Time
	Reason    string
}

// Level is the severity of a Report.
type Level int

// Report levels.
const (
	// LevelInfo reports a decision.
	LevelInfo Level = iota
	// LevelWarn reports something an operator may want to look at.
	LevelWarn
	// LevelError reports a failure.
	LevelError
)

// Report is a line for the log: what the agent decided and why.
type Report struct {
	Level   Level
	Message string
}

func (PublishRequest) action()     {}
func (WithdrawRequest) action()    {}
func (RunCommand) action()         {}
func (RemoveOverride) action()     {}
func (ReadStatus) action()         {}
func (TriggerResult) action()      {}
func (DrainFailed) action()        {}
func (CommandFailed) action()      {}
func (Report) action()             {}
func (LetShutdownProceed) action() {}
func (UndrainedShutdown) action()  {}
