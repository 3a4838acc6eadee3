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

// harness is one test's world: its own bus (with a record of every status published), its own
// simulated nodes (a group) and a namespace.
type harness struct {
	*testenv.Bus
	t     *testing.T
	c     *testenv.Cluster
	group string
	nodes []string
	ns    string
	js    jetstream.JetStream
}

func newHarness(t *testing.T, group string, nodes int) *harness {
	t.Helper()
	return newHarnessOn(t, testenv.RequireCluster(t, cluster), group, nodes)
}

// newHarnessOn is newHarness on a cluster of the test's own (testenv.StartTestCluster).
func newHarnessOn(t *testing.T, c *testenv.Cluster, group string, nodes int) *harness {
	t.Helper()
	h := &harness{t: t, c: c, group: group, Bus: testenv.StartBus(t)}
	h.js = h.JS
	h.nodes = c.AddNodes(t, group, nodes)
	h.ns = c.Namespace(t)
	return h
}

// config is a Config with delays short enough for tests and this harness's clients.
func (h *harness) config(client kubernetes.Interface) Config {
	cfg := DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream = client, h.js
	cfg.NodeSelector = testenv.GroupLabel + "=" + h.group
	cfg.ClusterSelector = cfg.NodeSelector // the test cluster is shared: its group is its cluster
	cfg.Limits = testenv.FastPolicy()
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

func (h *harness) request(node, id string, at time.Time) { h.Request(h.t, node, id, at) }

func (h *harness) withdraw(node string) { h.Withdraw(h.t, node) }

func (h *harness) last(node string) (nodedrain.NodeDrainStatus, bool) { return h.Last(node) }

func (h *harness) history(node string) []nodedrain.DrainStatus { return h.History(node) }

func (h *harness) waitFor(node string, timeout time.Duration, what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	h.t.Helper()
	return h.WaitFor(h.t, node, timeout, what, ok)
}

func (h *harness) waitStatus(node string, want nodedrain.DrainStatus, timeout time.Duration) nodedrain.NodeDrainStatus {
	h.t.Helper()
	return h.WaitStatus(h.t, node, want, timeout)
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
	_, busiest := h.c.Deploy(h.t, testenv.DeploymentSpec{Namespace: h.ns, Name: name, Group: h.group, Replicas: replicas, TerminationSeconds: termination})
	return busiest
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

// terms opens the status bucket for its term record.
func (h *harness) terms(t *testing.T) *pubsub.Bucket[nodedrain.Term] {
	t.Helper()
	b, err := pubsub.OpenBucket(context.Background(), h.js, pubsub.BucketConfig{Name: nodedrain.StatusBucket}, nodedrain.TermCodec{})
	require.NoError(t, err)
	return b
}
