package coordinator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Whose cordon a node carries, from its managedFields, as the API server records them (the
// cluster tests drive the same through kubectl; this covers the cases no test cluster makes).
func TestCordonIsOurs(t *testing.T) {
	owns := func(manager string, op metav1.ManagedFieldsOperationType) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:unschedulable":{}}}`)}}
	}
	annotationOnly := metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:edgedrain.io/cordoned":{}}}}`)}}
	record := `{"request":"sha256:0","at":"2026-03-01T12:00:00Z","wasUnschedulable":false,"manager":"edgedrain"}`
	legacy := `{"request":"sha256:0","at":"2026-03-01T12:00:00Z","wasUnschedulable":false}`
	node := func(unschedulable bool, rec string, fields ...metav1.ManagedFieldsEntry) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: fields}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
		if rec != "" {
			n.Annotations = map[string]string{CordonAnnotation: rec}
		}
		return n
	}
	update := metav1.ManagedFieldsOperationUpdate
	for name, c := range map[string]struct {
		n    *corev1.Node
		want bool
	}{
		"edgedrain's cordon":                        {node(true, record, owns(FieldManager, update)), true},
		"uncordoned by kubectl":                     {node(false, record, annotationOnly), false},
		"uncordoned, cordoned again by kubectl":     {node(true, record, annotationOnly, owns("kubectl", update)), false},
		"co-owned by a server-side apply":           {node(true, record, owns(FieldManager, update), owns("gitops", metav1.ManagedFieldsOperationApply)), false},
		"no record":                                 {node(true, "", owns(FieldManager, update)), false},
		"a record from before edgedrain named them": {node(true, legacy, owns("coordinator", update)), true},
		"an unreadable record":                      {node(true, "garbage", owns("kubectl", update)), true},
		"no field owners recorded":                  {node(true, record), true},
	} {
		assert.Equal(t, c.want, cordonIsOurs(c.n), name)
	}
}
