package pubsub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Defaults and limits for BucketConfig.
const (
	// DefaultHistory is the number of values kept per key in a new bucket.
	DefaultHistory = 1
	// DefaultReplicas is the replica count of a new bucket; production NATS
	// clusters should ask for 3.
	DefaultReplicas = 1
	// DefaultMaxValueSize is the largest payload a new bucket accepts.
	DefaultMaxValueSize int32 = 64 << 10
	// MaxHistory is the most values per key JetStream keeps.
	MaxHistory = jetstream.KeyValueMaxHistory
	// MaxReplicas is the largest replica count JetStream supports.
	MaxReplicas = 5
)

var bucketNameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// BucketConfig describes a key-value bucket. For History, Replicas,
// MaxValueSize and Description, zero means the default when the bucket is
// created and leaves an existing bucket's setting as it is; a non-zero value
// that differs from the existing bucket is applied with a config update.
type BucketConfig struct {
	// Name is the bucket name: letters, digits, "-" and "_"; required.
	Name string
	// Description is stored with the bucket for operators.
	Description string
	// History is the number of values kept per key, 1 to MaxHistory; zero
	// means DefaultHistory on create. With 1, a watcher that falls behind
	// sees only the latest value of a key changed several times meanwhile;
	// more history lets it see each change.
	History int
	// Replicas is the number of servers holding the bucket, 1 to
	// MaxReplicas; zero means DefaultReplicas on create. Use 3 on a NATS
	// cluster.
	Replicas int
	// Storage is file (the zero value) or memory storage. It cannot change
	// after creation: opening an existing bucket with another storage type
	// fails with ErrIncompatibleBucket.
	Storage jetstream.StorageType
	// MaxValueSize is the largest encoded value in bytes; zero means
	// DefaultMaxValueSize on create, negative is invalid.
	MaxValueSize int32
	// Logger receives watcher and decode problems; nil discards them.
	Logger logrus.FieldLogger
	// DecodeErrors, if set, is incremented once per payload that fails to
	// decode (in Get and in watchers).
	DecodeErrors prometheus.Counter
	// NoRollup makes the bucket's stream refuse messages with a Nats-Rollup
	// header (KV purges): a client allowed to write one key could otherwise
	// erase every key with "Nats-Rollup: all". Set on create and on open.
	NoRollup bool
	// WriterMark names a header every value this Bucket puts carries (its value "1"), and that
	// Origin and GetChecked require of every value (not of deletes): a value without it is not
	// its writer's. A client that may read a key can have the server copy a stored message's
	// payload alone (a direct get with no_hdr) under another key; such a copy carries no
	// header at all. The bucket's writer and its readers must agree on it; empty: none.
	WriterMark string
	// OpenOnly opens an existing bucket and never creates or changes it: for
	// clients that do not administer the bus (agents, people's tools). A
	// missing bucket is ErrBucketMissing; the settings above are ignored.
	OpenOnly bool
}

// Validate reports the first problem with c, wrapping ErrInvalidConfig.
func (c BucketConfig) Validate() error {
	switch {
	case !bucketNameRe.MatchString(c.Name):
		return fmt.Errorf("bucket %q: name must be non-empty letters, digits, '-' or '_': %w", c.Name, ErrInvalidConfig)
	case c.History < 0 || c.History > MaxHistory:
		return fmt.Errorf("bucket %s: history %d not in 1..%d: %w", c.Name, c.History, MaxHistory, ErrInvalidConfig)
	case c.Replicas < 0 || c.Replicas > MaxReplicas:
		return fmt.Errorf("bucket %s: replicas %d not in 1..%d: %w", c.Name, c.Replicas, MaxReplicas, ErrInvalidConfig)
	case c.MaxValueSize < 0:
		return fmt.Errorf("bucket %s: negative max value size %d: %w", c.Name, c.MaxValueSize, ErrInvalidConfig)
	case c.Storage != jetstream.FileStorage && c.Storage != jetstream.MemoryStorage:
		return fmt.Errorf("bucket %s: unknown storage type %d: %w", c.Name, c.Storage, ErrInvalidConfig)
	}
	return nil
}

