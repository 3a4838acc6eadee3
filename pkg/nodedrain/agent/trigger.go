package agent

import (
	"fmt"
	"strings"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// This file holds what asks for an operation (a local request, a sentinel file: EvTrigger) and
// the context its request carries. The context decides whether the coordinator decommissions
// the node (nodedrain.DeclaresDecommission), so it must declare a decommission for
// OpDecommission and for nothing else: a reboot must never turn into the deletion of the Node.

// requestContext returns the context of a request for op, given the operator's or a sentinel's
// context (trimmed; empty: none). A decommission's context declares it: "decommission", or
// "decommission <given>" unless given declares it already. Any other operation's context is
// given, or the operation's name; one that would declare a decommission is refused
// (ErrDecommissionContext), as is one longer than nodedrain.MaxContextLen.
func requestContext(op Operation, given string) (string, error) {
	given = strings.TrimSpace(given)
	c := given
	switch {
	case op == OpDecommission && given == "":
		c = nodedrain.DecommissionContext
	case op == OpDecommission && !declaresDecommission(given):
		c = nodedrain.DecommissionContext + " " + given
	case given == "":
		c = string(op)
	}
	if len(c) > nodedrain.MaxContextLen {
		return "", fmt.Errorf("context %q is %d bytes, longer than the limit of %d", truncate(c, 40), len(c), nodedrain.MaxContextLen)
	}
	return c, checkContext(op, c)
}

// checkContext reports a context that does not match op: one that declares a decommission for
// another operation (ErrDecommissionContext), or one that does not for a decommission.
func checkContext(op Operation, c string) error {
	switch declares := declaresDecommission(c); {
	case op == OpDecommission && !declares:
		return fmt.Errorf("a decommission's context must be %q or start with %q, got %q",
			nodedrain.DecommissionContext, nodedrain.DecommissionContext+" ", c)
	case op != OpDecommission && declares:
		return fmt.Errorf("%w: the %s context %q starts with %q, which asks the coordinator to delete the Node object; "+
			"use \"agent request decommission\" to retire the node, or another context for %s",
			ErrDecommissionContext, op, c, nodedrain.DecommissionContext, op.withArticle())
	}
	return nil
}

// declaresDecommission reports whether a request with context c would ask for a decommission,
// by the coordinator's rule, whatever the requester.
func declaresDecommission(c string) bool {
	return nodedrain.DeclaresDecommission(nodedrain.NodeDrainRequest{RequestedBy: nodedrain.RequesterDeviceOp, Context: c})
}

// noCommand is the refusal of a request for op when no command is configured for it.
func noCommand(op Operation) string {
	msg := fmt.Sprintf("no --%s-command configured: this agent does not offer %s", op, op.withArticle())
	if op == OpDecommission {
		msg += ` (set --decommission-command to what retires the machine, e.g. "systemctl stop kubelet && systemctl poweroff")`
	}
	return msg
}

// trigger starts the operation e asks for, if none is under way and e may be acted on.
func (s *stepper) trigger(e EvTrigger) {
	st := &s.m.State
	reply := func(ok bool, format string, args ...any) {
		s.actions = append(s.actions, TriggerResult{Accepted: ok, Message: fmt.Sprintf(format, args...)})
	}
	badContext := checkContext(e.Operation, e.Context)
	switch {
	case e.Caught && e.Operation.Valid() && badContext == nil:
		s.caught(e)
	case !e.Operation.Valid():
		reply(false, "unknown operation %q", e.Operation)
	case badContext != nil:
		reply(false, "%v", badContext)
	case st.Phase == PhaseIdle && st.Retired != "" && st.Retired == s.m.Boot:
		reply(false, "this node was decommissioned (its Node object is deleted): no %s until the machine boots again", e.Operation)
	case st.Phase == PhaseIdle && e.Sentinel != "" && st.Handled[e.Operation] == e.SentinelModTime:
		reply(false, "the %s asked for by %s is already done", e.Operation, e.Sentinel)
	case st.Phase == PhaseIdle:
		*st = State{Phase: PhasePending, Operation: e.Operation, Context: e.Context, RequestID: e.RequestID,
			RequestedAt: s.now, BootID: s.m.Boot, Sentinel: e.Sentinel, SentinelModTime: e.SentinelModTime, Handled: st.Handled,
			Mine: st.Mine, CleanupBefore: st.CleanupBefore}
		s.remember(e.RequestID)
		by := "a local request"
		if e.Sentinel != "" {
			by = "sentinel " + e.Sentinel
		}
		s.report(LevelInfo, "%s asked for by %s (context %q): held back until the node is drained", e.Operation, by, e.Context)
		reply(true, "%s deferred until the node is drained (request %s)", e.Operation, e.RequestID)
	case st.Operation == e.Operation:
		reply(true, "%s already %s (request %s)", e.Operation, st.Phase, st.RequestID)
	default:
		reply(false, "%s is already %s (request %s); ask again once it is done", st.Operation.withArticle(), st.Phase, st.RequestID)
	}
}
