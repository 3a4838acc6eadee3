package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Environment variables the operation commands get, besides the agent's own environment
// (without its EDGEDRAIN_* settings, which may hold credentials).
const (
	// EnvOperation holds the operation: reboot, shutdown, update or decommission.
	EnvOperation = "EDGEDRAIN_OPERATION"
	// EnvContext holds the request's context ("update v1.2.3", "decommission disk failed").
	EnvContext = "EDGEDRAIN_CONTEXT"
	// EnvRequestID holds the ID of the request the drain answered.
	EnvRequestID = "EDGEDRAIN_REQUEST_ID"
	// EnvNode holds the node name.
	EnvNode = "EDGEDRAIN_NODE"
	// EnvAttempt numbers the runs of the command for this operation from 1.
	EnvAttempt = "EDGEDRAIN_ATTEMPT"
)

// maxOutput bounds how much of a command's output is kept for the log.
const maxOutput = 4 << 10

// commandEnv returns the environment of an operation command.
func commandEnv(node string, a RunCommand) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EDGEDRAIN_") {
			env = append(env, kv)
		}
	}
	return append(env,
		EnvOperation+"="+string(a.Operation),
		EnvContext+"="+a.Context,
		EnvRequestID+"="+a.RequestID,
		EnvNode+"="+node,
		EnvAttempt+"="+strconv.Itoa(a.Attempt))
}

// logindTimeout bounds a call to logind, which answers as soon as systemd has queued the job:
// one that has not answered in this long is counted as failed and retried.
const logindTimeout = time.Minute

// runOperation runs an operation's command: a call to logind (LogindReboot, LogindPowerOff),
// bounded by the command timeout and at most logindTimeout, or a shell command, bounded by the
// command timeout.
func (a *Agent) runOperation(command string, act RunCommand) (output string, err error) {
	if !IsLogindCommand(command) {
		return runCommand(command, a.cfg.Node, act, a.cfg.CommandTimeout)
	}
	timeout := a.cfg.CommandTimeout
	if timeout <= 0 || timeout > logindTimeout {
		timeout = logindTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return "", runLogind(ctx, a.cfg.SystemBus, command)
}

// runCommand runs command with `sh -c` for the operation a and waits for it, at most timeout
// (zero: no limit). The command runs in its own process group: a signal to the agent does not
// reach it, and a timeout kills the whole group. The error says how it failed, with the tail
// of its output; output is the tail of its combined stdout and stderr.
func runCommand(command, node string, a RunCommand, timeout time.Duration) (output string, err error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = commandEnv(node, a)
	cmd.Dir = "/"
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	output = strings.TrimSpace(out.String())
	switch {
	case err == nil:
		return output, nil
	case ctx.Err() != nil:
		err = fmt.Errorf("%s command timed out after %s", a.Operation, timeout)
	default:
		err = fmt.Errorf("%s command: %w", a.Operation, err)
	}
	if output != "" {
		err = fmt.Errorf("%w; output: %s", err, truncateTail(output, 512))
	}
	return output, err
}

// tailBuffer keeps the last maxOutput bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write appends p, dropping the oldest bytes beyond maxOutput.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - maxOutput; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept, as valid UTF-8.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "")
}

// truncateTail keeps the last n bytes of s.
func truncateTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + strings.ToValidUTF8(s[len(s)-n:], "")
}
