package pubsub

import (
	"context"
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
