package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) { testenv.Main(m, &cluster) }

// harness is one test's world: its own bus, its own simulated nodes (a group), a namespace, and
// a record of every status published on the bus.
type harness struct {
	t        *testing.T
	c        *testenv.Cluster
	group    string
	nodes    []string
	ns       string
	nats     *pubsub.Embedded
	js       jetstream.JetStream
	requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]

	mu   sync.Mutex
	seen map[string][]nodedrain.NodeDrainStatus
}

func newHarness(t *testing.T, group string, nodes int) *harness {
	t.Helper()
	c := testenv.RequireCluster(t, cluster)
	h := &harness{t: t, c: c, group: group, seen: map[string][]nodedrain.NodeDrainStatus{}}
	h.nodes = c.AddNodes(t, group, nodes)
	h.ns = c.Namespace(t)
	h.nats = testenv.StartNATS(t)
	_, h.js = testenv.ConnectNATS(t, h.nats.ClientURL())
	ctx := context.Background()
	var err error
	h.requests, err = pubsub.OpenBucket(ctx, h.js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket}, nodedrain.RequestCodec{})
	require.NoError(t, err)
	// History above 1 so the test's watcher sees every transition, not only the latest value.
	h.statuses, err = pubsub.OpenBucket(ctx, h.js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, History: 20}, nodedrain.StatusCodec{})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	w, err := h.statuses.Watch(wctx)
	require.NoError(t, err)
	go func() {
		for ev := range w.Events() {
			if ev.Kind == pubsub.EventPut {
				h.mu.Lock()
				h.seen[ev.Key] = append(h.seen[ev.Key], ev.Value)
				h.mu.Unlock()
			}
		}
	}()
	return h
}

// config is a Config with delays short enough for tests and this harness's clients.
func (h *harness) config(client kubernetes.Interface) Config {
	cfg := DefaultConfig()
	cfg.Client, cfg.JetStream = client, h.js
	cfg.NodeSelector = testenv.GroupLabel + "=" + h.group
	cfg.Policy.CordonBackoff, cfg.Policy.CordonBackoffMax = 50*time.Millisecond, 200*time.Millisecond
	cfg.Policy.DrainAttemptTimeout = 3 * time.Second
	cfg.Policy.DrainBackoff, cfg.Policy.DrainBackoffMax = 100*time.Millisecond, 300*time.Millisecond
	cfg.Policy.GateRecheck, cfg.Policy.UncordonRetry = 100*time.Millisecond, 100*time.Millisecond
	cfg.EvictRetryDelay = 200 * time.Millisecond
	cfg.ProgressEvery = 100 * time.Millisecond
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	log := logrus.New()
	log.SetLevel(logrus.InfoLevel)
	cfg.Logger = log.WithField("test", h.t.Name())
	return cfg
}

// run starts an engine and returns a function that stops it (as a kill: nothing is undone) and
// waits until it has.
func (h *harness) run(cfg Config) (stop func()) {
	h.t.Helper()
	e, err := NewEngine(cfg)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(h.t, <-done)
		})
	}
	h.t.Cleanup(stop)
	return stop
}

func (h *harness) request(node, id string, at time.Time) {
	h.t.Helper()
	_, err := h.requests.Publish(context.Background(), node, nodedrain.NodeDrainRequest{
		Node: node, RequestID: id, RequestedAt: at, RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
	require.NoError(h.t, err)
}

func (h *harness) withdraw(node string) {
	h.t.Helper()
	require.NoError(h.t, h.requests.Unpublish(context.Background(), node))
}

// last returns the latest status published for node.
func (h *harness) last(node string) (nodedrain.NodeDrainStatus, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen[node]
	if len(s) == 0 {
		return nodedrain.NodeDrainStatus{}, false
	}
	return s[len(s)-1], true
}

// waitFor waits until a status published for node satisfies ok, and returns the first that did.
// Every published status counts, not only the latest: drains move on quickly.
func (h *harness) waitFor(node string, timeout time.Duration, what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		h.mu.Lock()
		for _, st := range h.seen[node] {
			if ok(st) {
				h.mu.Unlock()
				return st
			}
		}
		h.mu.Unlock()
		if time.Now().After(deadline) {
			last, _ := h.last(node)
			h.t.Fatalf("node %s never reached %s within %s; last: %s %q; history %v", node, what, timeout, last.Status, last.Message, h.history(node))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) waitStatus(node string, want nodedrain.DrainStatus, timeout time.Duration) nodedrain.NodeDrainStatus {
	h.t.Helper()
	return h.waitFor(node, timeout, want.String(), func(s nodedrain.NodeDrainStatus) bool { return s.Status == want })
}

// history lists the statuses published for node, consecutive repeats folded.
func (h *harness) history(node string) []nodedrain.DrainStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []nodedrain.DrainStatus
	for _, s := range h.seen[node] {
		if len(out) == 0 || out[len(out)-1] != s.Status {
			out = append(out, s.Status)
		}
	}
	return out
}

func (h *harness) node(name string) *corev1.Node {
	h.t.Helper()
	n, err := h.c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(h.t, err)
	return n
}

// deploy runs a Deployment on the harness's nodes and waits until its pods run, returning the
// node holding the most of them.
func (h *harness) deploy(name string, replicas int32, termination int64) string {
	h.t.Helper()
	h.c.CreateDeployment(h.t, testenv.DeploymentSpec{Namespace: h.ns, Name: name, Group: h.group, Replicas: replicas, TerminationSeconds: termination})
	pods := h.waitRunning(name, replicas)
	count := map[string]int{}
	best := ""
	for _, p := range pods {
		count[p.Spec.NodeName]++
		if best == "" || count[p.Spec.NodeName] > count[best] {
			best = p.Spec.NodeName
		}
	}
	return best
}

// waitRunning waits until the Deployment's pods are all running.
func (h *harness) waitRunning(name string, replicas int32) []corev1.Pod {
	h.t.Helper()
	var pods []corev1.Pod
	require.Eventually(h.t, func() bool {
		var err error
		pods, err = h.c.RunningPods(context.Background(), h.ns, "app="+name)
		return err == nil && len(pods) == int(replicas)
	}, 60*time.Second, 50*time.Millisecond, "pods of %s not running: %s", name, testenv.Describe(pods))
	return pods
}

// countCordons watches a node and counts its transitions from schedulable to cordoned.
func (h *harness) countCordons(node string) func() int {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	w, err := h.c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	require.NoError(h.t, err)
	var mu sync.Mutex
	count, cordoned, first := 0, false, true
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			if n.Spec.Unschedulable && !cordoned && !first {
				count++
			}
			cordoned, first = n.Spec.Unschedulable, false
			mu.Unlock()
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return count
	}
}

func podsLeft(h *harness, node string) string {
	pods, err := h.c.PodsOnNode(context.Background(), h.ns, node)
	require.NoError(h.t, err)
	var names []string
	for _, p := range pods {
		names = append(names, fmt.Sprintf("%s(%s)", p.Name, p.Status.Phase))
	}
	return strings.Join(names, ",")
}
