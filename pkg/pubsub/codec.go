package pubsub

import "encoding/json"

// Codec turns values of type T into payloads and back.
type Codec[T any] interface {
	// Encode returns the payload for v.
	Encode(v T) ([]byte, error)
	// Decode parses a payload; it must reject payloads it cannot represent.
	Decode(data []byte) (T, error)
}

// JSONCodec encodes values with encoding/json; it is the default Codec.
type JSONCodec[T any] struct{}

var _ Codec[struct{}] = JSONCodec[struct{}]{}

// Encode returns the JSON encoding of v.
func (JSONCodec[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

// Decode parses JSON into a T.
func (JSONCodec[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}
