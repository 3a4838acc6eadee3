package agent_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// saveWorld is a world whose state directory can be made unwritable, even for root: it is moved
// aside and a regular file put in its place (the state file's directory is then no directory).
type saveWorld struct {
	*world
	reg  *prometheus.Registry
	logs *test.Hook
}

func newSaveWorld(t *testing.T) *saveWorld {
	w := &saveWorld{world: newWorld(t), reg: prometheus.NewRegistry()}
	w.cfg.Metrics = agent.NewMetrics(w.reg)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	w.logs = test.NewLocal(log)
	w.cfg.Logger = log.WithField("test", t.Name())
	w.cfg.Limits.BusRetry = 50 * time.Millisecond // the held run is tried again soon
	return w
}

// start runs an agent and returns a stop that ends it as a crash would (nothing is undone; the
// state file on disk is what the next agent finds).
func (w *saveWorld) start() (stop func()) {
	w.t.Helper()
	a, err := agent.New(w.cfg)
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(w.t, <-done)
		})
	}
	w.t.Cleanup(stop)
	return stop
}

func (w *saveWorld) breakStateDir() {
	w.t.Helper()
	require.NoError(w.t, os.Rename(w.cfg.StateDir, w.cfg.StateDir+".aside"))
	require.NoError(w.t, os.WriteFile(w.cfg.StateDir, []byte("not a directory\n"), 0o600))
}

func (w *saveWorld) repairStateDir() {
	w.t.Helper()
	require.NoError(w.t, os.Remove(w.cfg.StateDir))
	require.NoError(w.t, os.Rename(w.cfg.StateDir+".aside", w.cfg.StateDir))
}

// held reports whether the agent said it held a command back because its start could not be
// recorded.
func (w *saveWorld) held() bool {
	for _, e := range w.logs.AllEntries() {
		if strings.Contains(e.Message, "could not be recorded") {
			return true
		}
	}
	return false
}

// gauge returns the value of the agent's gauge name (false: no such gauge).
func (w *saveWorld) gauge(name string) (float64, bool) {
	mfs, err := w.reg.Gather()
	require.NoError(w.t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// holdsUpdateBack sets up an update whose COMPLETE comes while the state file cannot be saved,
// and checks that the update is held back, not run; it returns the request.
func (w *saveWorld) holdsUpdateBack(t *testing.T) nodedrain.NodeDrainRequest {
	w.waitStatus(nodedrain.StatusNotRequested)
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1")
	require.NoError(t, err)
	r := w.request()
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseDeferred }, 10*time.Second, 10*time.Millisecond)

	w.breakStateDir()
	w.publish(nodedrain.StatusComplete, r.RequestID)
	require.Eventually(t, func() bool { return w.held() || len(w.ranLines()) > 0 }, 10*time.Second, 10*time.Millisecond,
		"the agent neither ran the update nor held it back")
	require.Empty(t, w.ranLines(), "the update ran although its start could not be recorded in the state file")
	v, ok := w.gauge("edgedrain_agent_state_unsaved")
	assert.True(t, ok && v == 1, "edgedrain_agent_state_unsaved: %v (exported: %v)", v, ok)
	assert.Positive(t, testutil.ToFloat64(w.cfg.Metrics.StateErrors), "the failed saves are counted")
	return r
}

// A crash after a state save that failed must not run the operation twice (S5: once per
// request): the agent does not start a command whose start it could not record, and tries
// again, with a fresh confirmation, once it can. Here it is stopped while the disk refuses
// writes, and the next agent finds the state file from before the COMPLETE: the update runs
// once, by that agent (issue 23, defect 9).
func TestAgentDoesNotRunWhatItCannotRecordAsStarted(t *testing.T) {
	w := newSaveWorld(t)
	stop := w.start()
	r := w.holdsUpdateBack(t)

	stop() // the crash
	w.repairStateDir()
	w.start()
	require.Eventually(t, func() bool {
		_, _, err := w.requests.Get(context.Background(), node)
		return errors.Is(err, pubsub.ErrNotFound) && len(w.ranLines()) > 0
	}, 10*time.Second, 10*time.Millisecond, "the update did not run after the restart")
	assert.Equal(t, []string{"update v1 " + r.RequestID}, w.ranLines(), "ran once")
}

