package pubsub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestBucketPublishGetUnpublish(t *testing.T) {
	_, _, b := setup(t, "crud", pubsub.BucketConfig{})
	ctx := testCtx(t)

	keys, err := b.Keys(ctx)
	require.NoError(t, err)
	require.Empty(t, keys)
	require.NotNil(t, keys)

	for _, key := range []string{"edge-1.shop.example.com", "node-2", "10.0.0.7"} {
		t.Run(key, func(t *testing.T) {
			rev := publish(t, b, key, 1)
			require.NotZero(t, rev)
			rev2 := publish(t, b, key, 2)
			require.Greater(t, rev2, rev)

			v, gotRev, err := b.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, record{N: 2, S: key}, v)
			require.Equal(t, rev2, gotRev)
		})
	}

	keys, err = b.Keys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.7", "edge-1.shop.example.com", "node-2"}, keys)

	require.NoError(t, b.Unpublish(ctx, "node-2"))
	keys, err = b.Keys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.7", "edge-1.shop.example.com"}, keys)
}

func TestBucketGetNotFound(t *testing.T) {
	_, _, b := setup(t, "notfound", pubsub.BucketConfig{})
	ctx := testCtx(t)
	publish(t, b, "deleted", 1)
	require.NoError(t, b.Unpublish(ctx, "deleted"))

	for _, key := range []string{"never-published", "deleted"} {
		t.Run(key, func(t *testing.T) {
			_, _, err := b.Get(ctx, key)
			require.ErrorIs(t, err, pubsub.ErrNotFound)
			require.Contains(t, err.Error(), key)
		})
	}
}

func TestBucketUnpublishMissingKey(t *testing.T) {
	_, _, b := setup(t, "unpub", pubsub.BucketConfig{})
	ctx := testCtx(t)
	require.NoError(t, b.Unpublish(ctx, "never-published"))
	require.NoError(t, b.Unpublish(ctx, "never-published"))
}

func TestBucketRejectsInvalidKeys(t *testing.T) {
	_, _, b := setup(t, "badkeys", pubsub.BucketConfig{})
	ctx := testCtx(t)
	for _, key := range []string{"", "a..b", ".a", "a.", "a b", "a.*", "a.>"} {
		t.Run(key, func(t *testing.T) {
			_, err := b.Publish(ctx, key, record{})
			require.ErrorIs(t, err, pubsub.ErrInvalidKey)
			_, _, err = b.Get(ctx, key)
			require.ErrorIs(t, err, pubsub.ErrInvalidKey)
			require.ErrorIs(t, b.Unpublish(ctx, key), pubsub.ErrInvalidKey)
		})
	}
}

func TestBucketGetDecodeError(t *testing.T) {
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "decode_errors_total", Help: "test"})
	_, js, b := setup(t, "corrupt-get", pubsub.BucketConfig{DecodeErrors: counter})
	ctx := testCtx(t)
	kv, err := js.KeyValue(ctx, "corrupt-get")
	require.NoError(t, err)
	_, err = kv.Put(ctx, "node-1", []byte("{not json"))
	require.NoError(t, err)

	_, _, err = b.Get(ctx, "node-1")
	require.ErrorIs(t, err, pubsub.ErrDecode)
	require.Contains(t, err.Error(), "node-1")
	require.Equal(t, uint64(1), b.DecodeErrorCount())
	require.Equal(t, 1.0, counterValue(t, counter))
}

func TestBucketValueTooLarge(t *testing.T) {
	_, _, b := setup(t, "small", pubsub.BucketConfig{MaxValueSize: 100})
	_, err := b.Publish(testCtx(t), "node-1", record{S: strings.Repeat("x", 200)})
	require.ErrorIs(t, err, pubsub.ErrValueTooLarge)
	_, err = b.PublishIfLast(testCtx(t), "node-1", record{S: strings.Repeat("x", 200)}, 0)
	require.ErrorIs(t, err, pubsub.ErrValueTooLarge, "the fenced write has the same limit")
}

