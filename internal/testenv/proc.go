package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildGo builds the edgedrain package pkg (e.g. "./cmd/agent") into dir with `go build` and
// returns the binary's path. It runs from the repository root with the caller's environment
// (GOTOOLCHAIN, GOFLAGS).
func BuildGo(ctx context.Context, pkg, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// MainWith is Main with a setup run before the tests (also under -short), such as building a
// binary; its cleanup runs after them. A setup error fails the package.
func MainWith(m *testing.M, c **Cluster, setup func() (cleanup func(), err error)) {
	flag.Parse()
	cleanup, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv: setup:", err)
		os.Exit(1)
	}
	code := func() int {
		defer cleanup()
		if testing.Short() {
			return m.Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		cluster, stop, err := StartCluster(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv: start local cluster:", err)
			return 1
		}
		defer stop()
		*c = cluster
		return m.Run()
	}()
	os.Exit(code)
}

// Proc is a program a test runs as a separate process, its output in a log file. It is killed
// when the test ends, and with the test binary if that dies first.
type Proc struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}

	mu  sync.Mutex
	err error
}

// StartProc starts path with args and the extra environment variables env (added to the test's
// own environment and the tests' status keys, KeyEnv), logging to <dir>/<name>.log.
func StartProc(t testing.TB, dir, name, path string, env []string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	cmd := exec.Command(path, args...)
	// The tests' key files come first: a test's own env (a rotation) wins.
	cmd.Env = append(append(os.Environ(), KeyEnv()...), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{t: t, name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() { p.Kill() })
	return p
}

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill ends the process at once (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to timeout for the process to end and returns its exit code; it fails the test
// if the process is still running then.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %s\n%s", p.name, timeout, p.Tail(30))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// Log returns everything the process wrote so far.
func (p *Proc) Log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// Tail returns the last n lines of the process's output, for failure messages.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- last lines of " + p.logPath + " ---\n" + strings.Join(lines, "\n")
}

// MainWithBinary is Main for a package that runs the program pkg (e.g. "./cmd/agent") as a
// process: it builds it once into a temporary directory and sets *bin to its path.
func MainWithBinary(m *testing.M, c **Cluster, pkg string, bin *string) {
	MainWith(m, c, func() (func(), error) {
		dir, err := os.MkdirTemp("", "edgedrain-bin-")
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		*bin, err = BuildGo(ctx, pkg, dir)
		return func() { _ = os.RemoveAll(dir) }, err
	})
}