// Once the state saves again, the held update runs (once), without a restart, and the gauge
// says the state is saved.
func TestAgentRunsOnceItsStateSavesAgain(t *testing.T) {
	w := newSaveWorld(t)
	w.start()
	r := w.holdsUpdateBack(t)

	w.repairStateDir()
	require.Eventually(t, func() bool {
		_, _, err := w.requests.Get(context.Background(), node)
		return errors.Is(err, pubsub.ErrNotFound) && len(w.ranLines()) > 0
	}, 10*time.Second, 10*time.Millisecond, "the held update did not run once the state saved again")
	assert.Equal(t, []string{"update v1 " + r.RequestID}, w.ranLines(), "ran once")
	require.Eventually(t, func() bool {
		v, _ := w.gauge("edgedrain_agent_state_unsaved")
		return v == 0
	}, 10*time.Second, 10*time.Millisecond)
	st, err := agent.NewStateStore(w.cfg.StateDir).Load()
	require.NoError(t, err)
	assert.Equal(t, agent.PhaseIdle, st.Phase, "the state file says the update is done")
}

// A request is published only once the state file records it as this agent's: published while
// the file could not be saved, a crash left an agent that took it for another agent's and waited
// for it to end, for good, its node drained and holding the admission slot (the simulation found
// it: a disk fault, a crash, L1). The publish is held back and tried again; once the state saves,
// the request goes out, the one the state file names.
func TestAgentDoesNotPublishWhatItCannotRecord(t *testing.T) {
	w := newSaveWorld(t)
	stop := w.start()
	w.waitStatus(nodedrain.StatusNotRequested)

	w.breakStateDir()
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseDeferred }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(10 * w.cfg.Limits.BusRetry) // retries, each held back
	_, _, err = w.requests.Get(context.Background(), node)
	require.ErrorIs(t, err, pubsub.ErrNotFound, "published a request the state file does not record")

	// The crash: the next agent finds the state file from before the request, and no request
	// of its own, or anyone's, holds the node.
	stop()
	w.repairStateDir()
	w.start()
	w.waitStatus(nodedrain.StatusNotRequested)
	st, err := agent.NewStateStore(w.cfg.StateDir).Load()
	require.NoError(t, err)
	assert.Equal(t, agent.PhaseIdle, st.Phase)
	_, _, err = w.requests.Get(context.Background(), node)
	require.ErrorIs(t, err, pubsub.ErrNotFound)

	// Without a crash, the request goes out once the state saves again.
	w.breakStateDir()
	_, err = agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v2")
	require.NoError(t, err)
	time.Sleep(5 * w.cfg.Limits.BusRetry)
	_, _, err = w.requests.Get(context.Background(), node)
	require.ErrorIs(t, err, pubsub.ErrNotFound)
	w.repairStateDir()
	r := w.request()
	st, err = agent.NewStateStore(w.cfg.StateDir).Load()
	require.NoError(t, err)
	assert.Equal(t, st.RequestID, r.RequestID, "the request published is the one the state file records")
	assert.Contains(t, st.Mine, r.RequestID)
}

// An agent whose drain failed withdraws the request and asks again after a backoff. While its
// state file cannot record that withdrawal it keeps the request on the bus: an agent restarted
// after a crash would find the request it recorded withdrawn, take it for an operator's
// edgedrainctl withdraw, and cancel the operation for good (the simulation found it: the reboot
// was never done, L1). Restarted with the disk repaired, it withdraws the failed request itself
// and asks again.
func TestAgentKeepsAFailedRequestItCannotRecordWithdrawing(t *testing.T) {
	w := newSaveWorld(t)
	w.cfg.Limits.DrainRetryBackoff, w.cfg.Limits.DrainRetryBackoffMax = 200*time.Millisecond, 200*time.Millisecond
	stop := w.start()
	w.waitStatus(nodedrain.StatusNotRequested)
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1")
	require.NoError(t, err)
	r := w.request()

	w.breakStateDir()
	w.publish(nodedrain.StatusFailedDrain, r.RequestID)
	require.Eventually(t, func() bool { return w.status().State.Phase == agent.PhaseBackoff }, 10*time.Second, 10*time.Millisecond,
		"the agent did not take the FAILEDDRAIN")
	kept := func() bool {
		for _, e := range w.logs.AllEntries() {
			if strings.Contains(e.Message, "not withdrawn while the state file cannot record it") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool {
		_, _, err := w.requests.Get(context.Background(), node)
		return kept() || errors.Is(err, pubsub.ErrNotFound)
	}, 10*time.Second, 10*time.Millisecond)
	still, _, err := w.requests.Get(context.Background(), node)
	require.NoError(t, err, "the failed request was withdrawn though its withdrawal could not be recorded")
	assert.Equal(t, r.RequestID, still.RequestID)

	stop() // the crash
	w.repairStateDir()
	w.start()
	require.Eventually(t, func() bool {
		again, _, err := w.requests.Get(context.Background(), node)
		return err == nil && again.RequestID != r.RequestID
	}, 10*time.Second, 10*time.Millisecond, "the restarted agent did not ask again for its update")
	for _, e := range w.logs.AllEntries() {
		assert.NotContains(t, e.Message, "withdrawn by someone else", "the update was cancelled")
	}
}
