package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// agentSA is the agents' ServiceAccount, as deploy/ names it.
const agentSA = "edgedrain-agent"

// shortTokenTTL is how long token A lives: long enough to start an agent and have it defer its
// reboot, short enough that the server closes the connection within the test.
const shortTokenTTL = 8 * time.Second

// authScene is a scene on the real control plane of DESIGN §10: an embedded server that admits
// agents only with a pod-bound token of agentSA (checked by TokenReview) and the coordinator
// (the test's connection and the engine on it) with its password; agents run as DaemonSet pods
// bound to their nodes, so a drain leaves them and their tokens stay valid through it.
type authScene struct {
	*scene
	reg     *prometheus.Registry // the Authenticator's decision counter
	authLog *syncBuffer          // the Authenticator's log (refusal reasons), shown on failure
	opPW    string               // the operator identity's password (edgedrainctl, dashboards)
}

func newAuthScene(t *testing.T, group string, n int) *authScene {
	t.Helper()
	c := testenv.RequireCluster(t, cluster)
	s := &authScene{scene: &scene{t: t, c: c, group: group}, reg: prometheus.NewRegistry(), authLog: &syncBuffer{}}
	s.nodes = c.AddNodes(t, group, n)
	s.ns = c.Namespace(t)
	verifier, err := busauth.NewTokenVerifier(busauth.TokenConfig{Client: c.Client, Namespace: s.ns, ServiceAccount: agentSA})
	require.NoError(t, err)
	coordPW, err := busauth.NewPassword()
	require.NoError(t, err)
	log := logrus.New()
	log.SetOutput(s.authLog)
	log.SetLevel(logrus.DebugLevel)
	s.opPW, err = busauth.NewPassword()
	require.NoError(t, err)
	auth, err := busauth.New(busauth.Config{Tokens: verifier, CoordinatorPassword: coordPW, OperatorPassword: s.opPW, Registerer: s.reg, Logger: log})
	require.NoError(t, err)
	// The test's connection (the status recorder) and the engine's are the coordinator's: they
	// create the buckets; agents never do.
	s.Bus = testenv.StartBusWith(t, pubsub.EmbeddedConfig{Authentication: auth},
		pubsub.ConnectOptions{User: busauth.CoordinatorUser, Password: coordPW})
	require.NoError(t, testenv.CreateAgentDaemonSet(context.Background(), c.Client, s.ns, agentSA, group))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bus authenticator log:\n%s", s.authLog.String())
		}
	})
	return s
}

// blockEvictions creates a PodDisruptionBudget that lets no pod of app go, and returns a
// function that lifts it.
func (s *scene) blockEvictions(app string, replicas int32) (unblock func()) {
	s.t.Helper()
	ctx := context.Background()
	all := intstr.FromInt32(replicas)
	pdb, err := s.c.Client.PolicyV1().PodDisruptionBudgets(s.ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &all,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}, metav1.CreateOptions{})
	require.NoError(s.t, err)
	return func() {
		s.t.Helper()
		_, err := s.c.Client.PolicyV1().PodDisruptionBudgets(s.ns).Patch(ctx, pdb.Name, types.MergePatchType,
			[]byte(`{"spec":{"minAvailable":0}}`), metav1.PatchOptions{})
		require.NoError(s.t, err)
	}
}

// runBlockedCoordinator starts the engine with an eviction attempt far longer than the test: a
// drain blocked by a budget stays CORDONED (never FAILEDDRAIN, which would make the agent
// withdraw and ask again under a new request ID) until the budget is lifted.
func (s *authScene) runBlockedCoordinator() {
	s.runCoordinator(func(c *coordinator.Config) { c.Limits.DrainAttemptTimeout = 5 * time.Minute })
}

// agentPod returns the agent DaemonSet's pod on node.
func (s *authScene) agentPod(node string) *corev1.Pod {
	s.t.Helper()
	pod, err := testenv.AgentPodOn(context.Background(), s.c.Client, s.ns, node, time.Minute)
	require.NoError(s.t, err)
	return pod
}

// token is a real token of pod (audience edgedrain, 600 s), as the kubelet projects it.
func (s *authScene) token(pod *corev1.Pod) string {
	s.t.Helper()
	return s.c.PodToken(s.t, pod, testenv.AgentAudience, 600)
}

