package coordinator

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Kubernetes' node lifecycle conditions (KEP-5683, alpha in v1.37 behind the
// NodeLifecycleConditions gate, which no component of v1.37 checks: any API server stores them)
// are the ecosystem's shared words for what edgedrain does. The coordinator writes four of them
// beside its own EdgedrainMaintenance, each with a reason of its own so that it knows its own
// from another writer's (Kubernetes defines no owner), and reads another writer's
// MaintenancePlanned and MaintenanceInProgress as a maintenance it must not run into.
//
// GracefulNodeShutdownInProgress is not written: it is the node's own observation (the
// kubelet's, or the agent's), not the coordinator's.
var lifecycleReasons = map[corev1.NodeConditionType]string{
	corev1.NodeMaintenancePlanned:    "EdgedrainRequested",
	corev1.NodeMaintenanceInProgress: "EdgedrainMaintenance",
	corev1.NodeDrainInProgress:       "EdgedrainDraining",
	corev1.NodeDrained:               "EdgedrainDrained",
}

// conditionTypes is every condition type the writer manages, edgedrain's own first.
var conditionTypes = []corev1.NodeConditionType{NodeConditionType, corev1.NodeMaintenancePlanned,
	corev1.NodeMaintenanceInProgress, corev1.NodeDrainInProgress, corev1.NodeDrained}

// wantCondition is a condition, status True, that a node's status puts on its Node.
type wantCondition struct {
	reason, message string
}

// wanted lists the conditions st puts on its node: with own on, EdgedrainMaintenance while
// edgedrain has business with the node (reason: the status), and with lifecycle on
//   - MaintenancePlanned while the request waits (REQUESTED),
//   - MaintenanceInProgress from admission until the node is back and healthy, or undrained
//     (NOTSUPPORTED), or kept cordoned after a failure,
//   - DrainInProgress while cordoning and evicting (STARTING, CORDONED, DRAINRETRYING),
//   - Drained at COMPLETE.
//
// Their messages carry edgedrain's status and its message.
func wanted(st nodedrain.NodeDrainStatus, own, lifecycle bool) map[corev1.NodeConditionType]wantCondition {
	if !inMaintenance(st) {
		return nil
	}
	out := map[corev1.NodeConditionType]wantCondition{}
	if own {
		out[NodeConditionType] = wantCondition{reason: st.Status.String(), message: st.Message}
	}
	if !lifecycle {
		return out
	}
	msg := "edgedrain " + st.Status.String()
	if st.Message != "" {
		msg += ": " + st.Message
	}
	put := func(t corev1.NodeConditionType) { out[t] = wantCondition{reason: lifecycleReasons[t], message: msg} }
	switch st.Status {
	case nodedrain.StatusRequested:
		put(corev1.NodeMaintenancePlanned)
		if st.CordonedByUs || !st.ReturningSince.IsZero() {
			put(corev1.NodeMaintenanceInProgress) // a drain that failed and asks again
		}
		return out
	case nodedrain.StatusStarting, nodedrain.StatusCordoned, nodedrain.StatusDrainRetrying:
		put(corev1.NodeDrainInProgress)
	case nodedrain.StatusComplete:
		put(corev1.NodeDrained)
	}
	put(corev1.NodeMaintenanceInProgress)
	return out
}

// ourCondition reports whether c is a condition edgedrain writes: its own type, or a lifecycle type
// with edgedrain's reason for it.
func ourCondition(c corev1.NodeCondition) bool {
	if c.Type == NodeConditionType {
		return true
	}
	r, ok := lifecycleReasons[c.Type]
	return ok && c.Reason == r
}

// findCondition is n's condition of type t, if it has one.
func findCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// hasOurs reports whether n carries any condition edgedrain writes.
func hasOurs(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if ourCondition(c) {
			return true
		}
	}
	return false
}

// otherMaintenance is another writer's maintenance of n, from its MaintenanceInProgress or
// MaintenancePlanned condition (status True, a reason not edgedrain's); nil if none.
func otherMaintenance(n *corev1.Node) *nodedrain.OtherMaintenance {
	for _, t := range []corev1.NodeConditionType{corev1.NodeMaintenanceInProgress, corev1.NodeMaintenancePlanned} {
		if c := findCondition(n, t); c != nil && c.Status == corev1.ConditionTrue && !ourCondition(*c) {
			return &nodedrain.OtherMaintenance{Condition: string(t), InProgress: t == corev1.NodeMaintenanceInProgress,
				Reason: c.Reason, Message: c.Message}
		}
	}
	return nil
}