// Bucket is a typed view of a key-value bucket: one current value of type T
// per key. It is safe for concurrent use.
type Bucket[T any] struct {
	kv           jetstream.KeyValue
	js           jetstream.JetStream
	name         string
	codec        Codec[T]
	log          logrus.FieldLogger
	decodeMetric prometheus.Counter
	decodeCount  atomic.Uint64
	maxValueSize int32  // <= 0: no limit
	mark         string // BucketConfig.WriterMark
	replies      replyMux
}

// OpenBucket opens the bucket cfg.Name, creating it if it does not exist and
// updating settings that differ and may change. A nil codec means
// JSONCodec[T].
func OpenBucket[T any](ctx context.Context, js jetstream.JetStream, cfg BucketConfig, codec Codec[T]) (*Bucket[T], error) {
	if js == nil {
		return nil, fmt.Errorf("bucket %s: nil JetStream: %w", cfg.Name, ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if codec == nil {
		codec = JSONCodec[T]{}
	}
	var kv jetstream.KeyValue
	var err error
	if cfg.OpenOnly {
		kv, err = js.KeyValue(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			err = fmt.Errorf("bucket %s: %w", cfg.Name, ErrBucketMissing)
		} else if err != nil {
			err = fmt.Errorf("bucket %s: open: %w", cfg.Name, err)
		}
	} else if kv, err = openOrCreate(ctx, js, cfg); err == nil && cfg.NoRollup {
		err = denyRollup(ctx, js, cfg.Name)
	}
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: status: %w", cfg.Name, err)
	}
	return &Bucket[T]{
		kv:           kv,
		js:           js,
		name:         cfg.Name,
		codec:        codec,
		log:          loggerOrDiscard(cfg.Logger).WithField("bucket", cfg.Name),
		decodeMetric: cfg.DecodeErrors,
		maxValueSize: st.Config().MaxValueSize,
		mark:         cfg.WriterMark,
		replies:      replyMux{nc: js.Conn()},
	}, nil
}

func openOrCreate(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	// Two programs may race to create the bucket; the loser opens it.
	for attempt := 0; ; attempt++ {
		kv, err := js.KeyValue(ctx, cfg.Name)
		if err == nil {
			return reconcile(ctx, js, kv, cfg)
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("bucket %s: open: %w", cfg.Name, err)
		}
		kv, err = js.CreateKeyValue(ctx, createConfig(cfg))
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketExists) || attempt > 0 {
			return nil, fmt.Errorf("bucket %s: create: %w", cfg.Name, err)
		}
	}
}

// denyRollup turns rollups off on the bucket's stream (KV buckets are created with them on).
func denyRollup(ctx context.Context, js jetstream.JetStream, name string) error {
	s, err := js.Stream(ctx, "KV_"+name)
	if err != nil {
		return fmt.Errorf("bucket %s: stream: %w", name, err)
	}
	sc := s.CachedInfo().Config
	if !sc.AllowRollup {
		return nil
	}
	sc.AllowRollup = false
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("bucket %s: turning rollups off: %w", name, err)
	}
	return nil
}

func createConfig(cfg BucketConfig) jetstream.KeyValueConfig {
	kc := jetstream.KeyValueConfig{
		Bucket:       cfg.Name,
		Description:  cfg.Description,
		History:      uint8(DefaultHistory),
		Replicas:     DefaultReplicas,
		Storage:      cfg.Storage,
		MaxValueSize: DefaultMaxValueSize,
	}
	if cfg.History > 0 {
		kc.History = uint8(cfg.History)
	}
	if cfg.Replicas > 0 {
		kc.Replicas = cfg.Replicas
	}
	if cfg.MaxValueSize > 0 {
		kc.MaxValueSize = cfg.MaxValueSize
	}
	return kc
}

