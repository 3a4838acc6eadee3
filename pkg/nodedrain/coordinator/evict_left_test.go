package coordinator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// The check before COMPLETE counts the pods an eviction would take, as kubectl drain chooses
// them: a pod that landed after the attempt's list (a Job's pod created with spec.nodeName)
// counts; a DaemonSet's pod and a mirror pod, which tolerate the cordon and stay, do not.
func TestEvictorLeftCountsWhatAnEvictionWouldTake(t *testing.T) {
	owner := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "u-" + types.UID(name), Controller: ptr.To(true)}}
	}
	pod := func(name, node string, owners []metav1.OwnerReference, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, OwnerReferences: owners, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	client := fake.NewSimpleClientset(
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "logs"}},
		pod("job-4", "n1", []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u-j", Controller: ptr.To(true)}}, nil),
		pod("logs-x", "n1", owner("DaemonSet", "logs"), nil),
		pod("static-n1", "n1", nil, map[string]string{corev1.MirrorPodAnnotationKey: "x"}),
	)
	e := &evictor{client: client}
	left, err := e.left(context.Background(), "n1")
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, "job-4", left[0].Name)

	// (The fake client does not select by spec.nodeName: one node per client.)
	require.NoError(t, client.CoreV1().Pods("default").Delete(context.Background(), "job-4", metav1.DeleteOptions{}))
	left, err = e.left(context.Background(), "n1")
	require.NoError(t, err)
	assert.Empty(t, left, "a node holding only DaemonSet and mirror pods is drained")
}
