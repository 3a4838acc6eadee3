package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A cordon or uncordon whose compare-and-swap patch meets a Node changed since it was read (its
// kubelet's status, edgedrain's own maintenance condition) is decided again on a fresh read at
// once, not failed as an attempt (clean-clone make test: the demo's cordon failed three times
// in a row against the condition's writes and waited 7 s).
func TestCordonRetriesAConflictAtOnce(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"}})
	conflicts := 2
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", nil)
		}
		return false, nil, nil
	})
	ops := nodeOps{client: client, now: time.Now}
	byUs, _, err := ops.cordon(context.Background(), "n1", "r1")
	require.NoError(t, err)
	assert.True(t, byUs)
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, n.Spec.Unschedulable)
	assert.Contains(t, n.Annotations, CordonAnnotation)

	conflicts = 1
	_, _, err = ops.uncordon(context.Background(), "n1")
	require.NoError(t, err)
	n, err = client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, n.Spec.Unschedulable)
	assert.NotContains(t, n.Annotations, CordonAnnotation)
}
