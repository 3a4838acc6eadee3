package main

import (
	"context"
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
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// fleet is one measured fleet: its nodes, the bus, the coordinator process and the agents.
type fleet struct {
	n, port  int
	p        params
	c        *testenv.Cluster
	group    string
	nodes    []string
	dir      string
	nats     *pubsub.Embedded
	coord    *exec.Cmd
	statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
	conn     *nats.Conn
	metrics  *agent.Metrics // shared by every agent: their status delays in one histogram
	reg      *prometheus.Registry
	stops    []func()
}

func newFleet(ctx context.Context, c *testenv.Cluster, coordBin string, n int, p params) (*fleet, error) {
	f := &fleet{n: n, p: p, c: c, group: fmt.Sprintf("scale%d", n), reg: prometheus.NewRegistry()}
	f.metrics = agent.NewMetrics(f.reg)
	var err error
	if f.dir, err = os.MkdirTemp("", "sc"); err != nil {
		return nil, err
	}
	if err := f.createNodes(ctx); err != nil {
		return f, err
	}
	if f.nats, err = pubsub.StartEmbedded(pubsub.EmbeddedConfig{Host: "127.0.0.1", StoreDir: filepath.Join(f.dir, "nats")}); err != nil {
		return f, err
	}
	if err := f.startCoordinator(coordBin); err != nil {
		return f, err
	}
	// The bench's own connection: it opens the buckets (as the coordinator does) and reads
	// statuses to know when the drains are over.
	var js jetstream.JetStream
	if f.conn, js, err = cli.ConnectBus(pubsub.ConnectOptions{URLs: []string{f.nats.ClientURL()}, Name: benchConnection}, quiet()); err != nil {
		return f, err
	}
	if f.statuses, err = openStatuses(ctx, js); err != nil {
		return f, err
	}
	return f, f.startAgents(ctx)
}

// createNodes makes the fleet's kwok nodes and waits until they are Ready.
func (f *fleet) createNodes(ctx context.Context) error {
	for i := range f.n {
		f.nodes = append(f.nodes, fmt.Sprintf("%s-%04d", f.group, i))
	}
	if err := parallel(16, f.nodes, func(name string) error {
		return f.c.CreateNode(ctx, name, map[string]string{testenv.GroupLabel: f.group})
	}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := f.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.GroupLabel + "=" + f.group})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					ready++
				}
			}
		}
		return ready == f.n, nil
	})
}

func (f *fleet) startCoordinator(bin string) error {
	l, err := listenPort()
	if err != nil {
		return err
	}
	f.port = l
	f.coord = exec.Command(bin, "--kubeconfig", f.c.Kubeconfig, "--nats-url", f.nats.ClientURL(), "--leader-elect=false",
		"--node-selector", testenv.GroupLabel+"="+f.group, "--cluster-node-selector", testenv.GroupLabel+"="+f.group, "--max-concurrent-drains", strconv.Itoa(f.p.concurrency),
		"--listen", fmt.Sprintf("127.0.0.1:%d", f.port), "--log-level", map[bool]string{true: "warn", false: "error"}[f.p.verbose])
	f.coord.Env = append(os.Environ(), testenv.KeyEnv()...)
	f.coord.Stdout, f.coord.Stderr = os.Stdout, os.Stderr
	f.coord.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := f.coord.Start(); err != nil {
		return err
	}
	f.stops = append(f.stops, func() { _ = f.coord.Process.Kill(); _ = f.coord.Wait() })
	return nil
}

// startAgents starts one agent per node, 32 at a time, and waits until each has seen its node
// idle on the bus.
func (f *fleet) startAgents(ctx context.Context) error {
	log := logrus.New()
	log.SetOutput(io.Discard)
	if f.p.verbose {
		log.SetOutput(os.Stderr)
		log.SetLevel(logrus.WarnLevel)
	}
	var mu sync.Mutex
	return parallel(32, f.nodes, func(name string) error {
		stop, err := f.startAgent(ctx, name, log)
		if err != nil {
			return fmt.Errorf("agent of %s: %w", name, err)
		}
		mu.Lock()
		f.stops = append(f.stops, stop)
		mu.Unlock()
		return nil
	})
}

// parallel runs fn for every item, at most n at once, and returns the first error.
func parallel(n int, items []string, fn func(string) error) error {
	sem := make(chan struct{}, n)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- fn(it)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// quiet is a logger that discards.
func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func (f *fleet) path(node, file string) string { return filepath.Join(f.dir, node, file) }

func (f *fleet) startAgent(ctx context.Context, node string, log logrus.FieldLogger) (func(), error) {
	if err := os.MkdirAll(filepath.Join(f.dir, node), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.path(node, "boot_id"), []byte("boot-1\n"), 0o600); err != nil {
		return nil, err
	}
	// As cmd/agent connects.
	nc, js, err := cli.ConnectBus(pubsub.ConnectOptions{URLs: []string{f.nats.ClientURL()}, Name: "edgedrain-agent/" + node,
		InboxPrefix: nodedrain.AgentInboxPrefix(node)}, log)
	if err != nil {
		return nil, err
	}
	cfg := agent.DefaultConfig()
	cfg.Node, cfg.JetStream, cfg.Metrics, cfg.Logger = node, js, f.metrics, log.WithField("node", node)
	cfg.TrustedKeys = testenv.TrustedKeys
	cfg.Commands = map[agent.Operation]string{agent.OpUpdate: "touch " + f.path(node, "updated")}
	cfg.Sentinels = nil // asked through the local socket, as `agent request update` does
	cfg.StateDir, cfg.BootIDFile, cfg.BootTimeFile = f.path(node, "state"), f.path(node, "boot_id"), ""
	cfg.OverrideFile, cfg.Socket, cfg.OutcomeFile = "", f.path(node, "a.sock"), f.path(node, "command-succeeded")
	a, err := agent.New(cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	stop := func() { cancel(); <-done; nc.Close() }
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		st, err := agent.QueryStatus(ctx, cfg.Socket)
		return err == nil && st.BusConnected && st.Status == nodedrain.StatusNotRequested, nil
	})
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func (f *fleet) close() {
	for i := len(f.stops) - 1; i >= 0; i-- {
		f.stops[i]()
	}
	if f.conn != nil {
		f.conn.Close()
	}
	if f.nats != nil {
		f.nats.Shutdown()
	}
	_ = os.RemoveAll(f.dir)
}

// msgs is the count of messages the coordinator's and the agents' connections have sent and
// received so far; the bench's own (it reads statuses to see the drains end) is left out.
func (f *fleet) msgs() (int64, error) {
	cz, err := f.nats.Server().Connz(&server.ConnzOptions{Limit: 1 << 20})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cz.Conns {
		if c.Name != benchConnection {
			n += c.InMsgs + c.OutMsgs
		}
	}
	return n, nil
}

// benchConnection names the bench's own connection.
const benchConnection = "bench"

// coordinatorProc reads the coordinator's CPU time so far and its memory now and at peak.
func (f *fleet) coordinatorProc() (cpu time.Duration, rss, peak int64, err error) {
	pid := f.coord.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// Fields after the command name (which may hold spaces) in parentheses: utime and stime
	// are the 14th and 15th fields of the line, in clock ticks (100 per second on Linux).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	if len(fields) < 13 {
		return 0, 0, 0, errors.New("short /proc stat line")
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	cpu = time.Duration(ut+st) * 10 * time.Millisecond
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return cpu, rss, peak, nil
}

// coordinatorMetrics fetches the coordinator's /metrics.
func (f *fleet) coordinatorMetrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", f.port), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
