package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// natsReconnectWait is the reconnect pause of test connections: short, so a
// restarted server is found again quickly.
const natsReconnectWait = 50 * time.Millisecond

// StartNATS starts an embedded NATS server with JetStream on a free loopback
// port and a store in a temporary directory, and shuts it down when the test
// ends.
func StartNATS(t testing.TB) *pubsub.Embedded {
	t.Helper()
	return startNATS(t, pubsub.EmbeddedConfig{
		Host:     "127.0.0.1",
		StoreDir: t.TempDir(),
	})
}

// RestartNATS shuts e down and starts a new server on the same address and
// store directory, so clients reconnect and find every bucket as it was.
func RestartNATS(t testing.TB, e *pubsub.Embedded) *pubsub.Embedded {
	t.Helper()
	cfg := e.Config()
	e.Shutdown()
	return startNATS(t, cfg)
}

func startNATS(t testing.TB, cfg pubsub.EmbeddedConfig) *pubsub.Embedded {
	t.Helper()
	e, err := pubsub.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// ConnectNATS connects to url with pubsub.Connect (reconnecting every 50 ms)
// and returns the connection and a JetStream context; the connection is
// closed when the test ends.
func ConnectNATS(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectNATSWith(t, pubsub.ConnectOptions{
		URLs:          []string{url},
		Name:          t.Name(),
		ReconnectWait: natsReconnectWait,
	})
}

// ConnectNATSWith is ConnectNATS with explicit options.
func ConnectNATSWith(t testing.TB, opts pubsub.ConnectOptions) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := pubsub.Connect(opts)
	if err != nil {
		t.Fatalf("connect NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("JetStream context: %v", err)
	}
	return nc, js
}
