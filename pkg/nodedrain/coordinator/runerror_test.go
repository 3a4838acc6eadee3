package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// errWatchRefused is what the request bucket's watch fails with below.
var errWatchRefused = errors.New("watch refused (test)")

// refuseRequestWatch is a real JetStream context whose request bucket cannot be watched, as a
// NATS cluster that lost its quorum answers (the watch's consumer is never created).
type refuseRequestWatch struct{ jetstream.JetStream }

func (r refuseRequestWatch) CreatePushConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.PushConsumer, error) {
	if stream == "KV_"+nodedrain.RequestsBucket {
		return nil, errWatchRefused
	}
	return r.JetStream.CreatePushConsumer(ctx, stream, cfg)
}

// A Run that fails after its node informer started returns its error, so that KeepRunning
// starts it again. It used to wait for ever for the informer, which stops only when the run's
// context ends, while the replica kept the Lease: found on a NATS cluster that lost its quorum
// (the request watch timed out) as a coordinator that never drained again.
func TestRunReturnsItsErrorAfterTheInformerStarted(t *testing.T) {
	h := newHarness(t, "runerror", 1)
	cfg := h.config(h.c.Client)
	cfg.JetStream = refuseRequestWatch{h.js}
	e, err := NewEngine(cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, errWatchRefused)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its request watch failed")
	}
}