// shortToken is a token of pod that the API server's own key signed and that expires in ttl
// (TokenRequest cannot make one under 600 s), with its expiry.
func (s *authScene) shortToken(pod *corev1.Pod, ttl time.Duration) (string, time.Time) {
	s.t.Helper()
	exp := time.Unix(time.Now().Add(ttl).Unix(), 0) // the claim has whole seconds
	return s.c.Resign(s.t, s.token(pod), func(claims map[string]any) { claims["exp"] = exp.Unix() }), exp
}

// expiredToken is a token of pod that expired a minute ago: a kubelet that stopped rotating.
func (s *authScene) expiredToken(pod *corev1.Pod) string {
	s.t.Helper()
	now := time.Now()
	return s.c.Resign(s.t, s.token(pod), func(claims map[string]any) {
		claims["iat"], claims["nbf"], claims["exp"] = now.Add(-11*time.Minute).Unix(), now.Add(-11*time.Minute).Unix(), now.Add(-time.Minute).Unix()
	})
}

// decisions is the Authenticator's count of decisions with role and result.
func (s *authScene) decisions(role, result string) float64 {
	s.t.Helper()
	mfs, err := s.reg.Gather()
	require.NoError(s.t, err)
	for _, mf := range mfs {
		if mf.GetName() != "edgedrain_bus_auth_decisions_total" {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				want := map[string]string{"role": role, "result": result}[l.GetName()]
				if l.GetValue() != want {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// agentConns lists the server's connections (open or closed) of node's agent, oldest first.
func (s *authScene) agentConns(node string, state server.ConnState) []*server.ConnInfo {
	s.t.Helper()
	cz, err := s.NATS.Server().Connz(&server.ConnzOptions{State: state, Username: true, Sort: server.ByCid, Limit: 4096})
	require.NoError(s.t, err)
	var out []*server.ConnInfo
	for _, c := range cz.Conns {
		if c.Name == "edgedrain-agent/"+node {
			out = append(out, c)
		}
	}
	return out
}

// waitExpiredClose waits until the server has closed a connection of node's agent because its
// credential expired, and returns it.
func (s *authScene) waitExpiredClose(node string, timeout time.Duration) *server.ConnInfo {
	s.t.Helper()
	var closed *server.ConnInfo
	require.Eventually(s.t, func() bool {
		for _, c := range s.agentConns(node, server.ConnClosed) {
			if c.Reason == server.AuthenticationExpired.String() {
				closed = c
				return true
			}
		}
		return false
	}, timeout, 20*time.Millisecond, "the server never closed the connection of %s's agent for an expired token", node)
	return closed
}

// waitReconnected waits until node's agent has an open connection that started after since,
// and the agent itself reports the bus connected and has logged its reconnect; it returns that
// connection.
func (s *authScene) waitReconnected(a *agentProc, since time.Time, timeout time.Duration) *server.ConnInfo {
	s.t.Helper()
	var open *server.ConnInfo
	if !assert.Eventually(s.t, func() bool {
		for _, c := range s.agentConns(a.node, server.ConnOpen) {
			// A connection still being refused is listed too, its user not yet known.
			if !c.Start.Before(since) && c.AuthorizedUser != "" && c.AuthorizedUser != "[REDACTED]" {
				open = c
			}
		}
		return open != nil
	}, timeout, 20*time.Millisecond) {
		s.t.Fatalf("the agent of %s never connected again after %s (refusals so far: %v)", a.node, since.Format(time.RFC3339Nano),
			s.decisions("none", "refused"))
	}
	require.Eventually(s.t, func() bool {
		st, err := a.statusErr()
		return err == nil && st.BusConnected && strings.Contains(a.proc.Log(), "nats reconnected")
	}, 10*time.Second, 20*time.Millisecond, "the server has the connection but the agent reports the bus down")
	return open
}

// waitBlocked waits until node's drain for id is CORDONED with a PodDisruptionBudget blocking it.
func (s *scene) waitBlocked(node, id string) {
	s.t.Helper()
	s.waitFor(node, drainTimeout, "CORDONED, blocked by the PodDisruptionBudget", func(st nodedrain.NodeDrainStatus) bool {
		if st.Status != nodedrain.StatusCordoned || st.RequestID != id {
			return false
		}
		for _, b := range st.Blockers {
			if strings.Contains(b.Reason, "PodDisruptionBudget") {
				return true
			}
		}
		return false
	})
}

// requireStillDeferred checks that the agent holds the reboot for request id, has run nothing,
// and that id is still the request on the bus.
func (s *scene) requireStillDeferred(a *agentProc, id string) {
	s.t.Helper()
	st := a.status()
	require.Equal(s.t, agent.PhaseDeferred, st.State.Phase, "the agent no longer holds its reboot")
	require.Equal(s.t, agent.Operation("reboot"), st.State.Operation)
	require.Equal(s.t, id, st.State.RequestID, "the agent's request changed")
	r, _, err := s.Requests.Get(context.Background(), a.node)
	require.NoError(s.t, err, "the request is gone from the bus")
	require.Equal(s.t, id, r.RequestID, "another request is on the bus")
	require.Empty(s.t, a.runs(), "the reboot ran while the drain was blocked")
}

// finishOnce lifts the block and checks the reboot runs exactly once, for request id, after
// COMPLETE for it, and that no other request of this node was ever served.
func (s *scene) finishOnce(a *agentProc, id string, unblock func()) {
	s.t.Helper()
	unblock()
	complete := waitDeferredUntilComplete(a, id)
	runs := a.waitRuns(1, 10*time.Second)
	require.Eventually(s.t, func() bool {
		st, err := a.statusErr()
		return err == nil && st.State.Phase == agent.PhaseWaitingBoot
	}, 10*time.Second, 20*time.Millisecond, "the reboot command did not return")
	runs = a.runs() // the command returned: no other run can still be starting
	require.Len(s.t, runs, 1, "the reboot command ran %d times", len(runs))
	assert.Equal(s.t, "reboot", runs[0].op)
	assert.Equal(s.t, id, runs[0].request, "the reboot ran for another request")
	assert.False(s.t, runs[0].at.Before(complete.UpdatedAt), "the reboot ran before COMPLETE")
	for _, st := range s.Seen(a.node) {
		if st.RequestID != "" {
			assert.Equal(s.t, id, st.RequestID, "the coordinator served another request (%s)", st.Status)
		}
	}
	s.t.Logf("lifted block -> COMPLETE %s -> reboot command: %s", complete.UpdatedAt.Format(time.RFC3339Nano),
		runs[0].at.Sub(complete.UpdatedAt))
}

// writeToken replaces the token file's content in one step, as the kubelet's atomic writer
// does: a reader sees the old token or the new one, never a partial file.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".token.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(token), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// deferReboot makes a's reboot wait on the blocked drain: the sentinel appears, the agent
// publishes its request and defers; it returns the request.
func (s *scene) deferReboot(a *agentProc) nodedrain.NodeDrainRequest {
	s.t.Helper()
	require.NoError(s.t, os.WriteFile(a.sentinel, []byte("*** System restart required ***\n"), 0o644))
	req := s.request(a.node, "")
	require.Eventually(s.t, func() bool {
		st, err := a.statusErr()
		return err == nil && st.State.Phase == agent.PhaseDeferred && st.State.RequestID == req.RequestID
	}, 10*time.Second, 20*time.Millisecond, "the agent did not defer its reboot for %s", req.RequestID)
	return req
}

// TestAgentKeepsItsDeferredRebootAcrossATokenRotation: an agent connects with token A, which
// expires in seconds, and defers a reboot behind a drain a PodDisruptionBudget blocks. Before A
// expires its file is rotated to token B, as the kubelet does. At A's expiry the server closes
// the connection; the agent reconnects with B (its pod's node is its identity again), still
// holds the same request, and once the budget is lifted runs its reboot exactly once, for that
// request.
func TestAgentKeepsItsDeferredRebootAcrossATokenRotation(t *testing.T) {
	t.Parallel()
	s := newAuthScene(t, "rotate", 3)
	target := s.deploy("db", 3, 1)
	unblock := s.blockEvictions("db", 3)
	s.runBlockedCoordinator()
	pod := s.agentPod(target)
	tokenA, expA := s.shortToken(pod, shortTokenTTL)
	tokenB := s.token(pod)
	path := testenv.WriteToken(t, t.TempDir(), tokenA)
	a := s.newAgent(target, "--nats-token-file", path)
	a.start()
	first := s.agentConns(target, server.ConnOpen)
	require.Len(t, first, 1)
	assert.Equal(t, "agent of node "+target+" ("+s.ns+"/"+pod.Name+")", first[0].AuthorizedUser)

	req := s.deferReboot(a)
	writeToken(t, path, tokenB)
	rotated := time.Now()
	require.True(t, rotated.Before(expA), "setup too slow: token A expired at %s, before B was written", expA.Format(time.RFC3339Nano))
	t.Logf("token B written %s before A expires", expA.Sub(rotated))

	closed := s.waitExpiredClose(target, time.Until(expA)+10*time.Second)
	require.Equal(t, first[0].Cid, closed.Cid, "another connection expired than the one made with A")
	assert.False(t, closed.Stop.Before(expA), "the server closed the connection at %s, before A expired at %s", closed.Stop, expA)
	open := s.waitReconnected(a, *closed.Stop, 30*time.Second)
	assert.Equal(t, "agent of node "+target+" ("+s.ns+"/"+pod.Name+")", open.AuthorizedUser)
	assert.Equal(t, 2.0, s.decisions("agent", "accepted"), "the agent connected once with A and once with B")
	assert.Equal(t, 0.0, s.decisions("none", "refused"), "the agent presented a token that was refused")
	t.Logf("A expired %s -> server closed its connection +%s -> agent back with B +%s",
		expA.Format(time.RFC3339Nano), closed.Stop.Sub(expA), open.Start.Sub(*closed.Stop))

	s.waitBlocked(target, req.RequestID)
	s.requireStillDeferred(a, req.RequestID)
	s.finishOnce(a, req.RequestID, unblock)
}

// TestAgentRefusedAtReconnectKeepsRetrying: at token A's expiry the file holds a token the bus
// refuses (one that has expired, as if the kubelet stopped rotating, or garbage). The agent is
// refused, keeps trying (more than the two identical refusals after which a NATS client gives
// up by default), neither crashes nor drops its deferred reboot, and is back on the bus soon
// after a valid token is written; its reboot then runs exactly once, for its original request.
func TestAgentRefusedAtReconnectKeepsRetrying(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name string
		bad  func(s *authScene, pod *corev1.Pod) string
	}{
		{name: "expired token", bad: (*authScene).expiredToken},
		{name: "garbage", bad: func(*authScene, *corev1.Pod) string { return "not.a.token" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newAuthScene(t, []string{"refused-expired", "refused-garbage"}[i], 3)
			target := s.deploy("db", 3, 1)
			unblock := s.blockEvictions("db", 3)
			s.runBlockedCoordinator()
			pod := s.agentPod(target)
			tokenA, expA := s.shortToken(pod, shortTokenTTL)
			bad := tc.bad(s, pod)
			path := testenv.WriteToken(t, t.TempDir(), tokenA)
			a := s.newAgent(target, "--nats-token-file", path)
			a.start()
			req := s.deferReboot(a)
			writeToken(t, path, bad)
			require.True(t, time.Now().Before(expA), "setup too slow: token A expired at %s, before the bad token was written", expA.Format(time.RFC3339Nano))

			closed := s.waitExpiredClose(target, time.Until(expA)+10*time.Second)
			require.Eventually(t, func() bool { return s.decisions("none", "refused") >= 1 }, 30*time.Second, 20*time.Millisecond,
				"the agent never presented the bad token")
			require.False(t, a.proc.Exited(), "the agent exited once refused")
			require.Eventually(t, func() bool { st, err := a.statusErr(); return err == nil && !st.BusConnected }, 10*time.Second,
				20*time.Millisecond, "the agent reports the bus up while refused")
			assert.Empty(t, s.agentConns(target, server.ConnOpen), "the server let the agent in with a bad token")
			s.requireStillDeferred(a, req.RequestID)

			// nats.go gives up after the same refusal twice in a row unless told otherwise; an
			// agent must not: the kubelet (or the API server the coordinator asks) may be late.
			const attempts = 4
			retrying := assert.Eventually(t, func() bool { return s.decisions("none", "refused") >= attempts }, 30*time.Second,
				50*time.Millisecond)
			if !retrying {
				t.Errorf("the agent stopped reconnecting after %v refusals (process exited: %v; its log says the NATS connection closed for good: %v)",
					s.decisions("none", "refused"), a.proc.Exited(), strings.Contains(a.proc.Log(), `"msg":"nats connection closed"`))
			} else {
				t.Logf("A expired -> %d refused reconnects in %s", attempts, time.Since(*closed.Stop))
			}
			require.False(t, a.proc.Exited(), "the agent exited while refused")
			s.requireStillDeferred(a, req.RequestID)

			good := s.token(pod)
			writeToken(t, path, good)
			written := time.Now()
			open := s.waitReconnected(a, written, 30*time.Second)
			t.Logf("valid token written -> agent back on the bus: %s", open.Start.Sub(written))
			assert.Equal(t, "agent of node "+target+" ("+s.ns+"/"+pod.Name+")", open.AuthorizedUser)
			s.waitBlocked(target, req.RequestID)
			s.requireStillDeferred(a, req.RequestID)
			s.finishOnce(a, req.RequestID, unblock)
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
