package testenv

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RepoRoot returns the root of the edgedrain checkout that holds the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/edgedrain/edgedrain\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the edgedrain checkout (no go.mod of github.com/edgedrain/edgedrain above the working directory)")
		}
		dir = parent
	}
}

// BuildClusterBinaries runs hack/cluster-bins.sh (with args, e.g. --real-node), which builds the pinned cluster binaries on first
// use (15-40 minutes on 2 cores; progress on stderr) and returns the cache directory holding them.
//
// The build runs under ctx's deadline and, inside a test, under the test binary's -timeout; a
// build one of them ends is said to be ended by it, with how to raise it (WithBuildLimit names
// ctx's), rather than as a bare "signal: killed".
func BuildClusterBinaries(ctx context.Context, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	const what = "build cluster binaries (hack/cluster-bins.sh)"
	start := time.Now()
	limits := buildLimits(ctx, start)
	buildCtx, cancel := ctx, context.CancelFunc(func() {})
	if limits.test != nil {
		buildCtx, cancel = context.WithDeadline(ctx, limits.test.at)
	}
	defer cancel()
	cmd := exec.CommandContext(buildCtx, "bash", append([]string{filepath.Join(root, "hack", "cluster-bins.sh")}, args...)...)
	cmd.Stderr = os.Stderr
	if text := limits.String(start); text != "" {
		// Shown by the script when it starts a build.
		cmd.Env = append(os.Environ(), "EDGEDRAIN_BUILD_LIMIT="+text)
	}
	// Killing bash alone would leave its go build (and that one's compilers) running, holding
	// the output pipe open: end them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", limits.explain(what, ctx, buildCtx, start, err)
	}
	if limits.test == nil && !inTest() {
		noteSetupBuild()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

type buildLimitKey struct{}

type buildLimit struct{ name, raise string }

// WithBuildLimit returns ctx that names its own deadline for BuildClusterBinaries: name says
// which limit it is ("the demo's build limit") and raise how to raise it ("raise it with
// EDGEDRAIN_BUILD_TIMEOUT=3h"). A build that deadline ends is then said to be ended by it.
func WithBuildLimit(ctx context.Context, name, raise string) context.Context {
	return context.WithValue(ctx, buildLimitKey{}, buildLimit{name: name, raise: raise})
}

// prebuild is what keeps a first build out of every limit.
const prebuild = "build them once first, outside any time limit: make cluster-bins (15-40 minutes on 2 cores; cached afterwards)"

// limitsOf are the time limits a build runs under: ctx's deadline and, in a test, the test binary's.
type limitsOf struct {
	ctx  *buildLimit // nil: ctx has no deadline
	at   time.Time   // ctx's deadline
	test *testLimit  // nil: not in a test, or no -timeout
}

type testLimit struct {
	timeout time.Duration // the -test.timeout flag
	at      time.Time     // when the build is ended: a little before the test binary's alarm
}

func buildLimits(ctx context.Context, start time.Time) limitsOf {
	var l limitsOf
	if at, ok := ctx.Deadline(); ok {
		l.at = at
		if named, ok := ctx.Value(buildLimitKey{}).(buildLimit); ok {
			l.ctx = &named
		} else {
			l.ctx = &buildLimit{
				name:  "a context deadline set by its caller (" + callChain() + ")",
				raise: prebuild + ", or give the caller more time",
			}
		}
	}
	if t := testBinaryDeadline(); t != nil && (l.ctx == nil || t.at.Before(l.at)) {
		l.test = t
	}
	return l
}

// String says the limits for the script, which shows it when it starts a build.
func (l limitsOf) String(start time.Time) string {
	var parts []string
	if l.ctx != nil {
		parts = append(parts, fmt.Sprintf("%s, %s from now (%s)", l.ctx.name, ShortDuration(l.at.Sub(start).Round(time.Second)), l.ctx.raise))
	}
	if l.test != nil {
		parts = append(parts, fmt.Sprintf("this test binary's -timeout (%s), about %s from now (%s)", ShortDuration(l.test.timeout),
			ShortDuration(l.test.at.Sub(start).Round(time.Second)), l.test.raise()))
	}
	return strings.Join(parts, "; and ")
}

func (t *testLimit) raise() string {
	return prebuild + ", or raise it: go test -timeout " + ShortDuration(2*t.timeout)
}

// explain is err of the build that started at start, said as what ended it.
func (l limitsOf) explain(what string, ctx, buildCtx context.Context, start time.Time, err error) error {
	took := time.Since(start).Round(time.Second)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && l.ctx != nil:
		err = fmt.Errorf("%s killed after %s by %s; %s", what, took, l.ctx.name, l.ctx.raise)
	case ctx.Err() != nil:
		err = fmt.Errorf("%s stopped after %s: its caller canceled it (%v)", what, took, context.Cause(ctx))
	case buildCtx.Err() != nil && l.test != nil:
		err = fmt.Errorf("%s killed after %s by this test binary's -timeout (%s), just before it would have ended the test run "+
			"with \"panic: test timed out\"; %s", what, took, ShortDuration(l.test.timeout), l.test.raise())
		// Said at once too: the alarm may come before the test gets to print its failure.
		fmt.Fprintln(os.Stderr, "testenv:", err)
	default:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return fmt.Errorf("%s killed by signal %s after %s, from outside: none of this program's time limits "+
					"(the kernel's out-of-memory killer? a cold build needs about 2.5 GB; see dmesg)", what, unix.SignalName(ws.Signal()), took)
			}
		}
		return fmt.Errorf("%s: %w (its output is above)", what, err)
	}
	return err
}

