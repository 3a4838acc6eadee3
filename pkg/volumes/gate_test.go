package volumes

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

var (
	beforeEviction = coordinator.GateOptions{}
	afterEviction  = coordinator.GateOptions{AfterEviction: true}
)

// volumeOn is a Longhorn volume with one replica per node (named <volume>-r-<i>, at 10.1.0.<i+1>),
// each in the given state, and its engine with those replicas' modes and the given rebuilds.
type volumeOn struct {
	name  string
	nodes []string
	state []replicaState
	rebs  []rebuild
}

func (v volumeOn) addr(i int) string { return "10.1.0." + strconv.Itoa(i+1) + ":10000" }

func (v volumeOn) objects() []*unstructured.Unstructured {
	objs := []*unstructured.Unstructured{lhVolume(v.name, int64(len(v.nodes)), "attached", "shop", "data-"+v.name)}
	addrs, modes := map[string]string{}, map[string]string{}
	for i, node := range v.nodes {
		r := v.name + "-r-" + strconv.Itoa(i)
		ip := strings.TrimSuffix(v.addr(i), ":10000")
		objs = append(objs, lhReplica(r, v.name, node, v.state[i], ip))
		addrs[r] = v.addr(i)
		switch v.state[i] {
		case "healthy":
			modes[r] = "RW"
		case "rebuilding":
			modes[r] = "WO"
		case "failed":
			modes[r] = "ERR"
		}
	}
	return append(objs, lhEngine(v.name, v.nodes[0], addrs, modes, v.rebs...))
}

func TestLonghornLastHealthyReplica(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "last", 3)
	g := startGate(t, c, nil)
	vol := volumeOn{name: "vol-last", nodes: nodes, state: []replicaState{"healthy", "rebuilding", "failed"}}
	vol.rebs = []rebuild{{to: vol.addr(1), progress: 45, from: []string{vol.addr(0)}}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)

	r := g.eventually(t, nodes[0], beforeEviction, "blocked by the last healthy replica, with the rebuild's progress",
		func(r coordinator.GateResult) bool {
			return !r.Safe && len(r.Blockers) == 1 && r.Blockers[0].Progress == 45
		})
	require.Len(t, r.Blockers, 1)
	b := r.Blockers[0]
	assert.Equal(t, nodedrain.Blocker{Kind: nodedrain.BlockerVolume, Namespace: "shop", Name: "vol-last", Progress: 45,
		Reason: "longhorn volume (PVC shop/data-vol-last): last healthy replica; rebuilding on last-1 45%"}, b)
	assert.True(t, g.check(t, nodes[1], beforeEviction).Safe, "the node being rebuilt onto holds nothing yet")

	// Longhorn finishes the rebuild: the replica on last-1 is healthy, the engine says RW.
	vol.state[1], vol.rebs = "healthy", nil
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	r = g.eventually(t, nodes[0], beforeEviction, "safe once another replica is healthy", func(r coordinator.GateResult) bool { return r.Safe })
	assert.Empty(t, r.Blockers)
	assert.Positive(t, testutil.CollectAndCount(g.metrics.CheckDuration))
}

func TestLonghornRebuildSource(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "source", 3)
	g := startGate(t, c, nil)
	vol := volumeOn{name: "vol-source", nodes: nodes, state: []replicaState{"healthy", "healthy", "rebuilding"}}
	vol.rebs = []rebuild{{to: vol.addr(2), progress: 30, from: []string{vol.addr(0)}}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)

	r := g.eventually(t, nodes[0], beforeEviction, "the only rebuild source waits", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 1 && r.Blockers[0].Progress == 30
	})
	require.Len(t, r.Blockers, 1)
	assert.Equal(t, 30, r.Blockers[0].Progress)
	assert.Contains(t, r.Blockers[0].Reason, "only healthy rebuild source for the replica rebuilding on source-2 30%")
	assert.True(t, g.check(t, nodes[1], beforeEviction).Safe, "the other healthy replica is not a source of the rebuild")

	vol.rebs[0].progress = 80
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "progress follows the rebuild", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && r.Blockers[0].Progress == 80
	})

	vol.state[2], vol.rebs = "healthy", nil
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "safe once the rebuild is over", func(r coordinator.GateResult) bool { return r.Safe })
}

func TestLonghornHealthyElsewhereDoesNotWait(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "healthy", 3)
	vol := volumeOn{name: "vol-healthy", nodes: nodes, state: []replicaState{"healthy", "healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g := startGate(t, c, nil) // started after the objects exist: the first answer is already right
	for _, n := range nodes {
		r := g.check(t, n, afterEviction)
		assert.True(t, r.Safe, n)
		assert.Empty(t, r.Blockers, n)
	}
}

func TestWholeClusterCountsStoppedReplicas(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "whole", 3)
	g := startGate(t, c, nil)
	// whole-1 already went down for the shutdown: cordoned, its replica stopped with its data.
	cordon(t, c, nodes[1], true)
	vol := volumeOn{name: "vol-whole", nodes: nodes, state: []replicaState{"healthy", "stopped", "failed"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)

	r := g.eventually(t, nodes[0], beforeEviction, "a planned single-node drain does not count a stopped replica",
		func(r coordinator.GateResult) bool {
			return !r.Safe && len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "other healthy replicas unusable: whole-1 (cordoned)")
		})
	r = g.check(t, nodes[0], coordinator.GateOptions{WholeCluster: true})
	assert.True(t, r.Safe, "in a whole-cluster shutdown the stopped replica is a copy: %+v", r)
}

