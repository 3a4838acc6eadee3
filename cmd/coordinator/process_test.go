package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

var (
	cluster  *testenv.Cluster
	coordBin string // the coordinator binary, built once for the package's process tests
)

func TestMain(m *testing.M) { testenv.MainWithBinary(m, &cluster, "./cmd/coordinator", &coordBin) }

// Two coordinator processes: one holds the Lease and drains; SIGKILLed (no chance to release
// the Lease), the other takes over within the worst case of client-go's leader election and
// finishes the cycle by uncordoning the node.
func TestHardKilledLeaderIsReplaced(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "coord-proc", 2)
	ns := c.Namespace(t)
	bus := testenv.StartBus(t)
	ctx := context.Background()
	procs := map[string]*testenv.Proc{}
	for _, id := range []string{"a", "b"} {
		procs[id] = testenv.StartProc(t, t.TempDir(), "coordinator-"+id, coordBin, nil,
			"--kubeconfig", c.Kubeconfig, "--nats-url", bus.NATS.ClientURL(),
			"--leader-election-namespace", ns, "--identity", id,
			"--node-selector", testenv.GroupLabel+"=coord-proc", "--cluster-node-selector", testenv.GroupLabel+"=coord-proc", "--listen", "", "--log-format", "json")
	}
	holder := func() string {
		lease, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, "edgedrain-coordinator", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	require.Eventually(t, func() bool { return holder() != "" }, 30*time.Second, 50*time.Millisecond, "no coordinator took the Lease")
	leader := holder()
	other := map[string]string{"a": "b", "b": "a"}[leader]

	bus.Request(t, nodes[0], "r1", time.Now())
	bus.WaitStatus(t, nodes[0], nodedrain.StatusComplete, 60*time.Second)

	killed := time.Now()
	procs[leader].Signal(syscall.SIGKILL)
	// client-go polls the Lease every RetryPeriod stretched by up to 120 % jitter: the standby may
	// see the leader's last renewal one poll late and its expiry one poll late.
	lc := coordinator.DefaultLeaderConfig()
	worst := lc.LeaseDuration + 2*time.Duration(2.2*float64(lc.RetryPeriod)) + time.Second
	require.Eventually(t, func() bool { return holder() == other }, worst, 50*time.Millisecond,
		"%s did not take over within %s of %s's death\n%s", other, worst, leader, procs[other].Tail(20))
	t.Logf("failover after a hard kill took %s", time.Since(killed).Round(100*time.Millisecond))

	bus.Withdraw(t, nodes[0])
	bus.WaitFor(t, nodes[0], 30*time.Second, "uncordoned by the new leader", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	node, err := c.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, node.Spec.Unschedulable)
	procs[other].Signal(syscall.SIGTERM)
	assert.Equal(t, 0, procs[other].Wait(15*time.Second), "SIGTERM should stop the coordinator cleanly\n%s", procs[other].Tail(20))
}
