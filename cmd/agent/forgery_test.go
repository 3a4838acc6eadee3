package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// The attacks of DESIGN §10 on statuses, made with real credentials on the secured bus: the
// server writes a copy of a stored message wherever a client aims a reply, so permissions alone
// cannot keep a status-shaped payload out of a node's status key.

const (
	reqStream, stStream = "KV_" + nodedrain.RequestsBucket, "KV_" + nodedrain.StatusBucket
	reqKey, stKey       = "$KV." + nodedrain.RequestsBucket + ".", "$KV." + nodedrain.StatusBucket + "."
)

// operator connects with the operator identity's password (a leaked Secret, a dashboard); the
// server's permission refusals go to denied.
func (s *authScene) operator() (nc *nats.Conn, denied chan string) {
	s.t.Helper()
	denied = make(chan string, 16)
	nc, err := nats.Connect(s.NATS.ClientURL(), nats.UserInfo(busauth.OperatorUser, s.opPW),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(err.Error(), "Permissions Violation") {
				select {
				case denied <- err.Error():
				default:
				}
			}
		}))
	require.NoError(s.t, err)
	s.t.Cleanup(nc.Close)
	return nc, denied
}

// agentConn connects with node's agent token (a compromised node), as a raw client.
func (s *authScene) agentConn(node string) *nats.Conn {
	s.t.Helper()
	nc, err := nats.Connect(s.NATS.ClientURL(), nats.Token(s.token(s.agentPod(node))),
		nats.CustomInboxPrefix(nodedrain.AgentInboxPrefix(node)))
	require.NoError(s.t, err)
	s.t.Cleanup(nc.Close)
	return nc
}

// copyInto has the server copy the current value of subject from (in stream) to subject to: a
// direct get whose reply subject is to. With payloadOnly the server is asked for no headers
// (no_hdr): the copy is the payload alone.
func copyInto(t *testing.T, nc *nats.Conn, stream, from, to string, payloadOnly ...bool) {
	t.Helper()
	var body []byte
	if len(payloadOnly) > 0 && payloadOnly[0] {
		body = []byte(`{"no_hdr":true}`)
	}
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET."+stream+"."+from, to, body))
	require.NoError(t, nc.Flush())
}

func refusedSeries(reason string) string {
	return `edgedrain_agent_refused_statuses_total{reason="` + reason + `"}`
}

// waitRefused waits until a has refused more statuses for reason than before.
func waitRefused(a *agentProc, reason string, before float64) {
	a.s.t.Helper()
	require.Eventually(a.s.t, func() bool { return a.metric(refusedSeries(reason)) > before }, 10*time.Second, 20*time.Millisecond,
		"the agent did not refuse the forged status (%s)", reason)
}

// waitRepaired waits until node's status key holds, again, a status the coordinator wrote and
// signed with want and request id.
func (s *authScene) waitRepaired(node string, want nodedrain.DrainStatus, id string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		st, _, origin, err := s.Statuses.GetChecked(context.Background(), node)
		return err == nil && origin != pubsub.Copied && testenv.TrustedKeys().Verify(node, st) == nil &&
			st.Status == want && st.RequestID == id
	}, 15*time.Second, 50*time.Millisecond, "the coordinator did not put its own %s back under %s", want, node)
}

