package vms

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/preflight"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) { testenv.Main(m, &cluster) }

// vmWorld is a coordinator Engine with the KubeVirt explainer, on its own bus, draining a group
// of simulated nodes, with KubeVirt's stand-in in a namespace of its own.
type vmWorld struct {
	*testenv.Bus
	t     *testing.T
	c     *testenv.Cluster
	nodes []string
	ns    string
	kv    *testenv.KubeVirt
}

func startVMWorld(t *testing.T, group string, mode NonMigratable) *vmWorld {
	t.Helper()
	c := testenv.RequireCluster(t, cluster)
	w := &vmWorld{Bus: testenv.StartBus(t), t: t, c: c, nodes: c.AddNodes(t, group, 2), ns: c.Namespace(t)}
	w.kv = testenv.StartKubeVirt(t, c, w.ns, w.nodes[1], 1500*time.Millisecond)
	cfg := coordinator.DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream = c.Client, w.JS
	cfg.NodeSelector = testenv.GroupLabel + "=" + group
	cfg.ClusterSelector = cfg.NodeSelector // the test cluster is shared: its group is its cluster
	cfg.Limits = testenv.FastPolicy()
	cfg.Limits.DrainAttemptTimeout = 20 * time.Second
	cfg.EvictRetryDelay, cfg.ProgressEvery = 200*time.Millisecond, 100*time.Millisecond
	cfg.Metrics = coordinator.NewMetrics(prometheus.NewRegistry())
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	cfg.Logger = log.WithField("test", t.Name())
	cfg.Explainer = New(c.Dynamic, mode, cfg.Logger)
	engine, err := coordinator.NewEngine(cfg)
	require.NoError(t, err)
	testenv.RunUntilCleanup(t, engine.Run)
	return w
}

func (w *vmWorld) waitFor(what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	w.t.Helper()
	return w.WaitFor(w.t, w.nodes[0], 30*time.Second, what, ok)
}

func blockerWith(parts ...string) func(nodedrain.NodeDrainStatus) bool {
	return func(s nodedrain.NodeDrainStatus) bool {
		for _, b := range s.Blockers {
			all := b.Kind == nodedrain.BlockerPod
			for _, p := range parts {
				all = all && strings.Contains(b.Reason, p)
			}
			if all {
				return true
			}
		}
		return false
	}
}

// A VM KubeVirt live-migrates: while its launcher pod's eviction is refused, the status names
// the VM, where it goes and the migration's phase; the drain completes once it has moved.
func TestLiveMigrationIsReportedAndTheDrainCompletes(t *testing.T) {
	w := startVMWorld(t, "vm-migrate", Block)
	w.kv.CreateVM(t, testenv.VM{Name: "db", Node: w.nodes[0], Strategy: "LiveMigrate"})

	w.Request(t, w.nodes[0], "r-1", time.Now())
	st := w.waitFor("the migration reported", blockerWith("VM "+w.ns+"/db migrating to "+w.nodes[1]+": migration kubevirt-evacuation-", "Running"))
	t.Log(st.Blockers)
	st = w.waitFor("COMPLETE once the VM has moved", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	assert.Empty(t, st.Blockers)
	vmi, err := w.c.Dynamic.Resource(VMIs).Namespace(w.ns).Get(context.Background(), "db", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, w.nodes[1], str(vmi.Object, "status", "nodeName"), "the VM runs on the other node")
}

// A VM that cannot live-migrate under eviction strategy LiveMigrate blocks the drain, named with
// KubeVirt's reason, and the pre-flight predicts it; the VM keeps running.
func TestNonMigratableVMBlocksWithItsReason(t *testing.T) {
	w := startVMWorld(t, "vm-block", Block)
	w.kv.CreateVM(t, testenv.VM{Name: "legacy", Node: w.nodes[0], Strategy: "LiveMigrate", NotMigratable: "DisksNotLiveMigratable"})
	w.kv.CreateVM(t, testenv.VM{Name: "web", Node: w.nodes[0], Strategy: "LiveMigrate"})

	p, err := preflight.Predict(context.Background(), preflight.Config{Client: w.c.Client, VMs: New(w.c.Dynamic, Block, nil)}, w.nodes[0])
	require.NoError(t, err)
	require.Len(t, p.Blockers, 1, "%+v", p)
	assert.Contains(t, p.Blockers[0].Reason, "VM "+w.ns+"/legacy cannot live-migrate (DisksNotLiveMigratable: cannot migrate VMI: PVC legacy-disk is not shared")
	assert.Contains(t, strings.Join(p.Notes, "\n"), "VM "+w.ns+"/web would be live-migrated by KubeVirt")

	w.Request(t, w.nodes[0], "r-1", time.Now())
	st := w.waitFor("the VM named with its reason", blockerWith("VM "+w.ns+"/legacy cannot live-migrate (DisksNotLiveMigratable", "--non-migratable-vms=block"))
	assert.NotEqual(t, nodedrain.StatusComplete, st.Status)
	_, ok := w.kv.VMIExists(context.Background(), "legacy")
	assert.True(t, ok, "the VM keeps running")
	w.Withdraw(t, w.nodes[0])
	w.waitFor("withdrawn", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
}

// --non-migratable-vms=restart stops a VM that cannot migrate when its VirtualMachine starts it
// again (runStrategy Always): the drain completes, and KubeVirt has a new instance of it.
func TestNonMigratableVMIsRestartedElsewhere(t *testing.T) {
	w := startVMWorld(t, "vm-restart", Restart)
	w.kv.CreateVM(t, testenv.VM{Name: "legacy", Node: w.nodes[0], Strategy: "LiveMigrate", NotMigratable: "HostDeviceNotLiveMigratable", RunStrategy: "Always"})
	before, ok := w.kv.VMIExists(context.Background(), "legacy")
	require.True(t, ok)

	w.Request(t, w.nodes[0], "r-1", time.Now())
	w.waitFor("COMPLETE once the VM was stopped", func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	require.Eventually(t, func() bool {
		uid, ok := w.kv.VMIExists(context.Background(), "legacy")
		return ok && uid != before
	}, 10*time.Second, 50*time.Millisecond, "its VirtualMachine started it again")
}

// A VM whose VirtualMachine would not start it again (runStrategy Manual) is not stopped, even
// under --non-migratable-vms=restart.
func TestNonMigratableVMNotRestartedWithoutRunStrategyAlways(t *testing.T) {
	w := startVMWorld(t, "vm-manual", Restart)
	w.kv.CreateVM(t, testenv.VM{Name: "pet", Node: w.nodes[0], Strategy: "LiveMigrate", NotMigratable: "DisksNotLiveMigratable", RunStrategy: "Manual"})
	w.Request(t, w.nodes[0], "r-1", time.Now())
	w.waitFor("named, not stopped", blockerWith("VM "+w.ns+"/pet cannot live-migrate", `not stopped: it would not be started again: its VirtualMachine's runStrategy is "Manual"`))
	_, ok := w.kv.VMIExists(context.Background(), "pet")
	assert.True(t, ok)
	w.Withdraw(t, w.nodes[0])
	w.waitFor("withdrawn", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
}
