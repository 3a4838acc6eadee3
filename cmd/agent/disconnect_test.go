package main

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// viaProxy makes the agent reach NATS through a proxy the test can cut and restore.
func (a *agentProc) viaProxy() *testenv.Proxy {
	a.s.t.Helper()
	u, err := url.Parse(a.s.NATS.ClientURL())
	require.NoError(a.s.t, err)
	p := testenv.StartProxy(a.s.t, u.Host)
	for i := range a.args {
		if a.args[i] == "--nats-url" {
			a.args[i+1] = "nats://" + p.Addr()
		}
	}
	return p
}

// edgedrainctl withdraw while the agent is cut off from the bus: the drain completes and the
// request is withdrawn (the node uncordoned) while the agent sees nothing. On reconnect its
// watch replays the bucket's history, the COMPLETE of its request among it: the agent must not
// run the reboot on a node that was just uncordoned.
func TestWithdrawWhileAgentDisconnected(t *testing.T) {
	t.Parallel()
	s := newScene(t, "withdraw-cut", 3)
	target := s.deploy("web", 6, 2) // pods with a 2 s grace period: the drain takes a while
	s.runCoordinator(nil)
	a := s.newAgent(target)
	proxy := a.viaProxy()
	a.start()

	require.NoError(t, os.WriteFile(a.sentinel, []byte("*** System restart required ***\n"), 0o644))
	req := s.request(target, "")
	proxy.Cut() // the agent's network goes away before the drain completes
	s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)
	require.NotEqual(t, nodedrain.StatusComplete, a.status().Status, "the agent saw COMPLETE before its network was cut")

	// edgedrainctl withdraw: the request goes; the coordinator uncordons the node.
	require.NoError(t, s.Requests.Unpublish(context.Background(), target))
	s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.False(t, s.unschedulable(target))

	require.NoError(t, proxy.Restore())
	require.Eventually(t, func() bool { return a.status().Status == nodedrain.StatusNotRequested }, 30*time.Second,
		20*time.Millisecond, "the agent never caught up with the bus after its network came back")
	assert.Empty(t, a.runs(), "the agent ran its operation on a COMPLETE replayed after the withdrawal")
}
