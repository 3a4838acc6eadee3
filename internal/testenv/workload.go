package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeploymentSpec describes a test Deployment pinned to one group of simulated nodes.
type DeploymentSpec struct {
	Namespace, Name string
	// Group pins the pods to the nodes AddNodes created for that group.
	Group    string
	Replicas int32
	// TerminationSeconds is the pods' grace period, which is how long the simulated kubelet takes
	// to finish a deletion. Zero: 1 s.
	TerminationSeconds int64
	// Labels are added to the pods (app=<Name> is always set).
	Labels map[string]string
}

// DeploymentObject returns the Deployment s describes.
func DeploymentObject(s DeploymentSpec) *appsv1.Deployment {
	if s.TerminationSeconds == 0 {
		s.TerminationSeconds = 1
	}
	labels := map[string]string{"app": s.Name}
	for k, v := range s.Labels {
		labels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &s.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s.Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{GroupLabel: s.Group},
					TerminationGracePeriodSeconds: &s.TerminationSeconds,
					Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
				},
			},
		},
	}
}

// CreateDeployment creates the Deployment and returns it; it does not wait for its pods.
func (c *Cluster) CreateDeployment(t testing.TB, s DeploymentSpec) *appsv1.Deployment {
	t.Helper()
	got, err := c.Client.AppsV1().Deployments(s.Namespace).Create(context.Background(), DeploymentObject(s), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create deployment %s/%s: %v", s.Namespace, s.Name, err)
	}
	return got
}

// RunningPods lists the Running, not-terminating pods in namespace matching selector.
func (c *Cluster) RunningPods(ctx context.Context, namespace, selector string) ([]corev1.Pod, error) {
	list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list pods %s in %s: %w", selector, namespace, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// Deploy creates the Deployment, waits until all its pods run, and returns them with the node
// holding the most of them (the first by name on a tie).
func (c *Cluster) Deploy(t testing.TB, s DeploymentSpec) ([]corev1.Pod, string) {
	t.Helper()
	c.CreateDeployment(t, s)
	var pods []corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		pods, err = c.RunningPods(context.Background(), s.Namespace, "app="+s.Name)
		if err == nil && len(pods) == int(s.Replicas) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods of %s/%s not running: %s", s.Namespace, s.Name, Describe(pods))
		}
		time.Sleep(50 * time.Millisecond)
	}
	count := map[string]int{}
	busiest := ""
	for _, p := range pods {
		count[p.Spec.NodeName]++
	}
	for n, k := range count {
		if busiest == "" || k > count[busiest] || (k == count[busiest] && n < busiest) {
			busiest = n
		}
	}
	return pods, busiest
}
