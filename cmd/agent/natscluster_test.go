package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// The bus as production runs it (deploy/overlays/external-nats): a NATS JetStream cluster of
// three nats-server processes, buckets replicated three times, every client but the
// coordinator admitted by the coordinator's auth callout, the coordinator a process of its own.

var (
	clusterBinsOnce sync.Once
	natsServerBin   string // nats-server from its Go module
	coordBin        string // the coordinator
	clusterBinsErr  error
)

// clusterBinaries builds nats-server and the coordinator once for the package.
func clusterBinaries(t *testing.T) {
	t.Helper()
	clusterBinsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "edgedrain-natscluster-")
		if err != nil {
			clusterBinsErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if natsServerBin, clusterBinsErr = testenv.BuildNATSServer(ctx, dir); clusterBinsErr == nil {
			coordBin, clusterBinsErr = testenv.BuildGo(ctx, "./cmd/coordinator", dir)
		}
	})
	require.NoError(t, clusterBinsErr)
}

// natsScene is an authScene on a three-server NATS cluster with coordinator processes.
type natsScene struct {
	*authScene
	nats                   *testenv.NATSCluster
	passwordFile, seedFile string
	coords                 map[string]*coordProc
}

type coordProc struct {
	proc *testenv.Proc
	port int
}

func newNATSScene(t *testing.T, group string, n int) *natsScene {
	t.Helper()
	clusterBinaries(t)
	c := testenv.RequireCluster(t, cluster)
	s := &natsScene{authScene: &authScene{scene: &scene{t: t, c: c, group: group}, reg: prometheus.NewRegistry(), authLog: &syncBuffer{}},
		coords: map[string]*coordProc{}}
	s.nodes = c.AddNodes(t, group, n)
	s.ns = c.Namespace(t)
	issuer, err := nkeys.CreateAccount()
	require.NoError(t, err)
	issuerPub, err := issuer.PublicKey()
	require.NoError(t, err)
	seed, err := issuer.Seed()
	require.NoError(t, err)
	password, err := busauth.NewPassword()
	require.NoError(t, err)
	dir := t.TempDir()
	s.passwordFile, s.seedFile = filepath.Join(dir, "password"), filepath.Join(dir, "issuer.seed")
	require.NoError(t, os.WriteFile(s.passwordFile, []byte(password), 0o600))
	require.NoError(t, os.WriteFile(s.seedFile, seed, 0o600))
	// As deploy/overlays/external-nats/nats-server.conf.example.
	s.nats = testenv.StartNATSCluster(t, natsServerBin, 3, fmt.Sprintf(`authorization {
  timeout: 5s
  users: [ { user: %q, password: %q } ]
  auth_callout { issuer: %q, auth_users: [ %q ] }
}`, busauth.CoordinatorUser, password, issuerPub, busauth.CoordinatorUser))
	s.urls = s.nats.URLs()
	t.Cleanup(func() {
		if t.Failed() {
			for i := range s.nats.Servers {
				t.Logf("%s:\n%s", s.nats.Servers[i].Name, tail(s.nats.Log(i), 15))
			}
		}
	})
	// The test's recorder connects as the coordinator does (the callout's auth user).
	s.Bus = testenv.OpenBus(t, pubsub.ConnectOptions{URLs: s.urls, User: busauth.CoordinatorUser, Password: password}, 3)
	require.NoError(t, testenv.CreateAgentDaemonSet(context.Background(), c.Client, s.ns, agentSA, group))
	return s
}

// startCoordinator runs a coordinator process named id on the cluster, as the external-nats
// overlay does, with an eviction attempt far longer than the test (a drain a budget blocks
// stays CORDONED) and the bus checked every second.
func (s *natsScene) startCoordinator(id string, extra ...string) *coordProc {
	s.t.Helper()
	port := testenv.FreePort(s.t)
	args := []string{"--kubeconfig", s.c.Kubeconfig, "--nats-url", strings.Join(s.urls, ","),
		"--nats-user", busauth.CoordinatorUser, "--nats-password-file", s.passwordFile,
		"--auth-callout-issuer-seed-file", s.seedFile, "--agent-service-account", s.ns + "/" + agentSA,
		"--bucket-replicas", "3", "--leader-election-namespace", s.ns, "--identity", id,
		"--node-selector", testenv.GroupLabel + "=" + s.group, "--cluster-node-selector", testenv.GroupLabel + "=" + s.group, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--log-format", "json", "--bus-check-interval", "1s",
		"--drain-attempt-timeout", "5m", "--cordon-backoff", "50ms", "--drain-backoff", "100ms",
		"--evict-retry-delay", "200ms", "--volume-recheck", "100ms"}
	p := testenv.StartProc(s.t, s.t.TempDir(), "coordinator-"+id, coordBin, nil, append(args, extra...)...)
	cp := &coordProc{proc: p, port: port}
	s.coords[id] = cp
	s.t.Cleanup(func() {
		if s.t.Failed() {
			p.Signal(syscall.SIGQUIT) // Go prints every goroutine's stack: where a stuck run waits
			p.Wait(10 * time.Second)
			s.t.Logf("coordinator %s:\n%s", id, p.Log())
		}
	})
	return cp
}

