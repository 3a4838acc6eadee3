package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// CheckTermKey fails when the active coordinator's term record names a signing key that trusted
// does not hold: replicas that sign with keys the others (and so, likely, the agents) do not
// trust must be told at start, not when agents refuse their statuses. A bus without the bucket
// or the record yet, or a record from a coordinator that did not sign, passes.
//
// A value under the term key that no coordinator wrote (a server copy a client aimed there, see
// pubsub.Origin; or one that does not decode) is ignored with a warning on log: it would
// otherwise stop every replica from starting. Term records carry the coordinator's writer mark.
func CheckTermKey(ctx context.Context, js jetstream.JetStream, trusted nodedrain.KeySet, log logrus.FieldLogger) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	terms, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true,
		WriterMark: nodedrain.StatusWriterMark}, nodedrain.TermCodec{})
	if errors.Is(err, pubsub.ErrBucketMissing) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the active coordinator's term record: %w", err)
	}
	t, rev, origin, err := terms.GetChecked(ctx, nodedrain.TermKey)
	switch {
	case errors.Is(err, pubsub.ErrNotFound) && origin != pubsub.Copied:
		return nil
	case origin == pubsub.Copied, errors.Is(err, pubsub.ErrDecode):
		if log != nil {
			log.WithFields(logrus.Fields{"key": nodedrain.StatusBucket + "/" + nodedrain.TermKey, "revision": rev, "copied": origin == pubsub.Copied}).
				WithError(err).Warn("ignoring a term record no coordinator wrote (a server copy, or undecodable): the signing keys are not compared")
		}
		return nil
	case err != nil:
		return fmt.Errorf("read the active coordinator's term record: %w", err)
	case t.KeyID != "" && !trusted.Has(t.KeyID):
		return fmt.Errorf("coordinator %s (active since %s) signs statuses with key %s, which this replica does not trust (it trusts %v): "+
			"every replica must use the same Secret and ConfigMap (docs/status-signing.md)", t.Coordinator, t.Since.Format(time.RFC3339), t.KeyID, trusted.IDs())
	}
	return nil
}
