package volumes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// drainWorld is an in-process coordinator Engine with the real gate, on its own bus (which
// records every status the engine publishes), draining a group of simulated nodes.
type drainWorld struct {
	*testenv.Bus
	t testing.TB
	// stop ends the engine (as at the test's end).
	stop func()
}

// startDrainWorld starts the engine with testenv.FastPolicy; tune changes its configuration.
func startDrainWorld(t testing.TB, c *testenv.Cluster, group string, gate coordinator.VolumeGate, tune ...func(*coordinator.Config)) *drainWorld {
	t.Helper()
	w := &drainWorld{Bus: testenv.StartBus(t), t: t}
	cfg := coordinator.DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream, cfg.Gate = c.Client, w.JS, gate
	cfg.NodeSelector = testenv.GroupLabel + "=" + group
	cfg.ClusterSelector = cfg.NodeSelector // the test cluster is shared: its group is its cluster
	cfg.Limits = testenv.FastPolicy()
	cfg.Metrics = coordinator.NewMetrics(prometheus.NewRegistry())
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	cfg.Logger = log.WithField("test", t.Name())
	for _, f := range tune {
		f(&cfg)
	}
	engine, err := coordinator.NewEngine(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.Run(ctx) }()
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("engine stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(w.stop)
	return w
}

func (w *drainWorld) request(node string) { w.Request(w.t, node, "r-"+node, time.Now()) }

func (w *drainWorld) withdraw(node string) { w.Withdraw(w.t, node) }

func (w *drainWorld) waitFor(node, what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	w.t.Helper()
	return w.WaitFor(w.t, node, 30*time.Second, what, ok)
}

func (w *drainWorld) last(node string) nodedrain.NodeDrainStatus {
	st, _ := w.Last(node)
	return st
}

func TestCoordinatorHoldsCompleteBackForTheLastReplica(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "e2e-last", 2)
	g := startGate(t, c, nil)
	vol := volumeOn{name: "vol-e2e", nodes: nodes, state: []replicaState{"healthy", "rebuilding"}}
	vol.rebs = []rebuild{{to: vol.addr(1), progress: 45, from: []string{vol.addr(0)}}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "the gate has seen the volume", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && r.Blockers[0].Progress == 45
	})
	w := startDrainWorld(t, c, "e2e-last", g)

	w.request(nodes[0])
	st := w.waitFor(nodes[0], "CORDONED with the volume as blocker", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1
	})
	assert.Equal(t, "vol-e2e", st.Blockers[0].Name)
	assert.Equal(t, "shop", st.Blockers[0].Namespace)
	assert.Equal(t, 45, st.Blockers[0].Progress)
	assert.Contains(t, st.Blockers[0].Reason, "last healthy replica; rebuilding on e2e-last-1 45%")
	testenv.Never(t, func() bool { return w.last(nodes[0]).Status == nodedrain.StatusComplete },
		time.Second, 50*time.Millisecond, "COMPLETE while the node holds the last healthy replica")

	vol.state[1], vol.rebs = "healthy", nil
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	st = w.waitFor(nodes[0], "COMPLETE", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	assert.Empty(t, st.Blockers)
}

func TestCoordinatorCancelWithdrawsLonghornEviction(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "e2e-evict", 3)
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyEvict })
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-e2e-evict", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	w := startDrainWorld(t, c, "e2e-evict", g)

	w.request(nodes[0])
	st := w.waitFor(nodes[0], "waiting for the eviction", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusCordoned && len(s.Blockers) == 1 && strings.Contains(s.Blockers[0].Reason, "evicting replicas from this node: 1 of 2")
	})
	assert.Equal(t, "vol-e2e-evict", st.Blockers[0].Name)
	requested := func() bool {
		v, _, _ := unstructured.NestedBool(getLonghornNode(t, c, nodes[0]).Object, "spec", "evictionRequested")
		return v
	}
	require.True(t, requested())

	w.withdraw(nodes[0])
	w.waitFor(nodes[0], "NOTREQUESTED", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusNotRequested })
	require.Eventually(t, func() bool { return !requested() }, 10*time.Second, 50*time.Millisecond, "the cancelled drain withdraws the eviction")
	allow, _, _ := unstructured.NestedBool(getLonghornNode(t, c, nodes[0]).Object, "spec", "allowScheduling")
	assert.True(t, allow)
}
