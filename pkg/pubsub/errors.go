package pubsub

import "errors"

var (
	// ErrInvalidConfig is returned when a ConnectOptions, EmbeddedConfig or
	// BucketConfig fails validation.
	ErrInvalidConfig = errors.New("invalid configuration")

	// ErrInvalidKey is returned for a key that JetStream key-value buckets
	// cannot store.
	ErrInvalidKey = errors.New("invalid key")

	// ErrNotFound is returned by Get when a key has no value (never
	// published, or unpublished).
	ErrNotFound = errors.New("key not found")

	// ErrDecode wraps every failure to decode a stored payload into the
	// bucket's value type.
	ErrDecode = errors.New("decode payload")

	// ErrEncode wraps every failure to encode a value before publishing it.
	ErrEncode = errors.New("encode value")

	// ErrValueTooLarge is returned when an encoded value exceeds the bucket's
	// maximum value size.
	ErrValueTooLarge = errors.New("value too large")

	// ErrIncompatibleBucket is returned by OpenBucket when an existing bucket
	// has a setting that cannot be changed to the requested one.
	ErrIncompatibleBucket = errors.New("incompatible existing bucket")

	// ErrBucketMissing is returned by OpenBucket with OpenOnly when the bucket
	// does not exist yet (the coordinator creates it).
	ErrBucketMissing = errors.New("bucket does not exist yet (the coordinator creates it)")

	// ErrServerNotReady is returned by StartEmbedded when the server does not
	// accept connections in time or fails to start JetStream.
	ErrServerNotReady = errors.New("nats server not ready")

	// ErrConflict means a conditional write found the key at another revision than expected.
	ErrConflict = errors.New("key changed meanwhile")

	// ErrBehind means a read was answered by a replica of the bucket's stream that had not
	// applied the revision it had to (GetCurrent): a follower that lags.
	ErrBehind = errors.New("answered by a replica behind the revision asked for")
)
