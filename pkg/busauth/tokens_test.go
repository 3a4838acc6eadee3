package busauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Every token but a live agent pod's own, of edgedrain's audience, is refused: by the
// verifier with its reason, and by the bus as an authorization violation.
func TestTokensRefused(t *testing.T) {
	w := newWorld(t)
	w.startEmbedded(t)
	c, ctx := w.c, context.Background()
	pod := w.pods[0]
	valid := c.PodToken(t, pod, testenv.AgentAudience, 600)
	id, err := w.verifier.Verify(ctx, valid)
	require.NoError(t, err)
	assert.Equal(t, busauth.Identity{Role: busauth.RoleAgent, Node: w.nodes[0], Subject: w.ns + "/" + pod.Name, Expires: id.Expires}, id)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute), id.Expires, time.Minute)

	otherNS := c.Namespace(t)
	inOtherNS := c.AgentPod(t, otherNS, agentSA, "agent-elsewhere", w.nodes[0])
	otherSA := c.AgentPod(t, w.ns, "not-the-agent", "impostor", w.nodes[0])
	doomed := c.AgentPod(t, w.ns, agentSA, "doomed", w.nodes[1])
	doomedToken := c.PodToken(t, doomed, testenv.AgentAudience, 600)
	zero := int64(0)
	require.NoError(t, c.Client.CoreV1().Pods(w.ns).Delete(ctx, doomed.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	require.Eventually(t, func() bool {
		_, err := c.Client.CoreV1().Pods(w.ns).Get(ctx, doomed.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 50*time.Millisecond, "the pod was not deleted")

	cases := map[string]string{
		"another audience":          c.PodToken(t, pod, "not-edgedrain", 600),
		"the API server's audience": c.PodToken(t, pod, "https://kubernetes.default.svc.cluster.local", 600),
		"expired":                   c.Resign(t, valid, func(cl map[string]any) { back(cl, 20*time.Minute, 10*time.Minute) }),
		"a deleted pod's":           doomedToken,
		"another namespace's":       c.PodToken(t, inOtherNS, testenv.AgentAudience, 600),
		"another ServiceAccount's":  c.PodToken(t, otherSA, testenv.AgentAudience, 600),
		"a ServiceAccount secret's": legacyToken(t, c, w.ns, agentSA),
		"not bound to a pod":        unbound(t, c, w.ns, agentSA),
		"tampered with":             tamper(valid),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := w.verifier.Verify(ctx, tok)
			require.ErrorIs(t, err, busauth.ErrRefused)
			t.Logf("refused: %v", err)
			_, err = w.connect(t, nats.Token(tok), nats.CustomInboxPrefix(nodedrain.AgentInboxPrefix(w.nodes[0])))
			require.ErrorIs(t, err, nats.ErrAuthorization)
		})
	}
}

// back moves a token's validity into the past: issued `issued` ago, expired `expired` ago.
func back(claims map[string]any, issued, expired time.Duration) {
	now := time.Now()
	claims["iat"], claims["nbf"] = now.Add(-issued).Unix(), now.Add(-issued).Unix()
	claims["exp"] = now.Add(-expired).Unix()
}

// tamper changes one bit of a valid token outside its signature.
func tamper(token string) string {
	b := []byte(token)
	for i := len(b) / 3; i < 2*len(b)/3; i++ {
		if b[i] != '.' {
			b[i] ^= 1
			break
		}
	}
	return string(b)
}

// legacyToken is the token the controller-manager puts in a ServiceAccount token Secret.
func legacyToken(t *testing.T, c *testenv.Cluster, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	_, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-" + sa, Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var tok string
	require.Eventually(t, func() bool {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "legacy-"+sa, metav1.GetOptions{})
		if err != nil {
			return false
		}
		tok = string(s.Data[corev1.ServiceAccountTokenKey])
		return tok != ""
	}, 30*time.Second, 100*time.Millisecond, "the token controller did not fill the Secret")
	return tok
}

// unbound is a token of the agents' ServiceAccount and audience bound to no pod.
func unbound(t *testing.T, c *testenv.Cluster, ns, sa string) string {
	t.Helper()
	tok, err := testenv.RequestToken(context.Background(), c.Client, ns, sa, testenv.AgentAudience, 600, nil)
	require.NoError(t, err)
	return tok
}

func TestVerifierConfig(t *testing.T) {
	_, err := busauth.NewTokenVerifier(busauth.TokenConfig{})
	require.Error(t, err)
	require.False(t, errors.Is(err, busauth.ErrRefused))
}
