package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// machine is one simulated edge node: its agent (package agent, run in this process with its
// own bus connection, as the agent binary would), the files the agent keeps on the node, and the
// harness's play of a reboot.
type machine struct {
	name, dir string
	d         *day
	boots     int
	stopAgent func() // stops the running agent and closes its bus connection

	// Times the harness saw (the coordinator's side is read from the bus).
	rebootRan, down, back, rebuilt time.Time
}

func newMachine(d *day, name string) (*machine, error) {
	// A short directory: the agent's socket path must fit a unix socket address.
	dir, err := os.MkdirTemp("", "rl")
	if err != nil {
		return nil, err
	}
	return &machine{name: name, dir: dir, d: d}, nil
}

func (m *machine) path(name string) string { return filepath.Join(m.dir, name) }

// startAgent boots the node's agent with a new boot ID, as the node's agent pod starts at boot.
func (m *machine) startAgent() error {
	m.boots++
	if err := os.WriteFile(m.path("boot_id"), fmt.Appendf(nil, "boot-%d\n", m.boots), 0o600); err != nil {
		return err
	}
	// The kernel's boot time, as /proc/stat gives it.
	if err := os.WriteFile(m.path("stat"), fmt.Appendf(nil, "btime %d\n", time.Now().Unix()), 0o600); err != nil {
		return err
	}
	nc, err := pubsub.Connect(pubsub.ConnectOptions{URLs: []string{m.d.nats.ClientURL()}, Name: "edgedrain-agent/" + m.name})
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	cfg := agent.DefaultConfig()
	cfg.Node, cfg.JetStream = m.name, js
	// The reboot command only leaves a mark; the harness takes the node down when it sees it.
	cfg.Commands = map[agent.Operation]string{agent.OpReboot: "touch " + m.path("rebooted")}
	cfg.Sentinels = nil // asked through the local socket, as `agent request reboot` does
	cfg.StateDir, cfg.BootIDFile, cfg.BootTimeFile = m.path("state"), m.path("boot_id"), m.path("stat")
	cfg.OverrideFile, cfg.Socket, cfg.OutcomeFile = "", m.path("agent.sock"), m.path("command-succeeded")
	cfg.Logger = m.d.logger("agent").WithField("node", m.name)
	a, err := agent.New(cfg)
	if err != nil {
		nc.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	m.stopAgent = func() {
		cancel()
		if err := <-done; err != nil {
			m.d.logger("agent").WithField("node", m.name).WithError(err).Warn("agent run failed")
		}
		nc.Close()
	}
	return nil
}

// waitIdle waits until the agent answers on its socket and has seen its node idle on the bus.
func (m *machine) waitIdle(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		st, err := agent.QueryStatus(ctx, m.path("agent.sock"))
		return err == nil && st.BusConnected && st.Status == nodedrain.StatusNotRequested, nil
	})
}

// requestReboot asks the agent for a reboot through its local socket.
func (m *machine) requestReboot(ctx context.Context) error {
	_, err := agent.Request(ctx, m.path("agent.sock"), agent.OpReboot, "reboot")
	return err
}

// live plays the machine until ctx ends: when the agent has run its reboot command, the node
// goes down for R (agent stopped, Node NotReady, replicas stopped), comes back (Ready, agent
// started with a new boot ID) and its replicas rebuild for S.
func (m *machine) live(ctx context.Context) error {
	for {
		if err := m.waitMark(ctx); err != nil {
			return err
		}
		m.rebootRan = time.Now()
		m.stopAgent()
		m.stopAgent = nil
		if err := os.Remove(m.path("rebooted")); err != nil {
			return err
		}
		m.down = time.Now()
		if err := m.setReady(ctx, false); err != nil {
			return err
		}
		if err := m.d.storage.set(ctx, m.name, "stopped", 0); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(m.down.Add(m.d.p.reboot))):
		}
		if err := m.setReady(ctx, true); err != nil {
			return err
		}
		m.back = time.Now()
		rebuilt := make(chan error, 1)
		go func() { rebuilt <- m.d.storage.rebuild(ctx, m.name, m.d.p.resync) }()
		if err := m.startAgent(); err != nil {
			return err
		}
		if err := <-rebuilt; err != nil {
			return err
		}
		m.rebuilt = time.Now()
	}
}

// waitMark waits for the reboot command's mark.
func (m *machine) waitMark(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := os.Stat(m.path("rebooted"))
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// setReady takes the Node down or brings it back. Down: kwok stops managing it (its
// annotation removed) and its Ready condition turns False, as after a power-off. Back: kwok
// manages it again and its node-initialize stage makes it Ready; this waits for that.
func (m *machine) setReady(ctx context.Context, ready bool) error {
	nodes := m.d.c.Client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, m.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ready {
			n.Annotations[testenv.KwokNodeAnnotation] = "fake"
		} else {
			delete(n.Annotations, testenv.KwokNodeAnnotation)
		}
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil || ready {
		if err == nil {
			err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				n, err := nodes.Get(ctx, m.name, metav1.GetOptions{})
				return err == nil && nodeReady(n), nil
			})
		}
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, m.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = corev1.ConditionFalse, "Rebooting"
				n.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// close stops the agent and removes the machine's files.
func (m *machine) close() {
	if m.stopAgent != nil {
		m.stopAgent()
	}
	_ = os.RemoveAll(m.dir)
}

// logger returns a logger for component: warnings to stderr with -v, nothing otherwise.
func (d *day) logger(component string) logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.PanicLevel)
	if d.p.verbose {
		l.SetLevel(logrus.WarnLevel)
	}
	return l.WithFields(logrus.Fields{"component": component, "day": d.group})
}
