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
// NATS cluster that lost its quorum answers (the consumer is never created).
type refuseRequestWatch struct{ jetstream.JetStream }

func (r refuseRequestWatch) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	return wrap(r.JetStream.KeyValue(ctx, bucket))
}

func (r refuseRequestWatch) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return wrap(r.JetStream.CreateKeyValue(ctx, cfg))
}

func (r refuseRequestWatch) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return wrap(r.JetStream.UpdateKeyValue(ctx, cfg))
}

func wrap(kv jetstream.KeyValue, err error) (jetstream.KeyValue, error) {
	if err != nil || kv.Bucket() != nodedrain.RequestsBucket {
		return kv, err
	}
	return noWatch{kv}, nil
}

type noWatch struct{ jetstream.KeyValue }

func (noWatch) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, errWatchRefused
}

func (noWatch) WatchFiltered(context.Context, []string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, errWatchRefused
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
