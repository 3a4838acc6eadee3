package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Flood writes n raw values into bucket as an attacker with write access would, bypassing every
// codec: value(i) gives the key and payload of the i-th. It returns once the server has stored
// them all.
func Flood(t testing.TB, js jetstream.JetStream, bucket string, n int, value func(i int) (key string, payload []byte)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const window = 256 // acknowledgements awaited at once
	acks := make([]jetstream.PubAckFuture, 0, window)
	wait := func() {
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				t.Fatalf("flood %s: %v", bucket, err)
			case <-ctx.Done():
				t.Fatalf("flood %s: %v", bucket, ctx.Err())
			}
		}
		acks = acks[:0]
	}
	for i := range n {
		key, payload := value(i)
		a, err := js.PublishAsync("$KV."+bucket+"."+key, payload)
		if err != nil {
			t.Fatalf("flood %s: %v", bucket, err)
		}
		if acks = append(acks, a); len(acks) == window {
			wait()
		}
	}
	wait()
}
