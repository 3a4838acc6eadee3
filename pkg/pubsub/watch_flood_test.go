package pubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A flood of undecodable values reaches the watcher's caller and the metric one by one, but
// only a sample reaches the log.
func TestWatchFloodOfGarbageLogsASample(t *testing.T) {
	const flood = 10_000
	srv := testenv.StartNATS(t)
	_, js := testenv.ConnectNATS(t, srv.ClientURL())
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel) // the watcher logs undecodable payloads at debug level
	decodeErrors := prometheus.NewCounter(prometheus.CounterOpts{Name: "decode_errors"})
	b, err := pubsub.OpenBucket[record](testCtx(t), js, pubsub.BucketConfig{Name: "flood", Logger: log,
		DecodeErrors: decodeErrors}, nil)
	require.NoError(t, err)
	w := watch(t, b)
	require.Equal(t, pubsub.EventSnapshotDone, nextEvent(t, w).Kind)

	start := time.Now()
	testenv.Flood(t, js, "flood", flood, func(i int) (string, []byte) {
		return fmt.Sprintf("node-%d", i), []byte("{not json")
	})
	for i := range flood {
		ev := nextEvent(t, w)
		require.Equal(t, pubsub.EventDecodeError, ev.Kind, "event %d", i)
	}
	assert.Equal(t, float64(flood), counterValue(t, decodeErrors), "the metric counts every payload")
	assert.Equal(t, uint64(flood), b.DecodeErrorCount())

	var lines int
	for _, e := range hook.AllEntries() {
		if e.Message == "undecodable payload" {
			lines++
		}
	}
	// The default burst, and perhaps a line more if the run took long enough to earn one.
	elapsed := time.Since(start)
	assert.GreaterOrEqual(t, lines, 1)
	assert.LessOrEqual(t, lines, ratelog.DefaultBurst+1+int(elapsed/(ratelog.DefaultInterval/ratelog.DefaultBurst)),
		"a sample of the %d payloads is logged", flood)
}
