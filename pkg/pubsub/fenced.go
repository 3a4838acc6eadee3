package pubsub

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Fenced writes: a writer that must never land a write after someone else took over (the active
// coordinator) writes only while the bucket's stream still ends at its own last write
// (PublishIfLast, UnpublishIfLast); refused, it learns what the stream ends at now (LastRevision)
// to tell a takeover from a write it may step over.

// UnpublishIfLast writes a delete marker for key only if nothing at all was written to the
// bucket since revision last, and returns the marker's revision. It fails with an error wrapping
// ErrConflict otherwise. The marker carries the bucket's writer mark, like its puts.
func (b *Bucket[T]) UnpublishIfLast(ctx context.Context, key string, last uint64) (uint64, error) {
	if err := ValidKey(key); err != nil {
		return 0, fmt.Errorf("unpublish %s: %w", b.name, err)
	}
	msg := b.newMsg(key, nil)
	msg.Header.Set("KV-Operation", "DEL")
	ack, err := b.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(last))
	if err != nil {
		if wrongLast(err) {
			err = fmt.Errorf("%w: the bucket was written after revision %d: %w", ErrConflict, last, err)
		}
		return 0, fmt.Errorf("unpublish %s/%s: %w", b.name, key, err)
	}
	return ack.Sequence, nil
}

// LastRevision returns the revision of the last write to the bucket, any key (its stream's last
// sequence), as its stream's leader knows it.
func (b *Bucket[T]) LastRevision(ctx context.Context) (uint64, error) {
	st, err := b.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the last revision of %s: %w", b.name, err)
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || s.StreamInfo() == nil {
		return 0, fmt.Errorf("read the last revision of %s: no stream information", b.name)
	}
	return s.StreamInfo().State.LastSeq, nil
}

// RefusedAt returns the revision the bucket's stream ended at, as its leader saw it, when it
// refused a write conditional on the last revision (PublishIfLast, UnpublishIfLast): the
// sequence its refusal names ("wrong last sequence: N"). ok is false for any other error, or a
// refusal that names none. The leader counts writes it has proposed to its replicas and not yet
// stored, so N may be ahead of what any replica answers yet: a bound to wait for, not a
// revision to read at.
func RefusedAt(err error) (seq uint64, ok bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, false
	}
	if _, err := fmt.Sscanf(apiErr.Description, "wrong last sequence: %d", &seq); err != nil {
		return 0, false
	}
	return seq, true
}
