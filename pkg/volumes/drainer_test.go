package volumes

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// watchDrainerPods records every drainer pod seen in ns (latest version by name), also those
// deleted since.
func watchDrainerPods(t *testing.T, c *testenv.Cluster, ns string) func() map[string]corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: DrainerLabel + "=true"})
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string]corev1.Pod{}
	go func() {
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Error {
				mu.Lock()
				seen[pod.Name] = *pod
				mu.Unlock()
			}
		}
	}()
	return func() map[string]corev1.Pod {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]corev1.Pod{}
		for k, v := range seen {
			out[k] = v
		}
		return out
	}
}

func TestNodeLocalDrainer(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "local", 2)
	ns := c.Namespace(t)
	pods := watchDrainerPods(t, c, ns)
	g := startGate(t, c, nil)
	pvc := createLocalVolume(t, c, ns, "data-0", nodes[0], map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	createLocalVolume(t, c, ns, "scratch", nodes[0], nil) // no drainer: its data just stays
	cordon(t, c, nodes[0], true)                          // as the coordinator has

	r := g.eventually(t, nodes[0], afterEviction, "the drainer starts once the pods are gone", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "drainer Job")
	})
	assert.Equal(t, ns, r.Blockers[0].Namespace)
	assert.Equal(t, "pv-"+ns+"-data-0", r.Blockers[0].Name)
	assert.Contains(t, r.Blockers[0].Reason, "local volume (PVC "+ns+"/data-0): drainer Job")
	before := g.check(t, nodes[0], beforeEviction)
	assert.True(t, before.Safe, "a reboot does not wait for node-local data before eviction: %+v", before)

	g.eventually(t, nodes[0], afterEviction, "safe once the drainer succeeded", func(r coordinator.GateResult) bool { return r.Safe })
	assert.Equal(t, DrainStatusDrained, getPVC(t, c, ns, pvc.Name).Labels[DrainStatusLabel])
	require.Eventually(t, func() bool { return jobGone(c, ns, drainerJobName(pvc)) }, 10*time.Second, 50*time.Millisecond, "the Job is removed")
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultSucceeded)))
	assert.Equal(t, 1, g.events.count("Normal DrainerStarted PersistentVolumeClaim "+ns+"/data-0"), g.events)
	assert.Equal(t, 1, g.events.count("Normal Drained PersistentVolumeClaim "+ns+"/data-0"), g.events)

	seen := pods()
	require.Len(t, seen, 1)
	for _, pod := range seen {
		assert.Equal(t, nodes[0], pod.Spec.NodeName, "the drainer ran on the cordoned node")
		assert.Equal(t, "data-0", pod.Spec.Volumes[len(pod.Spec.Volumes)-1].PersistentVolumeClaim.ClaimName)
	}
	// Drained: later checks neither wait nor run it again.
	assert.True(t, g.check(t, nodes[0], afterEviction).Safe)
	assert.Len(t, pods(), 1)
}

// finishPod sets a pending drainer pod's phase, as a kubelet would when its container ends.
func finishPod(t *testing.T, c *testenv.Cluster, pod corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	code := int32(0)
	if phase == corev1.PodFailed {
		code = 1
	}
	now := metav1.Now()
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = nil
	for _, ctr := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now}}})
	}
	_, err := c.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), &pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// drainerPodOf waits for the pod of the current drainer Job of pvc other than those of the
// Jobs in done, and returns it with its Job's UID.
func drainerPodOf(t *testing.T, c *testenv.Cluster, pvc *corev1.PersistentVolumeClaim, done map[types.UID]bool) (corev1.Pod, types.UID) {
	t.Helper()
	var pod corev1.Pod
	var uid types.UID
	require.Eventually(t, func() bool {
		for _, p := range drainerPods(t, c, pvc.Namespace) {
			for _, o := range p.OwnerReferences {
				if o.Kind == "Job" && o.Name == drainerJobName(pvc) && !done[o.UID] && p.Status.Phase == corev1.PodPending {
					pod, uid = p, o.UID
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no new drainer pod for %s", pvc.Name)
	return pod, uid
}

func TestNodeLocalDrainerFailureIsRetried(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	// A node no simulated kubelet runs: the test plays the kubelet and decides how the drainer ends.
	node := manualNode(t, c, "manual-fail")
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	pvc := createLocalVolume(t, c, ns, "data-0", node, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the coordinator's rechecks
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				_, _ = g.Check(context.Background(), node, afterEviction)
			}
		}
	}()

	pod, first := drainerPodOf(t, c, pvc, nil)
	assert.Equal(t, node, pod.Spec.NodeName)
	finishPod(t, c, pod, corev1.PodFailed)
	r := g.eventually(t, node, afterEviction, "the failure is reported", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "drainer failed 1 time(s)")
	})
	t.Log(r.Blockers[0].Reason)
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultFailed)))
	assert.Equal(t, 1, g.events.count("Warning DrainerFailed PersistentVolumeClaim "+ns+"/data-0"), g.events)

	// After the backoff a new Job runs; this one succeeds.
	pod, second := drainerPodOf(t, c, pvc, map[types.UID]bool{first: true})
	assert.NotEqual(t, first, second)
	finishPod(t, c, pod, corev1.PodSucceeded)
	g.eventually(t, node, afterEviction, "safe after the retry succeeded", func(r coordinator.GateResult) bool { return r.Safe })
	assert.Equal(t, DrainStatusDrained, getPVC(t, c, ns, pvc.Name).Labels[DrainStatusLabel])
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultSucceeded)))
}

