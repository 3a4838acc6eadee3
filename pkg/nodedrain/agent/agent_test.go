package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// node has dots, as real node names do: keys must take them.
const node = "edge-1.shop.example"

// world is an agent running in this process against a real NATS server, with the test playing
// the coordinator.
type world struct {
	t        *testing.T
	cfg      agent.Config
	ran      string // the commands append a line here
	requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
}

func newWorld(t *testing.T) *world {
	t.Helper()
	srv := testenv.StartNATS(t)
	_, js := testenv.ConnectNATS(t, srv.ClientURL())
	ctx := context.Background()
	w := &world{t: t}
	var err error
	w.requests, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket}, nodedrain.RequestCodec{})
	require.NoError(t, err)
	w.statuses, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, WriterMark: nodedrain.StatusWriterMark}, nodedrain.StatusCodec{})
	require.NoError(t, err)

	dir := t.TempDir()
	sock, err := os.MkdirTemp("", "ea")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sock) })
	w.ran = filepath.Join(dir, "ran")
	bootID := filepath.Join(dir, "boot_id")
	require.NoError(t, os.WriteFile(bootID, []byte("boot-1\n"), 0o600))
	cmd := `echo "$EDGEDRAIN_OPERATION $EDGEDRAIN_CONTEXT $EDGEDRAIN_REQUEST_ID" >> ` + w.ran
	cfg := agent.DefaultConfig()
	cfg.Node, cfg.JetStream = node, js
	cfg.TrustedKeys = testenv.TrustedKeys
	cfg.Commands = map[agent.Operation]string{agent.OpReboot: cmd, agent.OpUpdate: cmd}
	cfg.Sentinels = nil
	cfg.StateDir, cfg.BootIDFile, cfg.OverrideFile = filepath.Join(dir, "state"), bootID, filepath.Join(dir, "force.json")
	cfg.Socket, cfg.OutcomeFile = filepath.Join(sock, "agent.sock"), filepath.Join(sock, "command-succeeded")
	cfg.Metrics = agent.NewMetrics(nil)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	cfg.Logger = log.WithField("test", t.Name())
	w.cfg = cfg
	return w
}

func (w *world) run() {
	w.t.Helper()
	a, err := agent.New(w.cfg)
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		require.NoError(w.t, <-done)
	})
}

