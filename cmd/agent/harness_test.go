package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// scene is one test's world: a bus (with a record of every status published), optionally
// simulated nodes of its own (a group) and a coordinator in this process, and agents as separate
// processes.
type scene struct {
	*testenv.Bus
	t     testing.TB
	c     *testenv.Cluster // nil for bus-only scenes
	group string
	nodes []string
	ns    string
	urls  []string // the NATS servers when not the embedded one (a NATS cluster)
}

// newScene makes a scene with n simulated nodes in group; n = 0 makes a bus-only scene.
func newScene(t testing.TB, group string, n int) *scene {
	t.Helper()
	s := &scene{t: t, group: group}
	if n > 0 {
		s.c = testenv.RequireCluster(t, cluster)
		s.nodes = s.c.AddNodes(t, group, n)
		s.ns = s.c.Namespace(t)
	}
	s.Bus = testenv.StartBus(t)
	return s
}

// runCoordinator starts a coordinator engine for the scene's nodes, with delays short enough
// for tests; tune may change its config. It runs until the test ends, or stop.
func (s *scene) runCoordinator(tune func(*coordinator.Config)) (stop func()) {
	s.t.Helper()
	cfg := coordinator.DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream = s.c.Client, s.JS
	cfg.NodeSelector = testenv.GroupLabel + "=" + s.group
	cfg.ClusterSelector = cfg.NodeSelector // the test cluster is shared: its group is its cluster
	cfg.Limits = testenv.FastPolicy()
	cfg.Limits.DrainAttemptTimeout = 10 * time.Second // pods with a 1 s grace period on a loaded machine
	cfg.EvictRetryDelay, cfg.ProgressEvery = 200*time.Millisecond, 100*time.Millisecond
	cfg.Metrics = coordinator.NewMetrics(prometheus.NewRegistry())
	// Its log is the test's, printed if it fails: written to the process's output, the logs of
	// the package's parallel tests would bury the failure's own lines.
	log, out := logrus.New(), &syncBuffer{}
	log.SetOutput(out)
	s.t.Cleanup(func() {
		if s.t.Failed() {
			s.t.Logf("coordinator log:\n%s", out.String())
		}
	})
	cfg.Logger = log.WithFields(logrus.Fields{"test": s.t.Name(), "component": "coordinator"})
	if tune != nil {
		tune(&cfg)
	}
	e, err := coordinator.NewEngine(cfg)
	require.NoError(s.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(s.t, <-done)
		})
	}
	s.t.Cleanup(stop)
	return stop
}

// deploy runs a Deployment on the scene's nodes, waits until its pods run, and returns the node
// holding the most of them.
func (s *scene) deploy(name string, replicas int32, termination int64) string {
	s.t.Helper()
	_, busiest := s.c.Deploy(s.t, testenv.DeploymentSpec{Namespace: s.ns, Name: name, Group: s.group, Replicas: replicas, TerminationSeconds: termination})
	return busiest
}

// natsURL is what agents are given as --nats-url: the scene's servers.
func (s *scene) natsURL() string {
	if len(s.urls) > 0 {
		return strings.Join(s.urls, ",")
	}
	return s.NATS.ClientURL()
}

func (s *scene) history(node string) []nodedrain.DrainStatus { return s.History(node) }

func (s *scene) waitFor(node string, timeout time.Duration, what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	s.t.Helper()
	return s.WaitFor(s.t, node, timeout, what, ok)
}

func (s *scene) waitStatus(node string, want nodedrain.DrainStatus, id string, timeout time.Duration) nodedrain.NodeDrainStatus {
	s.t.Helper()
	return s.waitFor(node, timeout, want.String(), func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == want && (id == "" || st.RequestID == id)
	})
}

// request returns the node's request on the bus, waiting for one (other than not) to appear.
func (s *scene) request(node, not string) nodedrain.NodeDrainRequest {
	s.t.Helper()
	var r nodedrain.NodeDrainRequest
	require.Eventually(s.t, func() bool {
		var err error
		r, _, err = s.Requests.Get(context.Background(), node)
		return err == nil && r.RequestID != not
	}, 30*time.Second, 20*time.Millisecond, "no new drain request for %s on the bus", node)
	return r
}

// waitWithdrawn waits until node has no request on the bus.
func (s *scene) waitWithdrawn(node string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		_, _, err := s.Requests.Get(context.Background(), node)
		return errors.Is(err, pubsub.ErrNotFound)
	}, 30*time.Second, 20*time.Millisecond, "request of %s not withdrawn", node)
}