// reconcile applies the explicitly requested settings that differ from the
// existing bucket.
func reconcile(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, cfg BucketConfig) (jetstream.KeyValue, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: status: %w", cfg.Name, err)
	}
	have := st.Config()
	if have.Storage != cfg.Storage {
		return nil, fmt.Errorf("bucket %s: exists with %s storage, config asks for %s (storage cannot change): %w",
			cfg.Name, have.Storage, cfg.Storage, ErrIncompatibleBucket)
	}
	want := have
	if cfg.Description != "" {
		want.Description = cfg.Description
	}
	if cfg.History > 0 {
		want.History = uint8(cfg.History)
	}
	if cfg.Replicas > 0 {
		want.Replicas = cfg.Replicas
	}
	if cfg.MaxValueSize > 0 {
		want.MaxValueSize = cfg.MaxValueSize
	}
	if want.Description == have.Description && want.History == have.History &&
		want.Replicas == have.Replicas && want.MaxValueSize == have.MaxValueSize {
		return kv, nil
	}
	updated, err := js.UpdateKeyValue(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: update config: %w", cfg.Name, err)
	}
	return updated, nil
}

// Name returns the bucket name.
func (b *Bucket[T]) Name() string { return b.name }

// DecodeErrorCount returns how many payloads failed to decode through this
// Bucket (in Get and in its watchers) since it was opened.
func (b *Bucket[T]) DecodeErrorCount() uint64 { return b.decodeCount.Load() }

// Publish stores v as the current value of key and returns its revision.
func (b *Bucket[T]) Publish(ctx context.Context, key string, v T) (uint64, error) {
	data, err := b.encode(key, v)
	if err != nil {
		return 0, err
	}
	if b.mark == "" {
		rev, err := b.kv.Put(ctx, key, data)
		if err != nil {
			return 0, fmt.Errorf("publish %s/%s: %w", b.name, key, err)
		}
		return rev, nil
	}
	ack, err := b.js.PublishMsg(ctx, b.newMsg(key, data))
	if err != nil {
		return 0, fmt.Errorf("publish %s/%s: %w", b.name, key, err)
	}
	return ack.Sequence, nil
}

// newMsg is a put of data under key, with the bucket's writer mark.
func (b *Bucket[T]) newMsg(key string, data []byte) *nats.Msg {
	msg := nats.NewMsg("$KV." + b.name + "." + key)
	msg.Data = data
	if b.mark != "" {
		msg.Header.Set(b.mark, "1")
	}
	return msg
}

// PublishIfLast stores v as key's value only if nothing at all was written to the bucket since
// the write of revision last (the bucket's stream still ends at last), and returns the new
// revision. A write to any key meanwhile makes it fail with an error wrapping ErrConflict: a
// writer that fences itself this way learns that somebody else has written. It assumes the
// bucket's subjects are its own ($KV.<bucket>.<key>: no JetStream domain prefix, no mirror).
func (b *Bucket[T]) PublishIfLast(ctx context.Context, key string, v T, last uint64) (uint64, error) {
	data, err := b.encode(key, v)
	if err != nil {
		return 0, err
	}
	ack, err := b.js.PublishMsg(ctx, b.newMsg(key, data), jetstream.WithExpectLastSequence(last))
	if err != nil {
		if wrongLast(err) {
			err = fmt.Errorf("%w: the bucket was written after revision %d: %w", ErrConflict, last, err)
		}
		return 0, fmt.Errorf("publish %s/%s: %w", b.name, key, err)
	}
	return ack.Sequence, nil
}

