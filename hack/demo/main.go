// Command demo shows edgedrain's whole job on a local cluster: a control plane with three
// simulated nodes, Longhorn volumes with replicas across them, a workload with a
// PodDisruptionBudget, the coordinator (with its embedded NATS bus) and one agent per node, all
// real processes. It asks for a reboot of one node and shows each status change, what blocks the
// drain, the pods moving, the reboot command running, the node coming back and being uncordoned,
// then the drain-time metric. It cleans up after itself, also on Ctrl-C. `make demo` runs it.
//
// It has two time limits, one after the other: the build of what it runs (the local cluster's
// binaries, built once into ~/.cache/edgedrain: 15-40 minutes on 2 cores the first time), then
// the demo itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The environment variables that set the limits' defaults (`make demo` passes them on).
const (
	demoTimeoutEnv  = "EDGEDRAIN_DEMO_TIMEOUT"
	buildTimeoutEnv = "EDGEDRAIN_BUILD_TIMEOUT"
)

func main() {
	demoDefault, err := envDuration(demoTimeoutEnv, 30*time.Minute)
	if err != nil {
		fail(err)
	}
	buildDefault, err := envDuration(buildTimeoutEnv, 90*time.Minute)
	if err != nil {
		fail(err)
	}
	keep := flag.Bool("keep", false, "when done, keep everything running until Enter or Ctrl-C (default: only on a terminal)")
	timeout := flag.Duration("timeout", demoDefault, "give up on the demo after this long, counted from when its binaries are built (default from "+demoTimeoutEnv+")")
	buildTimeout := flag.Duration("build-timeout", buildDefault, "give up on building the binaries after this long: the first run builds the cluster's, 15-40 minutes on 2 cores (default from "+buildTimeoutEnv+")")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), `Usage: demo [flags]

Runs edgedrain end to end on a local cluster and shows a node's reboot drained to COMPLETE,
its volume data kept safe, and the node uncordoned when it is back. Needs nothing but Go: the
first run builds the cluster's binaries (15-40 minutes on 2 cores) and caches them; the demo's
own time limit starts after that build.

Environment: `+demoTimeoutEnv+` (the demo's limit, default 30m) and `+buildTimeoutEnv+`
(the build's, default 90m), e.g. `+buildTimeoutEnv+`=2h make demo.

Flags:`)
		flag.PrintDefaults()
	}
	flag.Parse()
	interactive := term.IsTerminal(int(os.Stdin.Fd()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{out: os.Stdout, keep: *keep || interactive, buildTimeout: *buildTimeout, timeout: *timeout}
	err = run(ctx, d, *buildTimeout, *timeout)
	// A demo that failed once its programs ran keeps their logs.
	keepLogs := err != nil && len(d.procs) > 0
	d.cleanup(!keepLogs)
	if err != nil {
		if keepLogs {
			fmt.Fprintln(os.Stderr, "demo: the programs' logs are kept in", d.dir)
		}
		fail(err)
	}
}

// run builds under the build limit, then runs the demo under its own limit, which starts only then.
func run(ctx context.Context, d *demo, buildTimeout, timeout time.Duration) error {
	buildCtx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	buildCtx = testenv.WithBuildLimit(buildCtx, "the demo's build limit",
		fmt.Sprintf("raise it with %s=%s", buildTimeoutEnv, testenv.ShortDuration(2*buildTimeout)))
	if err := d.build(buildCtx); err != nil {
		if errors.Is(buildCtx.Err(), context.DeadlineExceeded) && !strings.Contains(err.Error(), buildTimeoutEnv) {
			err = fmt.Errorf("%w (ended by the demo's build limit, %s; raise it with %s=%s)", err,
				testenv.ShortDuration(buildTimeout), buildTimeoutEnv, testenv.ShortDuration(2*buildTimeout))
		}
		return err
	}
	cancel()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raise := fmt.Sprintf("raise it with %s=%s", demoTimeoutEnv, testenv.ShortDuration(2*timeout))
	runCtx = testenv.WithBuildLimit(runCtx, "the demo's limit", raise)
	err := d.run(runCtx)
	if err != nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) && !strings.Contains(err.Error(), demoTimeoutEnv) {
		err = fmt.Errorf("%w (ended by the demo's limit, %s from when its binaries were built; %s)", err, testenv.ShortDuration(timeout), raise)
	}
	return err
}

// envDuration is the duration in the environment variable name, or def when it is unset.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 45m or 2h", name, v)
	}
	return d, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}
