package coordinator

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// FieldManager names edgedrain's writes to Node objects: the API server records, in each
// Node's managedFields, which field manager set each field. Every write that sets or clears
// spec.unschedulable goes under this name.
const FieldManager = "edgedrain"

// Whose cordon is it? CordonAnnotation alone cannot tell: kubectl uncordon, then kubectl cordon,
// on a node edgedrain cordoned change spec.unschedulable and leave the annotation, and the
// cordon that results is the operator's (invariant S4). The API server's
// managedFields can: whoever last set spec.unschedulable owns it there, and an uncordon takes
// the field from every owner (it is removed), so a later cordon by anyone else is recorded as
// theirs, never as edgedrain's. That holds whatever edgedrain saw or missed: it was not running,
// not leading, or its watch relisted over the change. The alternatives do not: dropping the
// annotation when a watch shows the node uncordoned misses every change made while no
// coordinator watched; a Node has no metadata.generation, and its resourceVersion changes with
// every heartbeat; managedFields times have a resolution of one second, and per manager, not
// per field.

// cordonOwners lists the field managers that own node's spec.unschedulable; known is false when
// the node records none at all (the API server does not track fields for it, or someone
// emptied its managedFields), and nothing can be told from them.
func cordonOwners(node *corev1.Node) (owners []string, known bool) {
	for _, m := range node.ManagedFields {
		if m.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(m.FieldsV1.Raw, &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:unschedulable"]; ok && !slices.Contains(owners, m.Manager) {
			owners = append(owners, m.Manager)
		}
	}
	return owners, len(owners) > 0
}

// cordonIsOurs reports whether node's cordon is the one edgedrain made: the node is
// unschedulable, carries CordonAnnotation, and edgedrain alone owns spec.unschedulable. (Someone
// who applied unschedulable: true on top, server-side, co-owns it: that cordon is theirs too.)
// An annotation written before edgedrain named its writes (no Manager in the record), or a node
// whose field owners are not recorded, is trusted as it is: nothing tells otherwise, and a node
// edgedrain cordoned must not be left cordoned for want of proof.
func cordonIsOurs(node *corev1.Node) bool {
	raw, annotated := node.Annotations[CordonAnnotation]
	if !annotated || !node.Spec.Unschedulable {
		return false
	}
	var rec cordonRecord
	if json.Unmarshal([]byte(raw), &rec) != nil || rec.Manager == "" {
		return true
	}
	owners, known := cordonOwners(node)
	if !known {
		return true
	}
	return len(owners) == 1 && owners[0] == rec.Manager
}
