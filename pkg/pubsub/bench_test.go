package pubsub_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

const benchKey = "edge-1.shop.example.com"

// BenchmarkPublishToWatcher measures the time from the start of Publish to
// the moment a watcher on another connection receives the change, over
// loopback with an embedded server. It reports p50/p99 of that latency and
// p50 of the publish acknowledgement.
func BenchmarkPublishToWatcher(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := testenv.StartNATS(b)
	_, jsP := testenv.ConnectNATS(b, srv.ClientURL())
	_, jsW := testenv.ConnectNATS(b, srv.ClientURL())
	pub := benchBucket(b, ctx, jsP)
	sub := benchBucket(b, ctx, jsW)

	w, err := sub.Watch(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	waitSnapshot(b, w)

	type arrival struct {
		rev uint64
		at  time.Time
	}
	arrivals := make(chan arrival, 16)
	go func() {
		for ev := range w.Events() {
			if ev.Kind == pubsub.EventPut {
				arrivals <- arrival{ev.Revision, time.Now()}
			}
		}
	}()

	delivery := make([]time.Duration, 0, b.N)
	ack := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rev, err := pub.Publish(ctx, benchKey, record{N: i, S: benchKey})
		if err != nil {
			b.Fatal(err)
		}
		ack = append(ack, time.Since(start))
		for {
			select {
			case a := <-arrivals:
				if a.rev != rev {
					continue
				}
				delivery = append(delivery, a.at.Sub(start))
			case <-time.After(eventTimeout):
				b.Fatalf("revision %d not delivered within %s", rev, eventTimeout)
			}
			break
		}
	}
	b.StopTimer()
	reportPercentiles(b, delivery, "")
	reportPercentiles(b, ack, "ack-")
}

// BenchmarkFanOut500 runs 500 watchers on one bucket, spread over 10
// connections (50 watchers each), publishes one change per iteration and
// measures the time until all 500 watchers have received it.
func BenchmarkFanOut500(b *testing.B) {
	const (
		watchers = 500
		conns    = 10
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := testenv.StartNATS(b)
	_, jsP := testenv.ConnectNATS(b, srv.ClientURL())
	pub := benchBucket(b, ctx, jsP)

	buckets := make([]*pubsub.Bucket[record], conns)
	for i := range buckets {
		_, js := testenv.ConnectNATS(b, srv.ClientURL())
		buckets[i] = benchBucket(b, ctx, js)
	}
	arrivals := make(chan uint64, watchers)
	for i := 0; i < watchers; i++ {
		w, err := buckets[i%conns].Watch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		waitSnapshot(b, w)
		go func() {
			for ev := range w.Events() {
				if ev.Kind == pubsub.EventPut {
					arrivals <- ev.Revision
				}
			}
		}()
	}

	all := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rev, err := pub.Publish(ctx, benchKey, record{N: i, S: benchKey})
		if err != nil {
			b.Fatal(err)
		}
		for got := 0; got < watchers; {
			select {
			case r := <-arrivals:
				if r == rev {
					got++
				}
			case <-time.After(eventTimeout):
				b.Fatalf("revision %d reached %d of %d watchers within %s", rev, got, watchers, eventTimeout)
			}
		}
		all = append(all, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, all, "all500-")
}

func benchBucket(b *testing.B, ctx context.Context, js jetstream.JetStream) *pubsub.Bucket[record] {
	b.Helper()
	bk, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return bk
}

func waitSnapshot(b *testing.B, w *pubsub.Watcher[record]) {
	b.Helper()
	for {
		select {
		case ev := <-w.Events():
			if ev.Kind == pubsub.EventSnapshotDone {
				return
			}
		case <-time.After(eventTimeout):
			b.Fatalf("no snapshot within %s", eventTimeout)
		}
	}
}

// reportPercentiles reports p50 and p99 of ds in microseconds.
func reportPercentiles(b *testing.B, ds []time.Duration, prefix string) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(p * float64(len(ds)-1))
		return float64(ds[i].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), prefix+"p50-µs")
	b.ReportMetric(at(0.99), prefix+"p99-µs")
}
