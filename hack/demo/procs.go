package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// process is one of the demo's programs, its output in a log file.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (d *demo) spawn(name string, args ...string) (*process, error) {
	logf, err := os.Create(filepath.Join(d.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(d.bin, args[0])
	cmd := exec.Command(bin, args[1:]...)
	cmd.Env = append(os.Environ(), d.keyEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(p.done) }()
	d.procs[name] = p
	return p, nil
}

func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (d *demo) startCoordinator(ctx context.Context) error {
	natsPort, err := freePort()
	if err != nil {
		return err
	}
	metricsPort, err := freePort()
	if err != nil {
		return err
	}
	d.natsURL = "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	d.metrics = "http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics"
	d.say("starting the coordinator with its embedded NATS bus on %s", d.natsURL)
	_, err = d.spawn("coordinator", "coordinator",
		"--kubeconfig", d.c.Kubeconfig,
		"--nats-embedded", "--nats-listen", "127.0.0.1:"+strconv.Itoa(natsPort),
		"--nats-store-dir", filepath.Join(d.dir, "nats"),
		"--leader-elect=false",
		"--agent-service-account", agentNamespace+"/edgedrain-agent",
		"--operator-password-file", d.operatorPasswordFile(),
		"--listen", "127.0.0.1:"+strconv.Itoa(metricsPort),
		"--volume-recheck", "500ms", "--drain-backoff", "1s", "--evict-retry-delay", "500ms",
	)
	if err != nil {
		return err
	}
	// Ready once it serves its metrics (its bus is up by then).
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(metricsPort))
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
}

// startAgent runs node's agent as it would run on the node: its sentinel, state, boot ID and
// override file in a directory of its own; its reboot command only leaves a mark.
func (d *demo) startAgent(_ context.Context, node, bootID string) error {
	dir := filepath.Join(d.dir, node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte(bootID+"\n"), 0o644); err != nil {
		return err
	}
	_, err := d.spawn("agent-"+node, "agent",
		"--node-name", node,
		"--nats-url", d.natsURL,
		"--nats-token-file", filepath.Join(dir, "token"),
		"--state-dir", filepath.Join(dir, "state"),
		"--boot-id-file", filepath.Join(dir, "boot_id"),
		"--reboot-sentinel", filepath.Join(dir, "reboot-required"),
		"--sentinel-interval", "500ms", "--sentinel-jitter", "0s",
		"--reboot-command", "touch "+filepath.Join(dir, "rebooted"),
		"--force-status-file", filepath.Join(dir, "force-status.json"),
		"--socket", filepath.Join(dir, "agent.sock"),
		"--outcome-file", filepath.Join(dir, "command-succeeded"),
		"--listen", "",
	)
	return err
}

// restartAgent simulates the node coming back from its reboot: the agent restarts with a new
// boot ID, the sentinel gone.
func (d *demo) restartAgent(ctx context.Context, node, bootID string) error {
	if p := d.procs["agent-"+node]; p != nil {
		p.stop()
	}
	_ = os.Remove(d.nodePath(node, "reboot-required"))
	return d.startAgent(ctx, node, bootID)
}

func (d *demo) connect() (jetstream.JetStream, func(), error) {
	nc, err := pubsub.Connect(pubsub.ConnectOptions{URLs: []string{d.natsURL}, Name: "edgedrain-demo",
		User: busauth.OperatorUser, PasswordFile: d.operatorPasswordFile()})
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// makeKeys writes a new status signing key and its public half (as the coordinator's Secret and
// everyone's trusted-keys ConfigMap hold them in a cluster) and points the programs at them.
func (d *demo) makeKeys() error {
	private, public, err := nodedrain.GenerateSigningKey()
	if err != nil {
		return err
	}
	signing, trusted := filepath.Join(d.dir, "signing.pem"), filepath.Join(d.dir, "trusted.pem")
	if err := os.WriteFile(signing, private, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(trusted, public, 0o644); err != nil {
		return err
	}
	d.keyEnv = []string{"EDGEDRAIN_SIGNING_KEY=" + signing, "EDGEDRAIN_TRUSTED_KEYS=" + trusted}
	d.say("statuses are signed with a new key (%s): agents act only on statuses it signs", filepath.Base(signing))
	return nil
}
