package pubsub_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// eventTimeout bounds the wait for one watcher event; generous because the
// test machine may be busy.
const eventTimeout = 15 * time.Second

// record is the value type used by the tests.
type record struct {
	N int    `json:"n"`
	S string `json:"s"`
}

// seen is an Event without revision and error, for comparisons.
type seen struct {
	Kind  pubsub.EventKind
	Key   string
	Value record
}

// setup starts a server, connects to it and opens a bucket named name.
func setup(t *testing.T, name string, cfg pubsub.BucketConfig) (*pubsub.Embedded, jetstream.JetStream, *pubsub.Bucket[record]) {
	t.Helper()
	srv := testenv.StartNATS(t)
	_, js := testenv.ConnectNATS(t, srv.ClientURL())
	cfg.Name = name
	b, err := pubsub.OpenBucket[record](testCtx(t), js, cfg, nil)
	require.NoError(t, err)
	return srv, js, b
}

// testCtx returns a context cancelled when the test ends.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// watch starts a watcher stopped when the test ends.
func watch(t *testing.T, b *pubsub.Bucket[record]) *pubsub.Watcher[record] {
	t.Helper()
	w, err := b.Watch(testCtx(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// nextEvent returns the watcher's next event or fails after eventTimeout.
func nextEvent(t *testing.T, w *pubsub.Watcher[record]) pubsub.Event[record] {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		require.True(t, ok, "event channel closed")
		return ev
	case <-time.After(eventTimeout):
		t.Fatalf("no event within %s", eventTimeout)
	}
	return pubsub.Event[record]{}
}

// expectEvents reads len(want) events and compares them, ignoring revisions.
func expectEvents(t *testing.T, w *pubsub.Watcher[record], want ...seen) []pubsub.Event[record] {
	t.Helper()
	got := make([]seen, 0, len(want))
	raw := make([]pubsub.Event[record], 0, len(want))
	for range want {
		ev := nextEvent(t, w)
		raw = append(raw, ev)
		got = append(got, seen{Kind: ev.Kind, Key: ev.Key, Value: ev.Value})
	}
	require.Equal(t, want, got)
	return raw
}

func put(key string, n int) seen {
	return seen{Kind: pubsub.EventPut, Key: key, Value: record{N: n, S: key}}
}

func del(key string) seen { return seen{Kind: pubsub.EventDelete, Key: key} }

func snapshotDone() seen { return seen{Kind: pubsub.EventSnapshotDone} }

func publish(t *testing.T, b *pubsub.Bucket[record], key string, n int) uint64 {
	t.Helper()
	rev, err := b.Publish(testCtx(t), key, record{N: n, S: key})
	require.NoError(t, err)
	return rev
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// converge applies watcher events to state until it equals want.
func converge(t *testing.T, w *pubsub.Watcher[record], state, want map[string]record) {
	t.Helper()
	convergeCounting(t, w, state, want, new(int))
}

// convergeCounting is converge, also counting the EventReplaced events in replaced.
func convergeCounting(t *testing.T, w *pubsub.Watcher[record], state, want map[string]record, replaced *int) {
	t.Helper()
	deadline := time.After(eventTimeout)
	for !maps.Equal(state, want) {
		select {
		case ev, ok := <-w.Events():
			require.True(t, ok, "event channel closed")
			switch ev.Kind {
			case pubsub.EventPut:
				state[ev.Key] = ev.Value
			case pubsub.EventDelete:
				_, known := state[ev.Key]
				require.True(t, known, "delete of a key never delivered: %s", ev.Key)
				delete(state, ev.Key)
			case pubsub.EventDecodeError:
				t.Fatalf("decode error: %v", ev.Err)
			case pubsub.EventReplaced:
				*replaced++
			}
		case <-deadline:
			t.Fatalf("state %v did not become %v within %s", state, want, eventTimeout)
		}
	}
}
