package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
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
		return fmt.Errorf("%w: coordinator %s (active since %s) signs statuses with key %s, which this replica does not trust (it trusts %v): "+
			"every replica must use the same Secret and ConfigMap (docs/status-signing.md)", ErrUntrustedTermKey, t.Coordinator, t.Since.Format(time.RFC3339), t.KeyID, trusted.IDs())
	}
	return nil
}

// lastingBusError reports an error waiting does not mend: JetStream off for the account, or the
// coordinator's identity not allowed what it asks.
func lastingBusError(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization)
}

// ErrUntrustedTermKey is CheckTermKey's verdict that the active coordinator signs with a key this
// replica does not trust; its other errors are the bus not answering.
var ErrUntrustedTermKey = errors.New("the active coordinator's signing key is not trusted here")

// WaitTermKey is CheckTermKey, tried again while the bus does not answer (a NATS server
// restarting, a quorum being elected): a replica started then waits, saying why, instead of
// exiting into a crash loop. It fails on ErrUntrustedTermKey, or when ctx ends.
func WaitTermKey(ctx context.Context, js jetstream.JetStream, trusted func() nodedrain.KeySet, log logrus.FieldLogger) error {
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		err := CheckTermKey(ctx, js, trusted(), log)
		if err == nil || errors.Is(err, ErrUntrustedTermKey) || lastingBusError(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if log != nil {
			log.WithError(err).Warnf("cannot read the active coordinator's term record yet (the bus does not answer); trying again in %s", wait)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}
