package coordinator

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The per-node gauges belong to the run that leads: a stopped run (a former leader, a standby)
// exports none, so an alert does not fire on a replica's stale "draining"; a new run sets them
// from the drains it resumes, before it publishes anything (second review).
func TestNodeGaugesFollowTheActiveRun(t *testing.T) {
	h := newHarness(t, "gauges", 2)
	cfg := h.config(h.c.Client)
	stop := h.run(cfg)
	target := h.nodes[0]
	h.request(target, "r1", time.Now())
	h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	assert.Eventually(t, func() bool {
		return testutil.ToFloat64(cfg.Metrics.Status.WithLabelValues(target)) == float64(nodedrain.StatusComplete)
	}, 10*time.Second, 20*time.Millisecond)
	stop()
	assert.Zero(t, testutil.CollectAndCount(cfg.Metrics.Status), "a run that stopped still exports node statuses")
	assert.Zero(t, testutil.CollectAndCount(cfg.Metrics.CordonedByEdgedrain))

	published := len(h.Seen(target))
	h.run(cfg) // the next leader, same process
	assert.Eventually(t, func() bool {
		return testutil.CollectAndCount(cfg.Metrics.Status) > 0 &&
			testutil.ToFloat64(cfg.Metrics.Status.WithLabelValues(target)) == float64(nodedrain.StatusComplete) &&
			testutil.ToFloat64(cfg.Metrics.CordonedByEdgedrain.WithLabelValues(target)) == 1
	}, 30*time.Second, 20*time.Millisecond, "the resumed drain's gauges")
	assert.Len(t, h.Seen(target), published, "set from the resumed drain, not from a new publication")
}
