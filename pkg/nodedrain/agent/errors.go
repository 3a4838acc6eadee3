package agent

import "errors"

// ErrCorruptState is matched by errors for a state file that cannot be read back: not JSON, an
// unknown version or phase, or fields that break the wire contract.
var ErrCorruptState = errors.New("corrupt agent state file")

// ErrUnknownOperation is matched by errors for an operation name other than reboot, shutdown,
// update and decommission.
var ErrUnknownOperation = errors.New("unknown operation")

// ErrInvalidConfig is matched by the errors of Config.Validate.
var ErrInvalidConfig = errors.New("invalid agent configuration")

// ErrAgentUnreachable is matched by errors of the local client (Request, QueryStatus) when no
// agent answers on the socket.
var ErrAgentUnreachable = errors.New("agent not reachable")

// ErrRefused is matched by errors of Request when the running agent refused the request (for
// example because another operation is pending).
var ErrRefused = errors.New("request refused")

// ErrForeignRequest means the node's request key holds a request another agent made (one
// started with the same node name): this agent does not publish over it.
var ErrForeignRequest = errors.New("the node's request key holds another agent's request")

// ErrMadeSinceBoot means the start-up clean-up found under the node's request key a request it
// did not make, made since the node booted by the node's clock now: it may be a live agent's, or
// the last boot's seen through a clock not set yet. The clean-up is tried again (with the boot
// time read again) rather than counted done.
var ErrMadeSinceBoot = errors.New("the node's request key holds a request made since the boot, by the node's clock now")

// ErrDecommissionContext is matched by the refusal of a request for an operation other than a
// decommission whose context would declare one (nodedrain.DeclaresDecommission).
var ErrDecommissionContext = errors.New("context declares a decommission")