func (s *scene) unschedulable(node string) bool {
	s.t.Helper()
	n, err := s.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(s.t, err)
	return n.Spec.Unschedulable
}

// agentProc is an agent process for one node, with its own files.
type agentProc struct {
	s                                         *scene
	node                                      string
	dir                                       string
	stateDir, bootID, override, sentinel, ran string
	socket                                    string
	args                                      []string
	proc                                      *testenv.Proc
	metricsURL                                string
	starts                                    int
}

// newAgent prepares (does not start) an agent for node. Every command appends
// "<start time> <operation> <request ID> <context>" to the ran file; extra flags come last.
func (s *scene) newAgent(node string, extra ...string) *agentProc {
	s.t.Helper()
	dir := s.t.TempDir()
	sockDir, err := os.MkdirTemp("", "ea") // t.TempDir paths can be too long for a socket
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	a := &agentProc{s: s, node: node, dir: dir, stateDir: filepath.Join(dir, "state"), bootID: filepath.Join(dir, "boot_id"),
		override: filepath.Join(dir, "force.json"), sentinel: filepath.Join(dir, "reboot-required"), ran: filepath.Join(dir, "ran"),
		socket: filepath.Join(sockDir, "agent.sock")}
	a.setBootID("boot-1")
	s.t.Cleanup(func() {
		if s.t.Failed() && a.proc != nil {
			s.t.Logf("agent for %s:\n%s", node, a.proc.Tail(80))
		}
	})
	cmd := `echo "$(date +%s.%N) $EDGEDRAIN_OPERATION $EDGEDRAIN_REQUEST_ID $EDGEDRAIN_CONTEXT" >> ` + a.ran
	a.args = append([]string{"--node-name", node, "--nats-url", s.natsURL(),
		"--state-dir", a.stateDir, "--boot-id-file", a.bootID, "--force-status-file", a.override, "--socket", a.socket,
		"--outcome-file", filepath.Join(sockDir, "command-succeeded"),
		"--reboot-command", cmd, "--shutdown-command", cmd, "--update-command", cmd, "--reboot-sentinel", a.sentinel,
		"--sentinel-interval", "200ms", "--sentinel-jitter", "100ms", "--reboot-timeout", "1h",
		"--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"}, extra...)
	return a
}

func (a *agentProc) setBootID(id string) {
	require.NoError(a.s.t, os.WriteFile(a.bootID, []byte(id+"\n"), 0o644))
}

// start starts the agent and waits until it answers on its socket with the bus status known.
func (a *agentProc) start() {
	a.s.t.Helper()
	a.startUntil(func(st agent.StatusReport) bool { return st.Source != agent.SourceNone })
}

// startUnanswered starts the agent and waits until it answers on its socket, with or without a
// status taken from the bus.
func (a *agentProc) startUnanswered() {
	a.s.t.Helper()
	a.startUntil(func(agent.StatusReport) bool { return true })
}

// startUntil starts the agent and waits until its socket answers with a status ready accepts.
func (a *agentProc) startUntil(ready func(agent.StatusReport) bool) {
	a.s.t.Helper()
	a.starts++
	a.proc = testenv.StartProc(a.s.t, a.dir, "agent", agentBin, nil, a.args...)
	require.Eventually(a.s.t, func() bool {
		st, err := a.statusErr()
		return err == nil && ready(st)
	}, 30*time.Second, 20*time.Millisecond, "agent for %s not up\n%s", a.node, a.proc.Tail(20))
	a.metricsURL = ""
}

// stop ends the agent with SIGTERM and checks it exits cleanly.
func (a *agentProc) stop() {
	a.s.t.Helper()
	a.proc.Signal(syscall.SIGTERM)
	require.Equal(a.s.t, 0, a.proc.Wait(10*time.Second), a.proc.Tail(20))
}