// wrongLast reports whether err is JetStream refusing a write whose expected last sequence did not
// match (a conditional write that lost).
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// encode checks key and encodes v for it, within the bucket's value size limit.
func (b *Bucket[T]) encode(key string, v T) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return nil, fmt.Errorf("publish %s: %w", b.name, err)
	}
	data, err := b.codec.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("publish %s/%s: %w: %w", b.name, key, ErrEncode, err)
	}
	if b.maxValueSize > 0 && len(data) > int(b.maxValueSize) {
		return nil, fmt.Errorf("publish %s/%s: %d bytes, limit %d: %w", b.name, key, len(data), b.maxValueSize, ErrValueTooLarge)
	}
	return data, nil
}

// Unpublish removes key's value; watchers that were given a value for key
// receive an EventDelete. Unpublishing a missing key is not an error (it
// writes a delete marker all the same, without asking a possibly stale
// replica whether the key exists).
func (b *Bucket[T]) Unpublish(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return fmt.Errorf("unpublish %s: %w", b.name, err)
	}
	if err := b.kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("unpublish %s/%s: %w", b.name, key, err)
	}
	return nil
}

// UnpublishRevision removes key's value only if its current revision is rev: a value written
// meanwhile by someone else stays. It fails with an error wrapping ErrConflict otherwise.
func (b *Bucket[T]) UnpublishRevision(ctx context.Context, key string, rev uint64) error {
	if err := ValidKey(key); err != nil {
		return fmt.Errorf("unpublish %s: %w", b.name, err)
	}
	if err := b.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			err = fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return fmt.Errorf("unpublish %s/%s at revision %d: %w", b.name, key, rev, err)
	}
	return nil
}

// Get returns key's current value and revision. It returns an error wrapping
// ErrNotFound when the key has no value and one wrapping ErrDecode (counted)
// when the stored payload does not decode. It reads as GetChecked does (one
// direct get, its reply read on a subscription of its own), without telling
// who wrote the value: nats.go's get takes a stored message with no payload
// and a Status header for the server's status reply ("404": not found, "503":
// no responders), and any client may put such a header on its own write.
func (b *Bucket[T]) Get(ctx context.Context, key string) (T, uint64, error) {
	v, rev, _, err := b.GetChecked(ctx, key)
	if errors.Is(err, ErrNotFound) {
		rev = 0
	}
	return v, rev, err
}

// Keys returns the keys that currently have a value, sorted; an empty bucket
// gives an empty slice and no error. It reads them through a consumer (see consume), headers
// only.
func (b *Bucket[T]) Keys(ctx context.Context) ([]string, error) {
	keys := []string{}
	err := b.readInitial(ctx, consumeOpts{headersOnly: true}, func(e *entry) {
		if e.op == jetstream.KeyValuePut {
			keys = append(keys, e.key)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("keys %s: %w", b.name, err)
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// decode decodes one payload, counting and describing failures.
func (b *Bucket[T]) decode(key string, rev uint64, data []byte) (T, error) {
	v, err := b.codec.Decode(data)
	if err == nil {
		return v, nil
	}
	b.decodeCount.Add(1)
	if b.decodeMetric != nil {
		b.decodeMetric.Inc()
	}
	var zero T
	return zero, fmt.Errorf("%s/%s revision %d: %w: %w", b.name, key, rev, ErrDecode, err)
}

// ReadAll reads every key's current value through one consumer (the snapshot of a watch, see
// consume), not with direct gets: a client that may create consumers but not send direct gets
// (whose replies it could aim at another key) still reads the bucket. A value that does not
// decode is in errs (counted), not in values.
func (b *Bucket[T]) ReadAll(ctx context.Context) (values map[string]T, errs map[string]error, err error) {
	values, errs = map[string]T{}, map[string]error{}
	err = b.readInitial(ctx, consumeOpts{}, func(e *entry) {
		delete(values, e.key)
		delete(errs, e.key)
		if e.op != jetstream.KeyValuePut {
			return
		}
		if v, err := b.decode(e.key, e.rev, e.value); err != nil {
			errs[e.key] = err
		} else {
			values[e.key] = v
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", b.name, err)
	}
	return values, errs, nil
}
