package coordinator

import (
	"context"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// testGate is a volume gate the test opens and closes per node.
type testGate struct {
	mu       sync.Mutex
	safe     map[string]bool
	released map[string]int
	after    map[string]bool // a check with AfterEviction was made
}

func (g *testGate) Release(_ context.Context, node string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released == nil {
		g.released = map[string]int{}
	}
	g.released[node]++
	return nil
}

func (g *testGate) count(node string) (released int, after bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.released[node], g.after[node]
}

func (g *testGate) set(node string, safe bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.safe[node] = safe
}

func (g *testGate) Check(_ context.Context, node string, opts GateOptions) (GateResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if opts.AfterEviction {
		if g.after == nil {
			g.after = map[string]bool{}
		}
		g.after[node] = true
	}
	if g.safe[node] {
		return GateResult{Safe: true}, nil
	}
	return GateResult{Blockers: []nodedrain.Blocker{{Kind: nodedrain.BlockerVolume, Namespace: "apps", Name: "pvc-x",
		Reason: "last healthy replica is on this node; rebuilding on another node", Progress: 45}}}, nil
}

func TestVolumeGateHoldsCompleteBack(t *testing.T) {
	h := newHarness(t, "gate", 2)
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(h.c.Client)
	cfg.Gate = gate
	h.run(cfg)
	h.request(h.nodes[0], "r1", time.Now())
	st := h.waitFor(h.nodes[0], 20*time.Second, "blocked by a volume", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1
	})
	assert.Equal(t, "pvc-x", st.Blockers[0].Name)
	assert.Equal(t, 45, st.Blockers[0].Progress)
	assert.Equal(t, float64(1), testutil.ToFloat64(cfg.Metrics.BlockedVolumes.WithLabelValues(h.nodes[0])))
	testenv.Never(t, func() bool { st, _ := h.last(h.nodes[0]); return st.Status == nodedrain.StatusComplete },
		time.Second, 50*time.Millisecond, "COMPLETE while the gate blocks")
	// (Resume may already have released leftovers once for the new request: count from here.)
	before, _ := gate.count(h.nodes[0])
	gate.set(h.nodes[0], true)
	h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 20*time.Second)
	released, after := gate.count(h.nodes[0])
	assert.True(t, after, "the check before COMPLETE says the pods are gone")
	assert.Equal(t, before, released, "nothing released while the drain runs")
	h.withdraw(h.nodes[0])
	require.Eventually(t, func() bool { r, _ := gate.count(h.nodes[0]); return r == before+1 }, 10*time.Second, 20*time.Millisecond,
		"the gate is told the drain is over")
}