// cli runs the agent binary's client commands against this agent.
func (a *agentProc) cli(args ...string) (string, error) {
	cmd := exec.Command(agentBin, append(args, "--socket", a.socket)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (a *agentProc) statusErr() (agent.StatusReport, error) {
	out, err := a.cli("status", "--json")
	if err != nil {
		return agent.StatusReport{}, fmt.Errorf("%w: %s", err, out)
	}
	var st agent.StatusReport
	return st, json.Unmarshal([]byte(out), &st)
}

// status is `agent status --json`.
func (a *agentProc) status() agent.StatusReport {
	a.s.t.Helper()
	st, err := a.statusErr()
	require.NoError(a.s.t, err)
	return st
}

// ranLine is one run of an operation command.
type ranLine struct {
	at                   time.Time
	op, request, context string
}

func (a *agentProc) runs() []ranLine {
	a.s.t.Helper()
	f, err := os.Open(a.ran)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(a.s.t, err)
	defer f.Close()
	var out []ranLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		require.Len(a.s.t, parts, 4, "ran line %q", sc.Text())
		sec, err := strconv.ParseFloat(parts[0], 64)
		require.NoError(a.s.t, err)
		out = append(out, ranLine{at: time.Unix(0, int64(sec*1e9)), op: parts[1], request: parts[2], context: parts[3]})
	}
	return out
}

// waitRuns waits until the commands ran n times in all.
func (a *agentProc) waitRuns(n int, timeout time.Duration) []ranLine {
	a.s.t.Helper()
	require.Eventually(a.s.t, func() bool { return len(a.runs()) >= n }, timeout, 10*time.Millisecond,
		"command ran %d times, want %d\n%s", len(a.runs()), n, a.proc.Tail(30))
	return a.runs()
}

// noRunBeforeComplete checks that the command has not run before the node's status was
// COMPLETE (or NOTSUPPORTED) for request id: once a run is seen, that status must have been
// published (the recorder sees it soon), and before the run started.
func (a *agentProc) noRunBeforeComplete(id string) {
	a.s.t.Helper()
	runs := a.runs()
	if len(runs) == 0 {
		return
	}
	// Soon, but a watch whose consumer lived on a NATS server that died (NATS cluster tests)
	// is re-created only after two missed heartbeats, 10 to 20 s.
	st := a.s.waitFor(a.node, 30*time.Second, "COMPLETE for "+id, func(st nodedrain.NodeDrainStatus) bool {
		return (st.Status == nodedrain.StatusComplete || st.Status == nodedrain.StatusNotSupported) && st.RequestID == id
	})
	require.False(a.s.t, runs[0].at.Before(st.UpdatedAt), "the command ran at %s, before %s was published at %s",
		runs[0].at, st.Status, st.UpdatedAt)
}

// metric returns the value of one sample of the agent's /metrics, e.g.
// `edgedrain_agent_deferred_operations{operation="reboot"}`; -1 when it is absent.
func (a *agentProc) metric(series string) float64 {
	a.s.t.Helper()
	if a.metricsURL == "" {
		a.metricsURL = "http://" + a.listenAddr() + "/metrics"
	}
	return scrapeMetric(a.s.t, a.metricsURL, series)
}

// scrapeMetric returns the value of one sample of the /metrics at url; -1 when it is absent.
func scrapeMetric(t testing.TB, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// eventRecorder records the coordinator's Events in the cluster, as the coordinator's main does.
func (s *scene) eventRecorder() record.EventRecorder {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.c.Client.CoreV1().Events("")})
	s.t.Cleanup(broadcaster.Shutdown)
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "edgedrain-coordinator"})
}

// waitNodeEvent waits for an Event of reason on node and returns it.
func (s *scene) waitNodeEvent(node, reason string, timeout time.Duration) corev1.Event {
	s.t.Helper()
	var got []corev1.Event
	require.Eventually(s.t, func() bool {
		evs, err := s.c.Client.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + node + ",reason=" + reason})
		require.NoError(s.t, err)
		got = evs.Items
		return len(got) > 0
	}, timeout, 50*time.Millisecond, "no %s Event on %s", reason, node)
	return got[0]
}

// setBootID writes the boot ID the kubelet of node reports.
func (s *scene) setBootID(node, boot string) {
	s.t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"bootID": boot}}})
	require.NoError(s.t, err)
	_, err = s.c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	require.NoError(s.t, err)
}

// listenAddr finds the metrics address the agent logged (it listens on a free port).
func (a *agentProc) listenAddr() string {
	a.s.t.Helper()
	var addr string
	require.Eventually(a.s.t, func() bool {
		for _, line := range strings.Split(a.proc.Log(), "\n") {
			var e struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &e) == nil && strings.HasPrefix(e.Msg, "serving /metrics") {
				addr = e.Addr // the last start's
			}
		}
		return addr != ""
	}, 10*time.Second, 20*time.Millisecond, "no metrics address in the agent's log")
	return addr
}