// testBinaryDeadline is, in a test of a test binary run with -test.timeout, a little before
// the test binary's alarm ends it. The alarm starts with the tests (m.Run), after TestMain's
// setup, which may itself have built the cluster binaries: so it is counted from the end of the
// last build outside a test, else from the process's start, never later than the real one.
func testBinaryDeadline() *testLimit {
	if !testing.Testing() || !inTest() {
		return nil
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return nil
	}
	getter, ok := f.Value.(flag.Getter)
	if !ok {
		return nil
	}
	timeout, ok := getter.Get().(time.Duration)
	if !ok || timeout <= 0 {
		return nil
	}
	setupBuild.Lock()
	from := setupBuild.end
	setupBuild.Unlock()
	margin := min(30*time.Second, timeout/20)
	return &testLimit{timeout: timeout, at: from.Add(timeout - margin)}
}

// setupBuild.end is when the last build outside a test (TestMain's) ended, or this process started.
var setupBuild = struct {
	sync.Mutex
	end time.Time
}{end: time.Now()}

func noteSetupBuild() {
	setupBuild.Lock()
	setupBuild.end = time.Now()
	setupBuild.Unlock()
}

// inTest says whether the calling goroutine runs a test (testing.tRunner below it).
func inTest() bool {
	pcs := make([]uintptr, 128)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if f.Function == "testing.tRunner" {
			return true
		}
		if !more {
			return false
		}
	}
}

// callChain names the functions that led to the build, outermost first (who set the deadline is
// among them).
func callChain() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	var names []string
	for {
		f, more := frames.Next()
		name := strings.TrimPrefix(f.Function, "github.com/edgedrain/edgedrain/")
		if name != "" && name != "main.main" && !strings.HasPrefix(name, "runtime.") && !strings.HasPrefix(name, "testing.") &&
			!strings.Contains(name, "BuildClusterBinaries") {
			names = append(names, name)
		}
		if !more {
			break
		}
	}
	slices.Reverse(names)
	if len(names) > 5 {
		names = append(names[:4], "…", names[len(names)-1])
	}
	return strings.Join(names, " → ")
}

// killGroup kills p's process group, which BuildClusterBinaries made p lead: bash, the go build
// it runs and that one's compilers and linker, including any started after the kill was decided.
func killGroup(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		return p.Kill()
	}
	return nil
}

// ShortDuration is d as one writes it: 3h, 1h30m, 90s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