// TestForgedStatusesRunNothing: node A defers its reboot behind a drain a PodDisruptionBudget
// holds. With the operator's credentials, with node B's agent token and with the coordinator's
// own bus account (a stolen password; or an older coordinator that does not sign), statuses
// saying COMPLETE for A's very request are put under A's key: a direct-get copy of a spare
// request key, a consumer delivering into the key, B's own status copied over, a status signed
// by a key no longer trusted, one whose signature was changed, and one not signed at all. For
// each, the agent refuses and counts it, runs nothing, and the coordinator puts its own status
// back (counted); once the budget is lifted, the reboot runs exactly once.
func TestForgedStatusesRunNothing(t *testing.T) {
	t.Parallel()
	s := newAuthScene(t, "forge", 3)
	target := s.deploy("db", 3, 1)
	unblock := s.blockEvictions("db", 3)
	var metrics *coordinator.Metrics
	s.runCoordinator(func(c *coordinator.Config) {
		c.Limits.DrainAttemptTimeout = 5 * time.Minute
		metrics = c.Metrics
	})
	other := s.nodes[slices.IndexFunc(s.nodes, func(n string) bool { return n != target })]
	a := s.newAgent(target, "--nats-token-file", testenv.WriteToken(t, t.TempDir(), s.token(s.agentPod(target))))
	a.start()
	req := s.deferReboot(a)
	s.waitBlocked(target, req.RequestID)
	ctx := context.Background()
	op, denied := s.operator()
	opJS, err := jetstream.New(op)
	require.NoError(t, err)
	put := func(subject string, data []byte) { // stored before the next step aims a copy at it
		t.Helper()
		_, err := opJS.Publish(ctx, subject, data)
		require.NoError(t, err)
	}
	b := s.agentConn(other)
	bJS, err := jetstream.New(b)
	require.NoError(t, err)
	complete := nodedrain.NodeDrainStatus{Node: target, RequestID: req.RequestID, Status: nodedrain.StatusComplete,
		RequestedBy: nodedrain.RequesterDeviceOp, UpdatedAt: time.Now()}
	raw := func(st nodedrain.NodeDrainStatus) []byte {
		data, err := json.Marshal(st)
		require.NoError(t, err)
		return data
	}
	rotatedOut := nodedrain.NewSigner(ed25519.NewKeyFromSeed([]byte(strings.Repeat("r", ed25519.SeedSize))))

	for _, attack := range []struct {
		name, agentReason, coordReason string
		do                             func() (landed bool)
	}{{
		// The operator reads through consumers only: its direct gets are refused, so it cannot
		// aim one at a status key (it could before).
		name: "operator aims a direct get at A's status key", do: func() bool {
			put(reqKey+"spare-1", raw(complete))
			copyInto(t, op, reqStream, reqKey+"spare-1", stKey+target)
			select {
			case msg := <-denied:
				require.Contains(t, msg, "$JS.API.DIRECT.GET")
			case <-time.After(5 * time.Second):
				t.Fatal("the operator's direct get was not refused")
			}
			return false
		},
	}, {
		name: "node B's agent copies a status-shaped payload from its own request key, payload alone", agentReason: "unsigned", coordReason: "copied",
		do: func() bool {
			_, err := bJS.Publish(ctx, reqKey+other, raw(complete))
			require.NoError(t, err)
			copyInto(t, b, reqStream, reqKey+other, stKey+target, true)
			return true
		},
	}, {
		// Push deliveries need interest in the deliver subject, and no identity but the
		// coordinator may subscribe to a status key: what the consumer delivered before it
		// was deleted (usually nothing) must be refused like any unsigned status.
		name: "operator's consumer delivers into the key", agentReason: "unsigned", coordReason: "unsigned",
		do: func() bool {
			_, before, err := s.Statuses.Get(ctx, target)
			require.NoError(t, err)
			put(reqKey+"spare-2", raw(complete))
			cfg, err := json.Marshal(map[string]any{"stream_name": reqStream, "config": map[string]any{
				"deliver_subject": stKey + target, "filter_subject": reqKey + "spare-2", "ack_policy": "none", "deliver_policy": "last"}})
			require.NoError(t, err)
			reply, err := op.Request("$JS.API.CONSUMER.CREATE."+reqStream+".redirect."+reqKey+"spare-2", cfg, 5*time.Second)
			require.NoError(t, err)
			require.NotContains(t, string(reply.Data), `"error"`, "the consumer was refused: this attack no longer works as it did")
			reply, err = op.Request("$JS.API.CONSUMER.DELETE."+reqStream+".redirect", nil, 5*time.Second)
			require.NoError(t, err)
			require.NotContains(t, string(reply.Data), `"error"`)
			h, err := s.Statuses.History(ctx, target)
			require.NoError(t, err)
			return slices.ContainsFunc(h, func(r pubsub.Revision[nodedrain.NodeDrainStatus]) bool {
				return r.Rev > before && r.Err == nil && r.Value.Signature == "" && r.Value.Status == nodedrain.StatusComplete
			})
		},
	}, {
		name: "node B's agent copies its own signed status over", agentReason: "wrong-key", coordReason: "copied",
		do: func() bool {
			forB := complete
			forB.Node = other // what B's key may hold: the coordinator's signed status for B
			_, err := s.Statuses.Publish(ctx, other, testenv.SignStatus(forB))
			require.NoError(t, err)
			copyInto(t, b, stStream, stKey+other, stKey+target)
			return true
		},
	}, {
		name: "a status signed by a rotated-out key", agentReason: "untrusted-key", coordReason: "untrusted-key",
		do: func() bool {
			_, err := s.Statuses.Publish(ctx, target, rotatedOut.Sign(complete))
			require.NoError(t, err)
			return true
		},
	}, {
		name: "a signature changed after signing", agentReason: "bad-signature", coordReason: "bad-signature",
		do: func() bool {
			st := testenv.SignStatus(nodedrain.NodeDrainStatus{Node: target, RequestID: req.RequestID, Status: nodedrain.StatusCordoned})
			st.Status = nodedrain.StatusComplete
			_, err := s.Statuses.Publish(ctx, target, st)
			require.NoError(t, err)
			return true
		},
	}, {
		name: "an unsigned status (an older coordinator)", agentReason: "unsigned", coordReason: "unsigned",
		do: func() bool {
			_, err := s.Statuses.Publish(ctx, target, complete)
			require.NoError(t, err)
			return true
		},
	}} {
		agentBefore := a.metric(refusedSeries(attack.agentReason))
		coordBefore := testutil.ToFloat64(metrics.ForgedStatuses.WithLabelValues(attack.coordReason))
		if !attack.do() {
			t.Logf("%s: did not land", attack.name)
			s.requireStillDeferred(a, req.RequestID)
			continue
		}
		waitRefused(a, attack.agentReason, agentBefore)
		require.Eventually(t, func() bool {
			return testutil.ToFloat64(metrics.ForgedStatuses.WithLabelValues(attack.coordReason)) > coordBefore
		}, 10*time.Second, 20*time.Millisecond, "%s: the coordinator did not count the forgery as %s", attack.name, attack.coordReason)
		s.waitRepaired(target, nodedrain.StatusCordoned, req.RequestID)
		s.requireStillDeferred(a, req.RequestID)
		t.Logf("%s: refused by the agent (%s), repaired by the coordinator (%s)", attack.name, attack.agentReason, attack.coordReason)
	}
	s.finishOnce(a, req.RequestID, unblock)
}

