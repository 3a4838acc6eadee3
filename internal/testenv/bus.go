package testenv

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Bus is a test's drain bus: an embedded NATS server (nil on servers the test runs otherwise), both drain buckets, and a record of every
// status published, for tests that watch a drain go by.
type Bus struct {
	NATS     *pubsub.Embedded
	JS       jetstream.JetStream
	Requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	Statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]

	mu   sync.Mutex
	seen map[string][]nodedrain.NodeDrainStatus
}

// StartBus starts an embedded NATS server for the test, opens both buckets and records every
// status published until the test ends.
func StartBus(t testing.TB) *Bus {
	t.Helper()
	return StartBusWith(t, pubsub.EmbeddedConfig{}, pubsub.ConnectOptions{})
}

// StartBusWith is StartBus on a server started with cfg (e.g. with an Authentication; Host and
// StoreDir default to loopback and a temporary directory), the test's own connection made with
// conn (e.g. the coordinator's user and password; URLs, Name and ReconnectWait default to
// ConnectNATS's).
func StartBusWith(t testing.TB, cfg pubsub.EmbeddedConfig, conn pubsub.ConnectOptions) *Bus {
	t.Helper()
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	srv := startNATS(t, cfg)
	if len(conn.URLs) == 0 {
		conn.URLs = []string{srv.ClientURL()}
	}
	b := OpenBus(t, conn, 0)
	b.NATS = srv
	return b
}

// OpenBus is StartBus on servers already running (conn.URLs, e.g. a NATSCluster's): it opens
// both buckets with replicas copies (0: the default) and records every status published.
func OpenBus(t testing.TB, conn pubsub.ConnectOptions, replicas int) *Bus {
	t.Helper()
	b := &Bus{seen: map[string][]nodedrain.NodeDrainStatus{}}
	// The recorder's own watch logs to a buffer shown when the test fails: a status missing
	// from the record is the recorder's watch or the bus, and its log tells which.
	var logBuf syncBuffer
	logger := logrus.New()
	logger.SetOutput(&logBuf)
	logger.SetLevel(logrus.DebugLevel)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the test's status recorder:\n%s", logBuf.String())
		}
	})
	if conn.Name == "" {
		conn.Name = t.Name()
	}
	if conn.ReconnectWait == 0 {
		conn.ReconnectWait = natsReconnectWait
	}
	_, b.JS = ConnectNATSWith(t, conn)
	ctx := context.Background()
	var err error
	b.Requests, err = pubsub.OpenBucket(ctx, b.JS, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, Replicas: replicas}, nodedrain.RequestCodec{})
	if err != nil {
		t.Fatal(err)
	}
	// History above 1 so the recorder sees every transition, not only the latest value.
	// Marked as the coordinator's writes: a test that publishes a status plays the coordinator.
	b.Statuses, err = pubsub.OpenBucket(ctx, b.JS, pubsub.BucketConfig{Name: nodedrain.StatusBucket, History: 20, Replicas: replicas,
		WriterMark: nodedrain.StatusWriterMark, Logger: logger}, nodedrain.StatusCodec{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	w, err := b.Statuses.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.Events() {
			if ev.Kind == pubsub.EventPut {
				b.mu.Lock()
				b.seen[ev.Key] = append(b.seen[ev.Key], ev.Value)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// syncBuffer is a bytes.Buffer safe for the watch's goroutine and the test's.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Request publishes a drain request for node, as its agent would.
func (b *Bus) Request(t testing.TB, node, id string, at time.Time) {
	t.Helper()
	b.RequestWithContext(t, node, id, at, "reboot")
}

// RequestWithContext publishes a DEVICEOP request for node with the given context (e.g.
// nodedrain.ClusterShutdownContext to declare a whole-cluster shutdown).
func (b *Bus) RequestWithContext(t testing.TB, node, id string, at time.Time, opContext string) {
	t.Helper()
	_, err := b.Requests.Publish(context.Background(), node, nodedrain.NodeDrainRequest{
		Node: node, RequestID: id, RequestedAt: at, RequestedBy: nodedrain.RequesterDeviceOp, Context: opContext})
	if err != nil {
		t.Fatal(err)
	}
}

// Withdraw deletes node's request.
func (b *Bus) Withdraw(t testing.TB, node string) {
	t.Helper()
	if err := b.Requests.Unpublish(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

// Last returns the latest status published for node.
func (b *Bus) Last(node string) (nodedrain.NodeDrainStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seen[node]
	if len(s) == 0 {
		return nodedrain.NodeDrainStatus{}, false
	}
	return s[len(s)-1], true
}

// History lists the statuses published for node, consecutive repeats folded.
func (b *Bus) History(node string) []nodedrain.DrainStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []nodedrain.DrainStatus
	for _, s := range b.seen[node] {
		if len(out) == 0 || out[len(out)-1] != s.Status {
			out = append(out, s.Status)
		}
	}
	return out
}

// WaitFor waits until a status published for node satisfies ok, and returns the first that did.
// Every published status counts, not only the latest: drains move on quickly.
func (b *Bus) WaitFor(t testing.TB, node string, timeout time.Duration, what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b.mu.Lock()
		for _, st := range b.seen[node] {
			if ok(st) {
				b.mu.Unlock()
				return st
			}
		}
		b.mu.Unlock()
		if time.Now().After(deadline) {
			last, _ := b.Last(node)
			t.Fatalf("node %s never reached %s within %s; last: %s %q; history %v", node, what, timeout, last.Status, last.Message, b.History(node))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitStatus waits until node has been published in status want.
func (b *Bus) WaitStatus(t testing.TB, node string, want nodedrain.DrainStatus, timeout time.Duration) nodedrain.NodeDrainStatus {
	t.Helper()
	return b.WaitFor(t, node, timeout, want.String(), func(s nodedrain.NodeDrainStatus) bool { return s.Status == want })
}

// Seen returns every status published for node so far, oldest first.
func (b *Bus) Seen(node string) []nodedrain.NodeDrainStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]nodedrain.NodeDrainStatus(nil), b.seen[node]...)
}

// FastPolicy is the drain policy tests run coordinators with: the default attempts, with delays
// short enough that retries happen within a test.
func FastPolicy() nodedrain.Limits {
	p := nodedrain.DefaultLimits()
	p.CordonBackoff, p.CordonBackoffMax = 50*time.Millisecond, 200*time.Millisecond
	p.DrainAttemptTimeout = 3 * time.Second
	p.DrainBackoff, p.DrainBackoffMax = 100*time.Millisecond, 300*time.Millisecond
	p.GateRecheck, p.UncordonRetry = 100*time.Millisecond, 100*time.Millisecond
	return p
}