// tokenAgent prepares node's agent with its DaemonSet pod's projected token, as deployed.
func (s *natsScene) tokenAgent(node string, extra ...string) *agentProc {
	s.t.Helper()
	token := testenv.WriteToken(s.t, s.t.TempDir(), s.token(s.agentPod(node)))
	return s.newAgent(node, append([]string{"--nats-token-file", token}, extra...)...)
}

// leader is the coordinator holding the Lease ("" if none).
func (s *natsScene) leader() string {
	lease, err := s.c.Client.CoordinationV1().Leases(s.ns).Get(context.Background(), "edgedrain-coordinator", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// streamLeader is the index of the server leading stream, other than dead (-1: none), as the
// live servers report it.
func (s *natsScene) streamLeader(stream string, dead int) int {
	s.t.Helper()
	leader := -1
	require.Eventually(s.t, func() bool {
		for i := range s.nats.Servers {
			if i == dead {
				continue
			}
			if st, err := s.nats.StreamState(i, stream); err == nil && st.Leader != "" {
				leader = s.nats.Index(st.Leader)
				return leader >= 0 && leader != dead
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no live server knows a leader of %s", stream)
	return leader
}

// agentServer is the index of the live server node's agent is connected to, or -1.
func (s *natsScene) agentServer(node string) int {
	for i := range s.nats.Servers {
		names, err := s.nats.ConnectionNames(i)
		if err == nil && slices.Contains(names, "edgedrain-agent/"+node) {
			return i
		}
	}
	return -1
}

// moveLeader makes server to the leader of stream (a JetStream leader stepdown with a preferred
// successor), unless it leads already.
func (s *natsScene) moveLeader(stream string, to int) {
	s.t.Helper()
	if s.streamLeader(stream, -1) == to {
		return
	}
	req := fmt.Sprintf(`{"placement":{"preferred":%q}}`, s.nats.Servers[to].Name)
	msg, err := s.JS.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(req), 5*time.Second)
	require.NoError(s.t, err)
	require.NotContains(s.t, string(msg.Data), `"error"`, "stepdown refused")
	require.Eventually(s.t, func() bool { return s.streamLeader(stream, -1) == to }, 30*time.Second, 50*time.Millisecond,
		"%s did not become the leader of %s", s.nats.Servers[to].Name, stream)
}

// connections lists each server's client connections, for failure messages.
func (s *natsScene) connections() string {
	var b strings.Builder
	for i, srv := range s.nats.Servers {
		names, err := s.nats.ConnectionNames(i)
		fmt.Fprintf(&b, "\n%s (port %d): %v %v", srv.Name, srv.Port, names, err)
	}
	return b.String()
}

// ready is the answer of a process's /readyz: nil when ready.
func ready(port int) error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz %d", resp.StatusCode)
	}
	return nil
}

func tail(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// statusStream is the JetStream stream behind the status bucket.
const statusStream = "KV_" + nodedrain.StatusBucket

// TestDrainSurvivesTheStatusLeadersDeath: mid-drain (CORDONED, a budget holding the pods), the
// server leading the status stream is killed with SIGKILL. Clients fail over to the other two
// (the agent through the callout again), the stream elects a new leader, the drain goes on to
// COMPLETE once the budget is lifted, and the reboot runs exactly once, for the same request,
// with every status of the drain recorded. Restarted, the killed server catches up: its copy of
// the status stream ends where the leader's does.
func TestDrainSurvivesTheStatusLeadersDeath(t *testing.T) {
	t.Parallel()
	s := newNATSScene(t, "natsha", 3)
	target := s.deploy("db", 3, 1)
	unblock := s.blockEvictions("db", 3)
	s.startCoordinator("a")
	a := s.tokenAgent(target)
	a.start()
	req := s.deferReboot(a)
	s.waitBlocked(target, req.RequestID)

	// The server to kill leads the status stream and holds the agent's connection: the agent must
	// find the other servers (from the cluster's gossip) and be admitted by the callout again.
	killed := -1
	require.Eventually(t, func() bool { killed = s.agentServer(target); return killed >= 0 }, 10*time.Second, 50*time.Millisecond,
		"the agent's connection is on no server: %s", s.connections())
	s.moveLeader(statusStream, killed)
	s.nats.Kill(killed)
	t.Logf("killed %s, the leader of %s and the agent's server, mid-drain", s.nats.Servers[killed].Name, statusStream)
	require.Eventually(t, func() bool { i := s.agentServer(target); return i >= 0 && i != killed }, 30*time.Second, 50*time.Millisecond,
		"the agent did not connect to another server: %s", s.connections())
	newLeader := s.streamLeader(statusStream, killed)
	s.requireStillDeferred(a, req.RequestID)
	s.finishOnce(a, req.RequestID, unblock)

	var states []nodedrain.DrainStatus
	for _, st := range s.Seen(target) {
		states = append(states, st.Status)
	}
	for _, want := range []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusStarting, nodedrain.StatusCordoned, nodedrain.StatusComplete} {
		assert.Contains(t, states, want, "a status of the drain was lost")
	}

	s.nats.Restart(killed)
	s.nats.WaitHealthy(killed, time.Minute)
	want, err := s.nats.StreamState(newLeader, statusStream)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := s.nats.StreamState(killed, statusStream)
		return err == nil && got.LastSeq >= want.LastSeq
	}, 30*time.Second, 50*time.Millisecond, "the restarted server did not catch up with the status stream (leader at %d)", want.LastSeq)
}

// TestBusWithoutQuorumChangesNothing: two of the three servers are killed while one node's
// drain is blocked by a budget (CORDONED) and another node is idle. The third server still takes
// connections, but the buckets have no leader and refuse writes. The coordinator and the agents
// say so (readiness, metric, one log line). The budget is lifted meanwhile, but the blocked
// drain's COMPLETE cannot be published, so its reboot does not run and the node stays cordoned; the idle node's reboot, asked for meanwhile, cannot publish its request,
// so that node is not cordoned. With one server back (quorum), both say the bus is back, the
// first drain completes, the second is taken up, and each reboot runs once, for its request.
func TestBusWithoutQuorumChangesNothing(t *testing.T) {
	t.Parallel()
	s := newNATSScene(t, "natsquorum", 3)
	busy := s.deploy("db", 3, 1)
	unblock := s.blockEvictions("db", 3)
	coord := s.startCoordinator("a", "--max-concurrent-drains", "2")
	require.Eventually(t, func() bool { return s.leader() == "a" }, 30*time.Second, 50*time.Millisecond, "the coordinator did not take the Lease")
	idle := s.nodes[0]
	if idle == busy {
		idle = s.nodes[1]
	}
	agents := map[string]*agentProc{}
	for _, node := range []string{busy, idle} {
		agents[node] = s.tokenAgent(node, "--bus-check-interval", "1s")
		agents[node].start()
	}
	reqBusy := s.deferReboot(agents[busy])
	s.waitBlocked(busy, reqBusy.RequestID)
	require.Eventually(t, func() bool { return ready(coord.port) == nil }, 30*time.Second, 50*time.Millisecond, "coordinator not ready")
	for _, a := range agents {
		require.Eventually(t, func() bool { return a.metric("edgedrain_agent_bus_available") == 1 }, 30*time.Second, 50*time.Millisecond,
			"the agent of %s does not report the bus available", a.node)
	}

	s.nats.Kill(1)
	s.nats.Kill(2)
	t.Log("killed two of three servers")
	require.Eventually(t, func() bool { return ready(coord.port) != nil }, 30*time.Second, 100*time.Millisecond,
		"the coordinator still reports ready on a bus without quorum")
	for _, a := range agents {
		require.Eventually(t, func() bool { return a.metric("edgedrain_agent_bus_available") == 0 }, 30*time.Second, 100*time.Millisecond,
			"the agent of %s still reports the bus available", a.node)
		require.Error(t, ready(listenPort(t, a)), "the agent of %s still reports ready", a.node)
		assert.Contains(t, a.proc.Log(), "the bus does not answer")
	}
	assert.Equal(t, 1, strings.Count(coord.proc.Log(), "the bus does not answer"), "the coordinator should say it once\n%s", coord.proc.Tail(20))

	// The budget goes: whatever the drain under way does meanwhile, its COMPLETE cannot be
	// published. (Its progress statuses cannot either, and each attempt waits for its timeout
	// in the coordinator's loop: the eviction may well stall until the bus is back.)
	unblock()
	a := agents[idle]
	require.NoError(t, os.WriteFile(a.sentinel, []byte("*** System restart required ***\n"), 0o644))
	// The failure is logged once (a warning), each retry at debug level.
	require.Eventually(t, func() bool {
		log := a.proc.Log()
		return strings.Contains(log, "cannot publish the drain request") && strings.Count(log, `"msg":"publishing the drain request"`) >= 3
	}, time.Minute, 100*time.Millisecond, "the agent did not try (and retry) to publish its request\n%s", a.proc.Tail(20))
	require.Eventually(t, func() bool { return strings.Contains(coord.proc.Log(), "publishing status failed") }, time.Minute, 100*time.Millisecond,
		"the coordinator did not try to publish the drain's next status")
	assert.Empty(t, agents[busy].runs(), "the reboot ran though its COMPLETE could not be published")
	assert.True(t, s.unschedulable(busy), "the node under drain was uncordoned while the bus had no quorum")
	assert.False(t, s.unschedulable(idle), "a node was cordoned while the bus had no quorum")
	assert.Empty(t, a.runs(), "the reboot ran while the bus had no quorum")

	s.nats.Restart(1)
	s.nats.WaitHealthy(1, time.Minute)
	require.Eventually(t, func() bool { return ready(coord.port) == nil }, 30*time.Second, 100*time.Millisecond, "the coordinator did not report the bus back")
	assert.Contains(t, coord.proc.Log(), "the bus answers again")
	for _, node := range []string{busy, idle} {
		id := reqBusy.RequestID
		if node == idle {
			id = s.request(idle, "").RequestID
		}
		complete := waitDeferredUntilComplete(agents[node], id)
		runs := agents[node].waitRuns(1, 30*time.Second)
		require.Len(t, runs, 1)
		assert.Equal(t, id, runs[0].request)
		t.Logf("%s: quorum back -> COMPLETE at %s", node, complete.UpdatedAt.Format(time.RFC3339Nano))
		require.Eventually(t, func() bool { return agents[node].metric("edgedrain_agent_bus_available") == 1 }, 30*time.Second, 100*time.Millisecond)
		assert.Contains(t, agents[node].proc.Log(), "the bus answers again")
	}
}

// TestLeaderKilledMidDrainOnANATSCluster: two coordinator processes on the cluster; the one
// holding the Lease is killed with SIGKILL while a drain is blocked; the other takes the Lease,
// resumes the drain from the bus and finishes it: the reboot runs once, for the same request.
func TestLeaderKilledMidDrainOnANATSCluster(t *testing.T) {
	t.Parallel()
	s := newNATSScene(t, "natsleader", 3)
	target := s.deploy("db", 3, 1)
	unblock := s.blockEvictions("db", 3)
	s.startCoordinator("a")
	s.startCoordinator("b")
	var leader string
	require.Eventually(t, func() bool { leader = s.leader(); return leader != "" }, 30*time.Second, 50*time.Millisecond, "no coordinator took the Lease")
	other := map[string]string{"a": "b", "b": "a"}[leader]
	a := s.tokenAgent(target)
	a.start()
	req := s.deferReboot(a)
	s.waitBlocked(target, req.RequestID)

	s.coords[leader].proc.Kill()
	require.Eventually(t, func() bool { return s.leader() == other }, time.Minute, 50*time.Millisecond, "%s did not take over", other)
	s.requireStillDeferred(a, req.RequestID)
	s.finishOnce(a, req.RequestID, unblock)
}

// listenPort is the port of the agent's metrics listener.
func listenPort(t *testing.T, a *agentProc) int {
	t.Helper()
	var port int
	_, err := fmt.Sscanf(a.listenAddr()[strings.LastIndex(a.listenAddr(), ":")+1:], "%d", &port)
	require.NoError(t, err)
	return port
}
