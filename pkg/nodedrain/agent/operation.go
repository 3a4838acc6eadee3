package agent

import (
	"fmt"
	"strings"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Operation is what the agent holds back until its node is drained: a reboot, a shutdown, an
// OS update or a decommission.
type Operation string

// The operations the agent knows.
const (
	// OpReboot reboots the node (requester DEVICEOP).
	OpReboot Operation = "reboot"
	// OpShutdown powers the node off (requester DEVICEOP).
	OpShutdown Operation = "shutdown"
	// OpUpdate installs an OS or base image update (requester UPDATE).
	OpUpdate Operation = "update"
	// OpDecommission retires the node for good (requester DEVICEOP, a context that
	// nodedrain.DeclaresDecommission): the coordinator deletes its Node object before COMPLETE.
	OpDecommission Operation = "decommission"
)

// Operations lists every operation, in a stable order.
var Operations = []Operation{OpReboot, OpShutdown, OpUpdate, OpDecommission}

// operationNames is the list of operation names for error messages.
const operationNames = "reboot, shutdown, update or decommission"

// ParseOperation parses an operation name (case-insensitive).
func ParseOperation(s string) (Operation, error) {
	op := Operation(strings.ToLower(strings.TrimSpace(s)))
	if op.Valid() {
		return op, nil
	}
	return "", fmt.Errorf("%w %q (want %s)", ErrUnknownOperation, s, operationNames)
}

// Valid reports whether o is one of Operations.
func (o Operation) Valid() bool {
	return o == OpReboot || o == OpShutdown || o == OpUpdate || o == OpDecommission
}

// Requester returns who the drain request is for: DEVICEOP for a reboot, shutdown or
// decommission, UPDATE for an update.
func (o Operation) Requester() nodedrain.Requester {
	if o == OpUpdate {
		return nodedrain.RequesterUpdate
	}
	return nodedrain.RequesterDeviceOp
}

// goesDown reports whether o takes the node down, so that its command returning is not the end:
// the operation is over when the node comes back with a new boot ID. A decommission is over
// when its command returns (it may take the machine down before that).
func (o Operation) goesDown(p Limits) bool {
	return o == OpReboot || o == OpShutdown || (o == OpUpdate && p.UpdateReboots)
}

// mayGoDown reports whether o's command may take the node down before it returns: a new boot
// ID while it ran means it ran, not that something else rebooted the node.
func (o Operation) mayGoDown(p Limits) bool {
	return o.goesDown(p) || o == OpDecommission
}

// withArticle returns "a reboot", "a shutdown", "an update" or "a decommission".
func (o Operation) withArticle() string {
	if o == OpUpdate {
		return "an " + string(o)
	}
	return "a " + string(o)
}

// afterWithdrawal says what the coordinator does once the request of a finished o is withdrawn.
func (o Operation) afterWithdrawal() string {
	if o == OpDecommission {
		return "removes the node's keys from the bus"
	}
	return "uncordons the node"
}
