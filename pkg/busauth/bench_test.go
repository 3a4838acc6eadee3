package busauth_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// BenchmarkAgentConnect measures an agent's connection to the embedded bus (TCP, CONNECT, the
// server's answer) with its token's review cached (a reconnect) and not (a new token: one
// TokenReview round trip to the API server).
func BenchmarkAgentConnect(b *testing.B) {
	c := testenv.RequireCluster(b, cluster)
	ns, nodes := c.Namespace(b), c.AddNodes(b, "busauth-bench", 1)
	pod := c.AgentPod(b, ns, agentSA, "agent-0", nodes[0])
	verifier, err := busauth.NewTokenVerifier(busauth.TokenConfig{Client: c.Client, Namespace: ns, ServiceAccount: agentSA})
	require.NoError(b, err)
	auth, err := busauth.New(busauth.Config{Tokens: verifier})
	require.NoError(b, err)
	e, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{StoreDir: b.TempDir(), Authentication: auth})
	require.NoError(b, err)
	b.Cleanup(e.Shutdown)
	connect := func(token string) {
		nc, err := nats.Connect(e.ClientURL(), nats.Token(token), nats.CustomInboxPrefix(nodedrain.AgentInboxPrefix(nodes[0])))
		require.NoError(b, err)
		nc.Close()
	}
	b.Run("review-cached", func(b *testing.B) {
		token := c.PodToken(b, pod, testenv.AgentAudience, 600)
		connect(token)
		for b.Loop() {
			connect(token)
		}
	})
	b.Run("review-uncached", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			token := c.PodToken(b, pod, testenv.AgentAudience, 600)
			b.StartTimer()
			connect(token)
		}
	})
}