// TestReplayedCompleteAfterAWithdrawal: node A's drain is held by a budget; A's agent stops.
// The drain completes meanwhile, and node B's agent (a compromised node) keeps A's COMPLETE as
// it crossed the network, under its own request key. The operator withdraws A's request (the
// coordinator answers NOTREQUESTED for it). With the coordinator down, B has the server copy the
// kept COMPLETE under A's status key, and A's agent starts afresh (remembering nothing it took
// before): it reads a validly signed COMPLETE of its own request, but the bus shows it is no
// coordinator's write, so it refuses it and runs nothing. (It asks again for its reboot, as an
// agent that missed a withdrawal does.) The coordinator, back, counts the copy as it resumes and
// puts its own status back; the reboot then either never runs (the withdrawal stands) or runs
// once, after a new drain's COMPLETE. Copied with the server's headers (they come back twice) or
// as the payload alone (no_hdr: no coordinator mark).
func TestReplayedCompleteAfterAWithdrawal(t *testing.T) {
	t.Parallel()
	for i, mode := range []string{"with-headers", "payload-only"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			replayAfterWithdrawal(t, fmt.Sprintf("replay%d", i), mode)
		})
	}
}

func replayAfterWithdrawal(t *testing.T, group, mode string) {
	s := newAuthScene(t, group, 3)
	target := s.deploy("web", 2, 1)
	other := s.nodes[slices.IndexFunc(s.nodes, func(n string) bool { return n != target })]
	unblock := s.blockEvictions("web", 2)
	stop := s.runCoordinator(func(c *coordinator.Config) { c.Limits.DrainAttemptTimeout = 5 * time.Minute })
	a := s.newAgent(target, "--nats-token-file", testenv.WriteToken(t, t.TempDir(), s.token(s.agentPod(target))))
	a.start()
	req := s.deferReboot(a)
	s.waitBlocked(target, req.RequestID)
	a.stop()
	unblock()
	replayed := s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)

	ctx := context.Background()
	op, _ := s.operator()
	// A's COMPLETE as it crossed the network (no TLS), published by node B's agent as its own
	// request value, to be copied from there later.
	sniffed, err := json.Marshal(replayed)
	require.NoError(t, err)
	b := s.agentConn(other)
	require.NoError(t, b.Publish(reqKey+other, sniffed))
	require.NoError(t, b.Flush())
	replay := func() { copyInto(t, b, reqStream, reqKey+other, stKey+target, mode == "payload-only") }
	require.Eventually(t, func() bool {
		h, err := s.Requests.History(ctx, other)
		return err == nil && len(h) > 0
	}, 5*time.Second, 20*time.Millisecond, "the COMPLETE was not kept under B's request key")
	js, err := jetstream.New(op)
	require.NoError(t, err)
	requests, err := js.KeyValue(ctx, nodedrain.RequestsBucket)
	require.NoError(t, err)
	require.NoError(t, requests.Delete(ctx, target), "the operator withdraws A's request")
	s.waitStatus(target, nodedrain.StatusNotRequested, req.RequestID, drainTimeout)
	stop()

	replay()
	require.Eventually(t, func() bool {
		st, _, origin, err := s.Statuses.GetChecked(ctx, target)
		return err == nil && origin == pubsub.Copied && st.Status == nodedrain.StatusComplete && st.RequestID == req.RequestID
	}, 5*time.Second, 20*time.Millisecond, "the replayed COMPLETE did not land under A's key, or was not told from a coordinator's write")

	a.startUnanswered()
	waitRefused(a, "copied", 0)
	s.requireStillDeferred(a, req.RequestID)

	var metrics *coordinator.Metrics
	s.runCoordinator(func(c *coordinator.Config) { metrics = c.Metrics })
	// The coordinator resumes from its own NOTREQUESTED (the copy is no status of its), while the
	// agent, which missed the withdrawal, has asked again for the same request: whichever lands
	// first decides whether the withdrawal stands (the agent drops its reboot) or the request is
	// drained anew (the reboot runs after that drain's COMPLETE). Never on the replay.
	require.Eventually(t, func() bool {
		st, err := a.statusErr()
		return err == nil && (st.State.Phase == agent.PhaseIdle || st.State.Phase == agent.PhaseWaitingBoot)
	}, drainTimeout, 20*time.Millisecond, "the agent neither dropped its reboot nor ran it")
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.ForgedStatuses.WithLabelValues("copied")), "the resuming coordinator did not count the copy")
	runs := a.runs()
	if len(runs) == 0 {
		t.Log("the withdrawal stood: the agent dropped its reboot")
		return
	}
	require.Len(t, runs, 1, "the reboot ran more than once")
	var fresh *nodedrain.NodeDrainStatus
	for _, st := range s.Seen(target) {
		if st.Status == nodedrain.StatusComplete && st.RequestID == req.RequestID && st.Newer(replayed) {
			fresh = &st
		}
	}
	require.NotNil(t, fresh, "the reboot ran, but the coordinator published no COMPLETE after the replay")
	require.False(t, runs[0].at.Before(fresh.UpdatedAt), "the reboot ran before the real drain's COMPLETE: on the replayed one")
	t.Log("the request was drained anew: the reboot ran after that drain's COMPLETE")
}