func (w *world) status() agent.StatusReport {
	w.t.Helper()
	var st agent.StatusReport
	require.Eventually(w.t, func() bool {
		var err error
		st, err = agent.QueryStatus(context.Background(), w.cfg.Socket)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "agent not answering on its socket")
	return st
}

// waitStatus waits until the agent acts on want.
func (w *world) waitStatus(want nodedrain.DrainStatus) {
	w.t.Helper()
	require.Eventually(w.t, func() bool { return w.status().Status == want }, 10*time.Second, 10*time.Millisecond,
		"agent never saw %s", want)
}

func (w *world) request() nodedrain.NodeDrainRequest {
	w.t.Helper()
	var r nodedrain.NodeDrainRequest
	require.Eventually(w.t, func() bool {
		var err error
		r, _, err = w.requests.Get(context.Background(), node)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "no request published")
	return r
}

func (w *world) publish(status nodedrain.DrainStatus, id string) {
	w.t.Helper()
	_, err := w.statuses.Publish(context.Background(), node, testenv.SignStatus(nodedrain.NodeDrainStatus{Node: node, Status: status, RequestID: id}))
	require.NoError(w.t, err)
}

func (w *world) ranLines() []string {
	data, err := os.ReadFile(w.ran)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(w.t, err)
	// Complete lines only: the shell creates the file before it writes the line, and a read in
	// between saw one empty line.
	i := strings.LastIndexByte(string(data), '\n')
	if i < 0 {
		return nil
	}
	return strings.Split(string(data[:i]), "\n")
}

func TestAgentUpdateThroughTheSocket(t *testing.T) {
	w := newWorld(t)
	w.run()
	w.waitStatus(nodedrain.StatusNotRequested) // no status published: the coordinator is idle for us

	msg, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "v1.2.3")
	require.NoError(t, err)
	assert.Contains(t, msg, "update deferred")
	_, err = agent.Request(context.Background(), w.cfg.Socket, agent.OpReboot, "")
	assert.ErrorContains(t, err, "an update is already")

	r := w.request()
	assert.Equal(t, nodedrain.RequesterUpdate, r.RequestedBy)
	assert.Equal(t, "v1.2.3", r.Context)
	assert.True(t, strings.HasPrefix(r.RequestID, node+"-"), r.RequestID)
	assert.Equal(t, 1.0, testutil.ToFloat64(w.cfg.Metrics.DeferredOperations.WithLabelValues("update")))

	// A COMPLETE for an older request, then our drain under way: the stale COMPLETE never runs
	// the update (the watch delivers in order, so once the agent sees CORDONED it has seen it).
	w.publish(nodedrain.StatusComplete, "an-older-request")
	w.publish(nodedrain.StatusCordoned, r.RequestID)
	w.waitStatus(nodedrain.StatusCordoned)
	assert.Empty(t, w.ranLines(), "ran on a COMPLETE for another request")
	st := w.status()
	assert.Equal(t, agent.PhaseDeferred, st.State.Phase)
	assert.Equal(t, r.RequestID, st.State.RequestID)

	w.publish(nodedrain.StatusComplete, r.RequestID)
	require.Eventually(t, func() bool { return len(w.ranLines()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"update v1.2.3 " + r.RequestID}, w.ranLines())
	require.Eventually(t, func() bool {
		_, _, err := w.requests.Get(context.Background(), node)
		return errors.Is(err, pubsub.ErrNotFound)
	}, 10*time.Second, 10*time.Millisecond, "request not withdrawn after the update")
	assert.Equal(t, agent.PhaseIdle, w.status().State.Phase)
	assert.Equal(t, 0.0, testutil.ToFloat64(w.cfg.Metrics.DeferredOperations.WithLabelValues("update")))
	assert.Equal(t, []string{"update v1.2.3 " + r.RequestID}, w.ranLines(), "ran once")
}

func TestAgentCommandFailureIsRetried(t *testing.T) {
	w := newWorld(t)
	marker := filepath.Join(t.TempDir(), "failed-once")
	// Fails the first time, succeeds the second.
	w.cfg.Commands[agent.OpUpdate] = `if [ ! -e ` + marker + ` ]; then touch ` + marker + `; echo disk full >&2; exit 1; fi; echo ok >> ` + w.ran
	w.cfg.Limits.CommandRetryBackoff, w.cfg.Limits.CommandRetryBackoffMax = 100*time.Millisecond, 100*time.Millisecond
	w.run()
	w.waitStatus(nodedrain.StatusNotRequested)
	_, err := agent.Request(context.Background(), w.cfg.Socket, agent.OpUpdate, "")
	require.NoError(t, err)
	w.publish(nodedrain.StatusComplete, w.request().RequestID)
	require.Eventually(t, func() bool { return len(w.ranLines()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1.0, testutil.ToFloat64(w.cfg.Metrics.CommandFailures.WithLabelValues("update")))
}

func TestAgentStartFailsClearly(t *testing.T) {
	w := newWorld(t)
	w.cfg.BootIDFile = filepath.Join(t.TempDir(), "missing")
	a, err := agent.New(w.cfg)
	require.NoError(t, err)
	assert.ErrorContains(t, a.Run(context.Background()), "boot ID")

	w.cfg.Node = "Not_A_Node"
	_, err = agent.New(w.cfg)
	assert.True(t, errors.Is(err, agent.ErrInvalidConfig))
	assert.ErrorContains(t, err, "invalid node name")
}
