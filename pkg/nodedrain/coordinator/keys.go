package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// CheckTermKey fails when the active coordinator's term record names a signing key that trusted
// does not hold: replicas that sign with keys the others (and so, likely, the agents) do not
// trust must be told at start, not when agents refuse their statuses. A bus without the bucket
// or the record yet, or a record from a coordinator that did not sign, passes.
func CheckTermKey(ctx context.Context, js jetstream.JetStream, trusted nodedrain.KeySet) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	terms, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true}, nodedrain.TermCodec{})
	if errors.Is(err, pubsub.ErrBucketMissing) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the active coordinator's term record: %w", err)
	}
	t, _, err := terms.Get(ctx, nodedrain.TermKey)
	switch {
	case errors.Is(err, pubsub.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read the active coordinator's term record: %w", err)
	case t.KeyID != "" && !trusted.Has(t.KeyID):
		return fmt.Errorf("coordinator %s (active since %s) signs statuses with key %s, which this replica does not trust (it trusts %v): "+
			"every replica must use the same Secret and ConfigMap (docs/status-signing.md)", t.Coordinator, t.Since.Format(time.RFC3339), t.KeyID, trusted.IDs())
	}
	return nil
}