// A restarted coordinator keeps a failing drainer's count and backoff (recorded on the PVC): it
// does not start it again at once, and counts on from where the last one stopped.
func TestNodeLocalDrainerFailuresSurviveARestart(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	node := manualNode(t, c, "manual-restart")
	ns := c.Namespace(t)
	slow := func(cfg *Config) { cfg.DrainerBackoff, cfg.DrainerBackoffMax = time.Minute, 10*time.Minute }
	first := startGate(t, c, slow)
	pvc := createLocalVolume(t, c, ns, "data-0", node, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	first.eventually(t, node, afterEviction, "the drainer starts", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "started")
	})
	pod, _ := drainerPodOf(t, c, pvc, nil)
	finishPod(t, c, pod, corev1.PodFailed)
	first.eventually(t, node, afterEviction, "the failure is counted", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "drainer failed 1 time(s)")
	})
	require.Eventually(t, func() bool { return jobGone(c, ns, drainerJobName(pvc)) }, 10*time.Second, 50*time.Millisecond)
	var rec failureRecord
	require.NoError(t, json.Unmarshal([]byte(getPVC(t, c, ns, pvc.Name).Annotations[DrainerFailuresAnnotation]), &rec))
	assert.Equal(t, 1, rec.Failures)
	first.cancel() // the coordinator stops

	second := startGate(t, c, slow)
	r := second.check(t, node, afterEviction)
	require.Len(t, r.Blockers, 1)
	assert.Contains(t, r.Blockers[0].Reason, "drainer failed 1 time(s)", "the restarted gate knows the failure")
	assert.Contains(t, r.Blockers[0].Reason, "next attempt in")
	assert.True(t, jobGone(c, ns, drainerJobName(pvc)), "no new drainer before the backoff ends")
	assert.Zero(t, second.events.count("DrainerStarted"), second.events)

	// The drain is over: the record goes with the gate's memory of it.
	require.NoError(t, second.Release(context.Background(), node))
	require.Eventually(t, func() bool {
		_, ok := getPVC(t, c, ns, pvc.Name).Annotations[DrainerFailuresAnnotation]
		return !ok
	}, 10*time.Second, 50*time.Millisecond, "Release clears the record")
}

func TestNodeLocalDrainerTimeout(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	node := manualNode(t, c, "manual-timeout")
	ns := c.Namespace(t)
	g := startGate(t, c, func(cfg *Config) {
		cfg.DrainerTimeout, cfg.DrainerBackoff, cfg.DrainerBackoffMax = time.Second, time.Minute, time.Minute
	})
	pvc := createLocalVolume(t, c, ns, "data-0", node, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})

	g.eventually(t, node, afterEviction, "the drainer starts", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "running")
	})
	job, err := c.Client.BatchV1().Jobs(ns).Get(context.Background(), drainerJobName(pvc), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), *job.Spec.ActiveDeadlineSeconds)
	// Its pod never runs: the drainer never ends.
	r := g.eventually(t, node, afterEviction, "the timeout is reported", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "timed out")
	})
	t.Log(r.Blockers[0].Reason)
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.DrainerJobs.WithLabelValues(ResultTimeout)))
	require.Eventually(t, func() bool {
		cur, err := c.Client.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
		return err != nil || cur.UID != job.UID || cur.DeletionTimestamp != nil
	}, 10*time.Second, 50*time.Millisecond, "the Job that timed out is not left squatting")
	assert.Equal(t, 1, g.events.count("Warning DrainerFailed", "timeout"), g.events)
}

func TestMalformedTemplateIsReported(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "badtmpl", 1)
	ns := c.Namespace(t)
	g := startGate(t, c, nil)
	createLocalVolume(t, c, ns, "data-0", nodes[0], map[string]string{DrainerTemplateAnnotation: `{"template":`})

	for _, opts := range []coordinator.GateOptions{beforeEviction, afterEviction, afterEviction} {
		r := g.eventually(t, nodes[0], opts, "the bad template blocks", func(r coordinator.GateResult) bool { return !r.Safe })
		require.Len(t, r.Blockers, 1)
		assert.Contains(t, r.Blockers[0].Reason, "drainer template on PVC "+ns+"/data-0: invalid drainer template: want a JSON object")
	}
	assert.Equal(t, 1, g.events.count("Warning InvalidDrainerTemplate PersistentVolumeClaim "+ns+"/data-0"), "reported once: %s", g.events)
	assert.Equal(t, 1.0, testutil.ToFloat64(g.metrics.TemplateErrors))
	jobs, err := c.Client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, jobs.Items)
}