func TestEvictPolicyRequestsAndReleases(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "evict", 3)
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyEvict })
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-evict", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)

	r := g.eventually(t, nodes[0], beforeEviction, "waits for a replacement", func(r coordinator.GateResult) bool {
		return !r.Safe && len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "1 of 2 healthy on other nodes")
	})
	assert.Contains(t, r.Blockers[0].Reason, "waiting for a replacement to start")
	lhn := getLonghornNode(t, c, nodes[0])
	requested, _, _ := unstructured.NestedBool(lhn.Object, "spec", "evictionRequested")
	allow, _, _ := unstructured.NestedBool(lhn.Object, "spec", "allowScheduling")
	assert.True(t, requested, "Longhorn is asked to evict")
	assert.False(t, allow, "scheduling is disabled, as Longhorn requires for an eviction")
	assert.Contains(t, lhn.GetAnnotations(), LonghornEvictionAnnotation)

	// Longhorn rebuilds a replacement on evict-2.
	vol.nodes, vol.state = nodes, []replicaState{"healthy", "healthy", "rebuilding"}
	vol.rebs = []rebuild{{to: vol.addr(2), progress: 60, from: []string{vol.addr(0), vol.addr(1)}}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], beforeEviction, "progress of the replacement", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && r.Blockers[0].Progress == 60
	})
	vol.state[2], vol.rebs = "healthy", nil
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	g.eventually(t, nodes[0], afterEviction, "safe once replaced", func(r coordinator.GateResult) bool { return r.Safe })

	require.NoError(t, g.Release(context.Background(), nodes[0]))
	lhn = getLonghornNode(t, c, nodes[0])
	requested, _, _ = unstructured.NestedBool(lhn.Object, "spec", "evictionRequested")
	allow, _, _ = unstructured.NestedBool(lhn.Object, "spec", "allowScheduling")
	assert.False(t, requested, "the eviction request is withdrawn")
	assert.True(t, allow, "scheduling is back as it was")
	assert.NotContains(t, lhn.GetAnnotations(), LonghornEvictionAnnotation)
	require.NoError(t, g.Release(context.Background(), nodes[0]), "releasing twice is harmless")
	assert.Equal(t, 1, g.events.count("Normal VolumeEvictionRequested Node /"+nodes[0]), g.events)
	assert.Equal(t, 1, g.events.count("Normal VolumeEvictionWithdrawn Node /"+nodes[0]), g.events)

	t.Run("a request someone else made is left alone", func(t *testing.T) {
		other := lhNode(nodes[1], false)
		require.NoError(t, unstructured.SetNestedField(other.Object, true, "spec", "evictionRequested"))
		applyLonghorn(t, c.Dynamic, other)
		require.Eventually(t, func() bool {
			_, err := g.Check(context.Background(), nodes[1], beforeEviction)
			return err == nil
		}, 10*time.Second, 50*time.Millisecond)
		require.NoError(t, g.Release(context.Background(), nodes[1]))
		lhn := getLonghornNode(t, c, nodes[1])
		requested, _, _ := unstructured.NestedBool(lhn.Object, "spec", "evictionRequested")
		assert.True(t, requested)
		assert.NotContains(t, lhn.GetAnnotations(), LonghornEvictionAnnotation)
	})
}

func TestAllowPolicyReportsButNeverBlocks(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "allow", 2)
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyAllow })
	vol := volumeOn{name: "vol-allow", nodes: nodes, state: []replicaState{"healthy", "failed"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	r := g.eventually(t, nodes[0], afterEviction, "the last replica reported", func(r coordinator.GateResult) bool { return len(r.Blockers) == 1 })
	assert.True(t, r.Safe)
	assert.Contains(t, r.Blockers[0].Reason, "last healthy replica")
}

// noLonghorn is a clientset whose discovery serves no longhorn.io.
type noLonghorn struct{ kubernetes.Interface }

func (noLonghorn) Discovery() discovery.DiscoveryInterfaces {
	return &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
}

func TestLonghornAbsentAllowsAndSaysSoOnce(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "absent", 2)
	vol := volumeOn{name: "vol-absent", nodes: nodes, state: []replicaState{"healthy", "failed"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	log, hook := test.NewNullLogger()
	g := startGate(t, c, func(cfg *Config) { cfg.Client, cfg.Logger = noLonghorn{c.Client}, log })
	for range 3 {
		r := g.check(t, nodes[0], afterEviction)
		assert.True(t, r.Safe)
		assert.Empty(t, r.Blockers)
	}
	warnings := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "Longhorn CRDs") {
			warnings++
		}
	}
	assert.Equal(t, 1, warnings)
	assert.Equal(t, 0.0, testutil.ToFloat64(g.metrics.SourceAvailable.WithLabelValues("longhorn")))
}

func getLonghornNode(t *testing.T, c *testenv.Cluster, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := c.Dynamic.Resource(longhornNodes).Namespace(lhNS).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return u
}

func TestAnswersFromCacheWhenAPIUnreachable(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "unreach", 2)
	u, err := url.Parse(c.Admin.Host)
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	rc := rest.CopyConfig(c.Admin)
	rc.Host, rc.Timeout = "https://"+proxy.Addr(), 2*time.Second
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(rc)
	require.NoError(t, err)
	g := startGate(t, c, func(cfg *Config) { cfg.Client, cfg.Dynamic = client, dyn })
	vol := volumeOn{name: "vol-unreach", nodes: nodes, state: []replicaState{"healthy", "failed"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	want := g.eventually(t, nodes[0], beforeEviction, "blocked", func(r coordinator.GateResult) bool { return len(r.Blockers) == 1 })

	proxy.Cut()
	// As the coordinator asks once the API has been unreachable for a while: a short deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := g.Check(ctx, nodes[0], beforeEviction)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the last known view")
	assert.NoError(t, ctx.Err(), "answered from the caches, without waiting for the API")
}
