package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// An agent puts a term-shaped record naming a key nobody trusts (or garbage) under its own
// request key and has the server copy it under the status bucket's term key: CheckTermKey,
// which every replica runs before it starts, read it with a plain get and stopped every
// replica (the review's finding 4). A value no coordinator wrote is now ignored, with a warning;
// a coordinator's own record naming an untrusted key still stops the start.
func TestCopiedTermRecordStopsNoStart(t *testing.T) {
	bus := testenv.StartBus(t)
	ctx := context.Background()
	const attacker = "edge-1"
	untrusted := `{"coordinator":"x","since":"2026-01-01T00:00:00Z","keyID":"ed25519:0000000000000000"}`
	term := "$KV." + nodedrain.StatusBucket + "." + nodedrain.TermKey
	for _, c := range []struct {
		name, data, status string
		body               []byte
	}{
		{"with the server's headers", untrusted, "", nil},
		{"payload alone", untrusted, "", []byte(`{"no_hdr":true}`)},
		{"undecodable", "{", "", nil},
		{"with a Status header", untrusted, "404", nil},
	} {
		m := nats.NewMsg("$KV." + nodedrain.RequestsBucket + "." + attacker)
		m.Data = []byte(c.data)
		if c.status != "" {
			m.Header.Set("Status", c.status)
		}
		_, err := bus.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
		before := termRevision(t, bus)
		nc := bus.JS.Conn()
		require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+nodedrain.RequestsBucket+".$KV."+nodedrain.RequestsBucket+"."+attacker, term, c.body))
		require.NoError(t, nc.Flush())
		require.Eventually(t, func() bool { return termRevision(t, bus) > before }, 5*time.Second, 20*time.Millisecond,
			"%s: the copy did not land", c.name)

		log, hook := test.NewNullLogger()
		require.NoError(t, CheckTermKey(ctx, bus.JS, testenv.TrustedKeys(), log), "%s: a copy under the term key stops a start", c.name)
		require.NotNil(t, hook.LastEntry(), "%s: nothing said about the copy", c.name)
		require.Contains(t, hook.LastEntry().Message, "no coordinator wrote")
	}

	// A coordinator's own record (marked) naming a key this replica does not trust still stops it.
	terms, err := pubsub.OpenBucket(ctx, bus.JS, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true,
		WriterMark: nodedrain.StatusWriterMark}, nodedrain.TermCodec{})
	require.NoError(t, err)
	_, err = terms.Publish(ctx, nodedrain.TermKey, nodedrain.Term{Coordinator: "a", Since: time.Now(), KeyID: "ed25519:0000000000000000"})
	require.NoError(t, err)
	err = CheckTermKey(ctx, bus.JS, testenv.TrustedKeys(), nil)
	require.ErrorContains(t, err, "which this replica does not trust")
}

// termRevision is the revision of the term key's newest message (0: none).
func termRevision(t *testing.T, bus *testenv.Bus) uint64 {
	t.Helper()
	h, err := bus.Statuses.History(context.Background(), nodedrain.TermKey)
	require.NoError(t, err)
	if len(h) == 0 {
		return 0
	}
	return h[0].Rev
}

// A replica started while the bus does not answer (its server restarting) waits for it, saying
// why, instead of exiting: it exited with "context deadline exceeded" in a chaos run, into a
// crash loop.
func TestWaitTermKeyWaitsForTheBus(t *testing.T) {
	bus := testenv.StartBus(t)
	cfg := bus.NATS.Config()
	bus.NATS.Shutdown()
	log, hook := test.NewNullLogger()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- WaitTermKey(ctx, bus.JS, testenv.TrustedKeys, log) }()
	require.Eventually(t, func() bool {
		e := hook.LastEntry()
		return e != nil && strings.Contains(e.Message, "cannot read the active coordinator's term record yet")
	}, 30*time.Second, 50*time.Millisecond, "no word of the wait")
	select {
	case err := <-done:
		t.Fatalf("returned while the bus was away: %v", err)
	default:
	}
	srv, err := pubsub.StartEmbedded(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("still waiting once the bus was back")
	}
}
