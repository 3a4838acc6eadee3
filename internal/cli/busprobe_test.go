package cli

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// The bus's first silence is a warning (a bucket electing a leader answers within seconds); only
// a bus still silent after silentFor is an error, logged once; its return is logged once too.
func TestBusProbeWarnsFirstAndErrsOnceSilentForLong(t *testing.T) {
	srv, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{Host: "127.0.0.1", StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	p := NewBusProbe(nc, js, prometheus.NewRegistry(), "test_bus_available", log)
	clock := time.Now()
	p.now = func() time.Time { return clock }
	ctx := context.Background()

	require.NoError(t, p.Check(ctx, time.Second))
	assert.Equal(t, float64(1), testutil.ToFloat64(p.gauge))
	nc.Close() // the probe's connection gone: the bus does not answer
	levels := func() []logrus.Level {
		var out []logrus.Level
		for _, e := range hook.AllEntries() {
			out = append(out, e.Level)
		}
		return out
	}
	require.Error(t, p.Check(ctx, time.Second))
	assert.Equal(t, float64(0), testutil.ToFloat64(p.gauge))
	assert.Equal(t, []logrus.Level{logrus.WarnLevel}, levels())
	require.Error(t, p.Check(ctx, time.Second))
	assert.Equal(t, []logrus.Level{logrus.WarnLevel, logrus.DebugLevel}, levels(), "silent for less than silentFor")
	clock = clock.Add(BusSilentFor)
	require.Error(t, p.Check(ctx, time.Second))
	require.Error(t, p.Check(ctx, time.Second))
	assert.Equal(t, []logrus.Level{logrus.WarnLevel, logrus.DebugLevel, logrus.ErrorLevel, logrus.DebugLevel}, levels())
	assert.Contains(t, hook.AllEntries()[2].Message, "has not answered for")
}
