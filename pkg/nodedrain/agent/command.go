package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/safefile"
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

// Shell runs the operations' shell commands (edgedrain's own image has none: there the logind
// commands are the way).
const Shell = "/bin/sh"

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

// logindTimeout bounds a call to logind, which answers as soon as systemd has queued the job.
const logindTimeout = time.Minute

// runOperation runs an operation's command: a call to logind (LogindReboot, LogindPowerOff),
// bounded by the command timeout and at most logindTimeout, or a shell command, bounded by the
// command timeout. A logind call for an operation that takes the node down and that got no
// answer, or that logind answers with a shutdown already in progress, counts as done: the node
// then has the reboot timeout to go down. It runs off the agent's loop: it logs to entry, made
// on the loop, and reads only a.cfg.
func (a *Agent) runOperation(command string, act RunCommand, entry *logrus.Entry) (output string, err error) {
	if !IsLogindCommand(command) {
		return runCommand(command, a.cfg.Node, act, a.cfg.CommandTimeout, a.cfg.OutcomeFile)
	}
	timeout := a.cfg.CommandTimeout
	if timeout <= 0 || timeout > logindTimeout {
		timeout = logindTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = runLogind(ctx, a.cfg.SystemBus, command)
	if (errors.Is(err, errNoAnswer) || errors.Is(err, errInProgress)) && act.Operation.goesDown(a.cfg.Limits) {
		// Calling again could take the node down twice; waiting for it to go down is the
		// safe answer, and if it stays up past the reboot timeout the drain is confirmed
		// again and the call made again.
		entry.WithError(err).Warnf("treating the %s as under way: waiting for the node to go down, as after a command returns; if it is still up after %s the %s is asked for again",
			act.Operation, a.cfg.Limits.RebootTimeout, act.Operation)
		return err.Error() + "; treated as under way", nil
	}
	return "", err
}

// recordSuccess runs the command ($1) with `sh -c` and, when it succeeds, writes its request ID
// into the outcome file ($2); its exit status is the command's.
const recordSuccess = `"$0" -c "$1" || exit; printf '%s\n' "$` + EnvRequestID + `" > "$2"; exit 0`

// runCommand runs command with `sh -c` for the operation a and waits for it, at most timeout
// (zero: no limit). The command runs in its own process group: a signal to the agent does not
// reach it, and a timeout kills the whole group. The error says how it failed, with the tail
// of its output; output is the tail of its combined stdout and stderr.
//
// With an outcome file, the command's own shell writes the request ID there once the command
// succeeded, before the agent hears of it: an agent paused or killed between the command's exit
// and the state file's record of it, or whose disk refuses that record, learns at its restart
// that the command ran (ReadOutcome), and does not run it a second time.
func runCommand(command, node string, a RunCommand, timeout time.Duration, outcome string) (output string, err error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, Shell, "-c", command)
	if outcome != "" {
		cmd = exec.CommandContext(ctx, Shell, "-c", recordSuccess, Shell, command, outcome)
	}
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
	case errors.Is(err, exec.ErrWaitDelay):
		// It exited 0, not cancelled; a process it left behind holds its output open. It
		// succeeded (its shell recorded so): counted a failure, it would run again.
		return strings.TrimSpace(output + "\n(a process the command left running still held its output; not waited for)"), nil
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

// ReadOutcome returns the request ID the outcome file names ("" when there is none, or it
// cannot be read): the last command that succeeded, as its shell recorded it (runCommand).
// Whatever sits at the path cannot block or flood the agent's start (safefile: a FIFO or a
// device is refused, the read bounded).
func ReadOutcome(path string) string {
	if path == "" {
		return ""
	}
	b, err := safefile.ReadFile(path, maxOutcomeSize)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// checkOutcomePath refuses an outcome path where something other than a regular file sits: the
// command's shell writes it with a redirect, which would wait for good on a FIFO and write
// through a symlink wherever it points.
func checkOutcomePath(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("outcome file: %w", err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("outcome file %s is a %s, not a regular file: remove it", path, fi.Mode().Type())
	}
	return nil
}

// maxOutcomeSize bounds the outcome file: one request ID (at most a few hundred bytes) and a newline.
const maxOutcomeSize = 4096

// truncateTail keeps the last n bytes of s.
func truncateTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + strings.ToValidUTF8(s[len(s)-n:], "")
}
