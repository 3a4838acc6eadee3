package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

var nodeNames = []string{"node-0", "node-1", "node-2"}

const (
	appNamespace = "shop"
	group        = "demo"
)

// createWorld makes three simulated nodes, a web workload of 6 pods behind a
// PodDisruptionBudget, and Longhorn volumes with replicas across the nodes.
func (d *demo) createWorld(ctx context.Context) error {
	for _, n := range nodeNames {
		if err := d.c.CreateNode(ctx, n, map[string]string{testenv.GroupLabel: group}); err != nil {
			return err
		}
		if err := d.c.WaitNodeReady(ctx, n, time.Minute); err != nil {
			return err
		}
	}
	d.say("3 simulated nodes Ready: %s", strings.Join(nodeNames, ", "))
	client := d.c.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	dep := testenv.DeploymentObject(testenv.DeploymentSpec{Namespace: appNamespace, Name: "web", Group: group, Replicas: 6, TerminationSeconds: 2})
	if _, err := client.AppsV1().Deployments(appNamespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	maxUnavailable := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(appNamespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := d.c.RunningPods(ctx, appNamespace, "app=web")
		return err == nil && len(pods) == 6, nil
	})
	if err != nil {
		return fmt.Errorf("workload did not start: %w", err)
	}
	d.say("workload shop/web: 6 pods, PodDisruptionBudget maxUnavailable=1; pods per node: %s", d.podsPerNode(ctx))
	return d.createVolumes(ctx)
}

func (d *demo) podsPerNode(ctx context.Context) string {
	pods, err := d.c.RunningPods(ctx, appNamespace, "app=web")
	if err != nil {
		return err.Error()
	}
	count := map[string]int{}
	for _, p := range pods {
		count[p.Spec.NodeName]++
	}
	var parts []string
	for _, n := range nodeNames {
		parts = append(parts, fmt.Sprintf("%s=%d", n, count[n]))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// watchPods prints each workload pod leaving the target node and each one starting elsewhere.
func (d *demo) watchPods(ctx context.Context) {
	w, err := d.c.Client.CoreV1().Pods(appNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		d.say("cannot watch pods: %v", err)
		return
	}
	defer w.Stop()
	running := map[string]bool{}
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		switch {
		case ev.Type == watch.Deleted && pod.Spec.NodeName == target:
			d.say("  pod %s left %s", pod.Name, target)
		case pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil && !running[pod.Name]:
			running[pod.Name] = true
			if !d.start.IsZero() && time.Since(d.start) > 0 && pod.CreationTimestamp.After(d.start) {
				d.say("  pod %s running on %s", pod.Name, pod.Spec.NodeName)
			}
		}
	}
}
