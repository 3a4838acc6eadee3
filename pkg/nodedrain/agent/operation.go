package agent

import (
	"fmt"
	"strings"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Operation is what the agent holds back until its node is drained: a reboot, a shutdown or an
// OS update.
type Operation string

// The operations the agent knows.
const (
	// OpReboot reboots the node (requester DEVICEOP).
	OpReboot Operation = "reboot"
	// OpShutdown powers the node off (requester DEVICEOP).
	OpShutdown Operation = "shutdown"
	// OpUpdate installs an OS or base image update (requester UPDATE).
	OpUpdate Operation = "update"
)

// Operations lists every operation, in a stable order.
var Operations = []Operation{OpReboot, OpShutdown, OpUpdate}

// ParseOperation parses an operation name (case-insensitive).
func ParseOperation(s string) (Operation, error) {
	op := Operation(strings.ToLower(strings.TrimSpace(s)))
	if op.Valid() {
		return op, nil
	}
	return "", fmt.Errorf("%w %q (want reboot, shutdown or update)", ErrUnknownOperation, s)
}

// Valid reports whether o is one of Operations.
func (o Operation) Valid() bool {
	return o == OpReboot || o == OpShutdown || o == OpUpdate
}

// Requester returns who the drain request is for: DEVICEOP for a reboot or shutdown, UPDATE for
// an update.
func (o Operation) Requester() nodedrain.Requester {
	if o == OpUpdate {
		return nodedrain.RequesterUpdate
	}
	return nodedrain.RequesterDeviceOp
}

// goesDown reports whether o takes the node down, so that its command returning is not the end:
// the operation is over when the node comes back with a new boot ID.
func (o Operation) goesDown(p Policy) bool {
	return o == OpReboot || o == OpShutdown || (o == OpUpdate && p.UpdateReboots)
}

// withArticle returns "a reboot", "a shutdown" or "an update".
func (o Operation) withArticle() string {
	if o == OpUpdate {
		return "an " + string(o)
	}
	return "a " + string(o)
}
