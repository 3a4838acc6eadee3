package coordinator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A client that floods the request bucket with values the coordinator cannot use is counted
// payload by payload, but fills no log: each kind of warning is a sample.
func TestRequestFloodIsCountedAndLogsASample(t *testing.T) {
	const garbage, wrongKey = 10_000, 100
	bus := testenv.StartBus(t)
	log, hook := test.NewNullLogger()
	cfg := DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream, cfg.Logger = fake.NewSimpleClientset(), bus.JS, log
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	e, err := NewEngine(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, e.openBuckets(ctx))
	watcher, err := e.requests.Watch(ctx)
	require.NoError(t, err)
	defer func() { _ = watcher.Stop() }()

	start := time.Now()
	testenv.Flood(t, bus.JS, nodedrain.RequestsBucket, garbage, func(i int) (string, []byte) {
		return fmt.Sprint("node-", i), []byte(`{"Status":`)
	})
	// Requests naming another node than their key's.
	testenv.Flood(t, bus.JS, nodedrain.RequestsBucket, wrongKey, func(i int) (string, []byte) {
		payload, err := nodedrain.RequestCodec{}.Encode(nodedrain.NodeDrainRequest{Node: "victim", RequestID: fmt.Sprint("r", i),
			RequestedAt: start, RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
		require.NoError(t, err)
		return fmt.Sprint("attacker-", i), payload
	})
	// What Run does with each event of the request watch.
	for range garbage + wrongKey + 1 { // and the end of the (empty) snapshot
		select {
		case ev := <-watcher.Events():
			e.requestEvent(ctx, ev)
			require.NotEqual(t, pubsub.EventDelete, ev.Kind)
		case <-time.After(time.Minute):
			t.Fatal("the request watch stopped delivering")
		}
	}
	decodeErrors := cfg.Metrics.BusDecodeErrors.WithLabelValues(nodedrain.RequestsBucket)
	assert.Equal(t, float64(garbage+wrongKey), testutil.ToFloat64(decodeErrors), "every payload is counted")

	undecodable, misplaced := 0, 0
	for _, entry := range hook.AllEntries() {
		switch {
		case entry.Message == "ignoring a drain request that does not decode":
			undecodable++
		case strings.HasPrefix(entry.Message, `ignoring a drain request for node "victim" published under key`):
			misplaced++
		}
	}
	// The default burst per warning, and perhaps a line more if the run took long enough to earn one.
	most := ratelog.DefaultBurst + 1 + int(time.Since(start)/(ratelog.DefaultInterval/ratelog.DefaultBurst))
	assert.True(t, undecodable >= 1 && undecodable <= most, "%d lines about undecodable requests", undecodable)
	assert.True(t, misplaced >= 1 && misplaced <= most, "%d lines about requests under another node's key", misplaced)
	assert.Less(t, len(hook.AllEntries()), 3*most, "the log stays short")
	assert.Empty(t, e.core.Nodes(), "no drain was started")
}