func TestOpenBucketConfig(t *testing.T) {
	_, js, _ := setup(t, "cfg", pubsub.BucketConfig{Description: "first"})
	ctx := testCtx(t)
	kv, err := js.KeyValue(ctx, "cfg")
	require.NoError(t, err)
	status := func() jetstream.KeyValueConfig {
		st, err := kv.Status(ctx)
		require.NoError(t, err)
		return st.Config()
	}
	got := status()
	require.Equal(t, uint8(pubsub.DefaultHistory), got.History)
	require.Equal(t, pubsub.DefaultMaxValueSize, got.MaxValueSize)
	require.Equal(t, jetstream.FileStorage, got.Storage)
	require.Equal(t, "first", got.Description)

	t.Run("zero fields keep the existing settings", func(t *testing.T) {
		_, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "cfg"}, nil)
		require.NoError(t, err)
		require.Equal(t, got, status())
	})
	t.Run("explicit settings are updated", func(t *testing.T) {
		_, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "cfg", History: 5, MaxValueSize: 1 << 20, Description: "second"}, nil)
		require.NoError(t, err)
		now := status()
		require.Equal(t, uint8(5), now.History)
		require.Equal(t, int32(1<<20), now.MaxValueSize)
		require.Equal(t, "second", now.Description)
	})
	t.Run("storage cannot change", func(t *testing.T) {
		_, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "cfg", Storage: jetstream.MemoryStorage}, nil)
		require.ErrorIs(t, err, pubsub.ErrIncompatibleBucket)
	})
}

func TestBucketConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  pubsub.BucketConfig
		ok   bool
	}{
		{"defaults", pubsub.BucketConfig{Name: "nodedrain-status"}, true},
		{"production", pubsub.BucketConfig{Name: "nodedrain_requests", Replicas: 3, History: 5}, true},
		{"no name", pubsub.BucketConfig{}, false},
		{"dot in name", pubsub.BucketConfig{Name: "a.b"}, false},
		{"history too large", pubsub.BucketConfig{Name: "a", History: pubsub.MaxHistory + 1}, false},
		{"negative history", pubsub.BucketConfig{Name: "a", History: -1}, false},
		{"too many replicas", pubsub.BucketConfig{Name: "a", Replicas: 6}, false},
		{"negative max value size", pubsub.BucketConfig{Name: "a", MaxValueSize: -1}, false},
		{"unknown storage", pubsub.BucketConfig{Name: "a", Storage: 7}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.True(t, errors.Is(err, pubsub.ErrInvalidConfig), "%v", err)
		})
	}
}

// PublishIfLast fences a writer: it lands only while nothing at all was written to the bucket
// after the revision it names, whatever the key.
func TestPublishIfLastFailsAfterAnyOtherWrite(t *testing.T) {
	_, _, b := setup(t, "fence", pubsub.BucketConfig{})
	ctx := testCtx(t)
	rev := publish(t, b, "node-1", 1)

	rev2, err := b.PublishIfLast(ctx, "node-1", record{N: 2, S: "node-1"}, rev)
	require.NoError(t, err)
	require.Greater(t, rev2, rev)

	_, err = b.PublishIfLast(ctx, "node-1", record{N: 3, S: "node-1"}, rev)
	require.ErrorIs(t, err, pubsub.ErrConflict, "a stale revision of its own key")

	at, ok := pubsub.RefusedAt(err)
	require.True(t, ok, "the refusal names where the stream ends: %v", err)
	require.Equal(t, rev2, at)

	rev3 := publish(t, b, "other", 1) // somebody writes another key
	_, err = b.PublishIfLast(ctx, "node-1", record{N: 3, S: "node-1"}, rev2)
	require.ErrorIs(t, err, pubsub.ErrConflict, "a write to another key fences it too")
	at, ok = pubsub.RefusedAt(err)
	require.True(t, ok)
	require.Equal(t, rev3, at, "the refusal names the other key's write")
	_, err = b.UnpublishIfLast(ctx, "node-1", rev2)
	at, ok = pubsub.RefusedAt(err)
	require.True(t, ok, "a refused delete names it too: %v", err)
	require.Equal(t, rev3, at)
	_, ok = pubsub.RefusedAt(errors.New("wrong last sequence: 7"))
	require.False(t, ok, "only the server's refusal is read")

	v, _, err := b.Get(ctx, "node-1")
	require.NoError(t, err)
	require.Equal(t, 2, v.N, "refused writes change nothing")
	_, err = b.PublishIfLast(ctx, "bad key", record{}, rev2)
	require.ErrorIs(t, err, pubsub.ErrInvalidKey)
}