// A coordinator killed mid-drain is replaced by a new one that finishes it without a second cordon.
func TestRestartResumesWithoutSecondCordon(t *testing.T) {
	t.Run("STARTING", func(t *testing.T) {
		h := newHarness(t, "kill-starting", 3)
		target := h.deploy("web", 3, 1)
		cordons := h.countCordons(target)
		// The first coordinator may not patch nodes, so it stays in STARTING, retrying the cordon.
		stop := h.run(h.config(restrictedClient(t, h)))
		h.request(target, "r1", time.Now())
		h.waitFor(target, 20*time.Second, "a failed cordon attempt", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusStarting && s.Attempt >= 2
		})
		stop()
		st, _ := h.last(target)
		require.Equal(t, nodedrain.StatusStarting, st.Status)
		h.run(h.config(h.c.Client))
		h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
		assert.Equal(t, 1, cordons())
	})
	t.Run("CORDONED", func(t *testing.T) {
		h := newHarness(t, "kill-cordoned", 3)
		target := h.deploy("web", 3, 1)
		cordons := h.countCordons(target)
		cfg := h.config(h.c.Client)
		gate := &testGate{safe: map[string]bool{}}
		cfg.Gate = gate
		stop := h.run(cfg)
		h.request(target, "r1", time.Now())
		h.waitFor(target, 20*time.Second, "blocked", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })
		stop()
		gate.set(target, true)
		cfg = h.config(h.c.Client)
		cfg.Gate = gate
		h.run(cfg)
		st := h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
		assert.True(t, st.CordonedByUs)
		assert.Empty(t, podsLeft(h, target))
		assert.Equal(t, 1, cordons())
		h.withdraw(target)
		h.waitFor(target, 10*time.Second, "uncordoned", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
		})
		assert.False(t, h.node(target).Spec.Unschedulable)
	})
	t.Run("DRAINRETRYING", func(t *testing.T) {
		h := newHarness(t, "kill-retrying", 3)
		target := h.deploy("db", 3, 1)
		cordons := h.countCordons(target)
		ctx := context.Background()
		three := intstr.FromInt32(3)
		pdb, err := h.c.Client.PolicyV1().PodDisruptionBudgets(h.ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &three,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		cfg := h.config(h.c.Client)
		cfg.Limits.DrainAttemptTimeout, cfg.Limits.DrainAttempts = time.Second, 100
		stop := h.run(cfg)
		h.request(target, "r1", time.Now())
		h.waitStatus(target, nodedrain.StatusDrainRetrying, 30*time.Second)
		stop()
		_, err = h.c.Client.PolicyV1().PodDisruptionBudgets(h.ns).Patch(ctx, pdb.Name, types.MergePatchType,
			[]byte(`{"spec":{"minAvailable":2}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		h.run(cfg)
		h.waitStatus(target, nodedrain.StatusComplete, 30*time.Second)
		assert.Equal(t, 1, cordons())
	})
}

func TestLeaderElectionFailover(t *testing.T) {
	h := newHarness(t, "leader", 2)
	var active atomic.Int32
	var maxActive atomic.Int32
	started := make(chan string, 4)
	replica := func(id string) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		lc := DefaultLeaderConfig()
		lc.Client, lc.Namespace, lc.Name, lc.Identity = h.c.Client, h.ns, "edgedrain-coordinator", id
		go func() {
			defer close(done)
			_ = RunWithLeaderElection(ctx, lc, func(ctx context.Context) error {
				n := active.Add(1)
				defer active.Add(-1)
				for {
					if m := maxActive.Load(); n <= m || maxActive.CompareAndSwap(m, n) {
						break
					}
				}
				started <- id
				e, err := NewEngine(h.config(h.c.Client))
				if err != nil {
					return err
				}
				return e.Run(ctx)
			})
		}()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return stop
	}
	stops := map[string]func(){"a": replica("a"), "b": replica("b")}
	var leader string
	select {
	case leader = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no replica became leader")
	}
	h.request(h.nodes[0], "r1", time.Now())
	h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 30*time.Second)

	killedAt := time.Now()
	stops[leader]()
	var next string
	select {
	case next = <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("no failover within 15 s")
	}
	assert.NotEqual(t, leader, next)
	t.Logf("failover took %s", time.Since(killedAt).Round(time.Millisecond))
	h.withdraw(h.nodes[0])
	h.waitFor(h.nodes[0], 20*time.Second, "uncordoned by the new leader", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	assert.Equal(t, int32(1), maxActive.Load(), "two engines ran at once")
}

func TestRequestsDrainedOneAfterAnotherOldestFirst(t *testing.T) {
	h := newHarness(t, "queue", 4)
	h.run(h.config(h.c.Client))
	base := time.Now()
	order := []string{h.nodes[2], h.nodes[0], h.nodes[1]}
	for i, n := range order {
		h.request(n, "r-"+n, base.Add(time.Duration(i)*time.Millisecond))
	}
	// Each node's agent comes back right after COMPLETE and withdraws, freeing the slot.
	var completed []string
	for range order {
		var done string
		require.Eventually(t, func() bool {
			for _, n := range order {
				if st, _ := h.last(n); st.Status == nodedrain.StatusComplete {
					done = n
					return true
				}
			}
			return false
		}, 30*time.Second, 20*time.Millisecond)
		completed = append(completed, done)
		for _, n := range order {
			if n != done {
				st, _ := h.last(n)
				assert.NotContains(t, []nodedrain.DrainStatus{nodedrain.StatusStarting, nodedrain.StatusCordoned, nodedrain.StatusComplete},
					st.Status, "%s drains while %s holds the slot", n, done)
			}
		}
		h.withdraw(done)
		h.waitStatus(done, nodedrain.StatusNotRequested, 10*time.Second)
	}
	assert.Equal(t, order, completed)
	st, _ := h.last(order[2])
	assert.Equal(t, nodedrain.StatusNotRequested, st.Status)
}

func TestGarbageRequestIsCountedAndIgnored(t *testing.T) {
	h := newHarness(t, "garbage", 3)
	cfg := h.config(h.c.Client)
	h.run(cfg)
	kv, err := h.js.KeyValue(context.Background(), nodedrain.RequestsBucket)
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), h.nodes[1], []byte(`{"Node":"`+h.nodes[1]+`","Status":`))
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), h.nodes[2], []byte(`{"Node":"someone-else","RequestID":"x","RequestedAt":"2026-11-20T00:00:00Z","RequestedBy":2}`))
	require.NoError(t, err)
	h.request(h.nodes[0], "r1", time.Now())
	h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 30*time.Second)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(cfg.Metrics.BusDecodeErrors.WithLabelValues(nodedrain.RequestsBucket)) == 2
	}, 5*time.Second, 20*time.Millisecond)
	for _, n := range h.nodes[1:] {
		_, seen := h.last(n)
		assert.False(t, seen, "a status was published for %s after a bad request", n)
		assert.False(t, h.node(n).Spec.Unschedulable)
	}
}

// proxiedClient returns a client that reaches the API server through a proxy the test can cut.
func proxiedClient(t *testing.T, h *harness) (kubernetes.Interface, *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(h.c.Admin.Host)
	require.NoError(t, err)
	p := testenv.StartProxy(t, u.Host)
	rc := rest.CopyConfig(h.c.Admin)
	rc.Host = "https://" + p.Addr()
	rc.Timeout = 2 * time.Second
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	return client, p
}

func TestAPIUnreachable(t *testing.T) {
	for _, safe := range []bool{true, false} {
		name := map[bool]string{true: "safe volumes proceed", false: "unsafe volumes keep blocking"}[safe]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, map[bool]string{true: "unreach-safe", false: "unreach-unsafe"}[safe], 2)
			client, proxy := proxiedClient(t, h)
			client, sent := watchNodes(client)
			gate := &testGate{safe: map[string]bool{}}
			cfg := h.config(client)
			cfg.Gate = gate
			cfg.APIUnreachableTimeout = 3 * time.Second
			cfg.InformerRelist = -1 // (the API is cut seconds after start, its caches just listed: the rule need not wait for them)
			h.run(cfg)
			h.request(h.nodes[0], "r1", time.Now())
			h.waitFor(h.nodes[0], 20*time.Second, "blocked", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })
			sent.waitCordoned(t, h.nodes[0], 20*time.Second)
			gate.set(h.nodes[0], safe)
			proxy.Cut()
			if safe {
				st := h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 30*time.Second)
				assert.Contains(t, st.Message, "unreachable")
				return
			}
			st := h.waitFor(h.nodes[0], 30*time.Second, "not proceeding", func(s nodedrain.NodeDrainStatus) bool {
				return s.Status == nodedrain.StatusCordoned && strings.Contains(s.Message, "not proceeding")
			})
			assert.NotEmpty(t, st.Blockers)
		})
	}
}

// An eviction attempt that cannot even list the node's pods because the API is unreachable is
// not counted among the drain's attempts (its pod informer swallows the transport errors; only
// its deadline ends it): an API outage during a drain must not use its attempts up and fail it.
func TestEvictionAttemptsDuringAnOutageDoNotCount(t *testing.T) {
	h := newHarness(t, "unreach-evict", 2)
	client, proxy := proxiedClient(t, h)
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(client)
	cfg.Gate, cfg.APIUnreachableTimeout = gate, 0 // (the API-unreachable rule off: nothing lets the drain through)
	cfg.Limits.DrainAttempts, cfg.Limits.DrainAttemptTimeout = 1, time.Second
	h.run(cfg)
	node := h.nodes[0]
	h.request(node, "r1", time.Now())
	h.waitFor(node, 20*time.Second, "blocked", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })
	proxy.Cut()
	gate.set(node, true)
	h.waitFor(node, 20*time.Second, "an attempt that could not reach the API", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && strings.Contains(s.Message, "cannot reach the Kubernetes API to evict")
	})
	require.NoError(t, proxy.Restore())
	h.waitStatus(node, nodedrain.StatusComplete, 30*time.Second)
	assert.NotContains(t, h.history(node), nodedrain.StatusFailedDrain, "its only attempt was used up by the outage")
}

// A request made while the API is unreachable is not admitted: it could be neither cordoned nor
// evicted, and the API-unreachable rule (which has just let the drain under way on the first node
// proceed) would let it down undrained. Once the API answers it is drained as usual.
func TestNoAdmissionWhileTheAPIIsUnreachable(t *testing.T) {
	h := newHarness(t, "unreach-admit", 3)
	client, proxy := proxiedClient(t, h)
	client, sent := watchNodes(client)
	gate := &testGate{safe: map[string]bool{}}
	cfg := h.config(client)
	cfg.Gate, cfg.MaxConcurrentDrains, cfg.APIUnreachableTimeout = gate, 2, 3*time.Second
	cfg.InformerRelist = -1 // (the API is cut seconds after start, its caches just listed: the rule need not wait for them)
	h.run(cfg)
	first, second := h.nodes[0], h.nodes[1]
	h.request(first, "r1", time.Now())
	h.waitFor(first, 20*time.Second, "blocked", func(s nodedrain.NodeDrainStatus) bool { return len(s.Blockers) > 0 })
	sent.waitCordoned(t, first, 20*time.Second)
	gate.set(first, true)
	gate.set(second, true)
	proxy.Cut()
	st := h.waitStatus(first, nodedrain.StatusComplete, 30*time.Second)
	require.Contains(t, st.Message, "unreachable", "the rule applies to the drain under way")

	h.request(second, "r2", time.Now())
	h.waitFor(second, 20*time.Second, "held while the API is unreachable", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, "no drain is admitted")
	})
	require.NoError(t, proxy.Restore())
	st = h.waitStatus(second, nodedrain.StatusComplete, 40*time.Second)
	assert.NotContains(t, st.Message, "unreachable", "drained, not let through by the rule")
	assert.True(t, h.node(second).Spec.Unschedulable, "cordoned once the API answered")
	assert.Contains(t, h.history(second), nodedrain.StatusCordoned)
}

// A declared whole-cluster shutdown: every node asks with the cluster-shutdown context; each goes
// down after COMPLETE; the last one up has nowhere to drain to and is told NOTSUPPORTED, so
// nothing deadlocks.
func TestWholeClusterShutdown(t *testing.T) {
	h := newHarness(t, "shutdown", 3)
	h.run(h.config(h.c.Client))
	base := time.Now()
	for i, n := range h.nodes {
		h.RequestWithContext(t, n, "r-"+n, base.Add(time.Duration(i)*time.Millisecond), nodedrain.ClusterShutdownContext)
	}
	var results []nodedrain.DrainStatus
	for _, n := range h.nodes {
		st := h.waitFor(n, 30*time.Second, "COMPLETE or NOTSUPPORTED", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusComplete || s.Status == nodedrain.StatusNotSupported
		})
		results = append(results, st.Status)
		shutDown(t, h, n)
	}
	sort.Slice(results, func(i, j int) bool { return results[i] > results[j] })
	assert.Equal(t, []nodedrain.DrainStatus{nodedrain.StatusComplete, nodedrain.StatusComplete, nodedrain.StatusNotSupported}, results)
}

// The kernel-update day: every node asks for a reboot at once, nothing declared. It is not a
// whole-cluster shutdown: one node is drained at a time, the others wait in REQUESTED even while
// the drained node is down, and nobody is told NOTSUPPORTED.
func TestEveryNodeRebootingIsDrainedInTurn(t *testing.T) {
	h := newHarness(t, "kernelday", 3)
	h.deploy("web", 6, 0) // on all three nodes
	h.run(h.config(h.c.Client))
	base := time.Now()
	for i, n := range h.nodes {
		h.request(n, "r-"+n, base.Add(time.Duration(i)*time.Millisecond))
	}
	first := h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 60*time.Second)
	assert.Equal(t, "r-"+h.nodes[0], first.RequestID)
	assert.Empty(t, podsLeft(h, h.nodes[0]), "pods left on %s at COMPLETE", h.nodes[0])
	shutDown(t, h, h.nodes[0]) // it reboots: down, NotReady, its slot still held
	for _, n := range h.nodes[1:] {
		st := h.waitFor(n, 10*time.Second, "queued behind the rebooting node", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusRequested && strings.Contains(s.Message, h.nodes[0])
		})
		assert.NotContains(t, h.history(n), nodedrain.StatusNotSupported)
		assert.NotContains(t, h.history(n), nodedrain.StatusStarting, "%s started while %s was down: %s", n, h.nodes[0], st.Message)
	}
	// Its agent withdraws before the node is Ready again: the return gate keeps its slot.
	h.withdraw(h.nodes[0])
	h.waitFor(h.nodes[0], 10*time.Second, "in the return gate, waiting for the node", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.ReturningSince.IsZero() && len(s.Blockers) > 0 && s.Blockers[0].Kind == "Node"
	})
	last, _ := h.last(h.nodes[1])
	assert.Equal(t, nodedrain.StatusRequested, last.Status, "admitted while %s was not back", h.nodes[0])
	// Back and Ready: the next node is drained.
	powerOn(t, h, h.nodes[0])
	h.waitFor(h.nodes[0], 30*time.Second, "out of the return gate", func(s nodedrain.NodeDrainStatus) bool { return s.ReturningSince.IsZero() })
	h.waitStatus(h.nodes[1], nodedrain.StatusComplete, 60*time.Second)
	assert.Empty(t, podsLeft(h, h.nodes[1]), "pods left on %s at COMPLETE", h.nodes[1])
	assert.NotContains(t, h.history(h.nodes[1]), nodedrain.StatusNotSupported)
	last, _ = h.last(h.nodes[2])
	assert.Equal(t, nodedrain.StatusRequested, last.Status, "still one at a time")
}

// shutDown makes a simulated node look powered off: kwok stops managing it and it turns NotReady.
func shutDown(t *testing.T, h *harness, name string) {
	t.Helper()
	require.NoError(t, testenv.PowerOff(context.Background(), h.c.Client, name))
}

// powerOn undoes shutDown: kwok manages the node again and reports it Ready.
func powerOn(t *testing.T, h *harness, name string) {
	t.Helper()
	require.NoError(t, testenv.PowerOn(context.Background(), h.c.Client, name))
}
