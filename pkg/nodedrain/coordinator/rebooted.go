package coordinator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A node can go down before its drain is done: a shutdown typed on it that the agent's logind lock
// held back for less time than the drain took, a lock the agent lost, a power cut, a panic. The
// agent counts what it caught; the coordinator sees every such reboot from the Node's boot ID (the
// kubelet reports a new one after each boot) and records it where an operator looks: a Warning
// Event on the Node, a log line and edgedrain_undrained_reboots_total. It changes no drain: the
// agent, back, withdraws its request, and the drain ends as any withdrawn one. A reboot while
// this coordinator was not running (or not leading) is not seen.

// EventUndrainedReboot is the reason of the Event recording a node that rebooted while a drain
// request of it was not yet COMPLETE.
const EventUndrainedReboot = "UndrainedReboot"

// bootChanged reports whether the kubelet reports a new boot of the node: old and cur both
// name a boot, and not the same.
func bootChanged(old, cur *corev1.Node) bool {
	o, c := old.Status.NodeInfo.BootID, cur.Status.NodeInfo.BootID
	return o != "" && c != "" && o != c
}

// rebooted records, in the loop, that node booted again as boot (bootChanged): an undrained
// reboot if a request of it made before this boot was being served and had not reached COMPLETE
// (or NOTSUPPORTED). A COMPLETE whose write failed (CompleteSent: it may have landed, and the
// agent acted on it) counts as reached.
func (e *Engine) rebooted(node, boot string) {
	d, ok := e.core.Drain(node)
	if !ok || d.Request == nil || d.Status.CompleteSent || d.Request.BootID == boot {
		return
	}
	switch d.Status.Status {
	case nodedrain.StatusComplete, nodedrain.StatusNotSupported:
		return
	}
	msg := fmt.Sprintf("the node rebooted (its boot ID changed) while its drain for request %s (%s, %q) was %s, before COMPLETE: "+
		"it went down undrained (a shutdown started outside edgedrain that the agent could not hold back long enough, a power loss or a crash)",
		d.Request.RequestID, d.Request.RequestedBy, d.Request.Context, d.Status.Status)
	e.metrics.UndrainedReboots.Inc()
	e.log.WithField("node", node).WithField("request", d.Request.RequestID).Error(msg)
	e.nodeEvent(node, corev1.EventTypeWarning, EventUndrainedReboot, msg)
}

// postRebooted hands a new boot of node to the loop.
func (e *Engine) postRebooted(ctx context.Context, node, boot string) {
	e.send(ctx, nodeEvent{node: node, rebooted: boot})
}
