// Command demo shows edgedrain's whole job on a local cluster: a control plane with three
// simulated nodes, Longhorn volumes with replicas across them, a workload with a
// PodDisruptionBudget, the coordinator (with its embedded NATS bus) and one agent per node, all
// real processes. It asks for a reboot of one node and shows each status change, what blocks the
// drain, the pods moving, the reboot command running, the node coming back and being uncordoned,
// then the drain-time metric. It cleans up after itself, also on Ctrl-C. `make demo` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"
)

func main() {
	keep := flag.Bool("keep", false, "when done, keep everything running until Enter or Ctrl-C (default: only on a terminal)")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after this long (the first run builds the cluster binaries: ~10 minutes)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), `Usage: demo [flags]

Runs edgedrain end to end on a local cluster and shows a node's reboot drained to COMPLETE,
its volume data kept safe, and the node uncordoned when it is back. Needs nothing but Go: the
first run builds the cluster's binaries (about 10 minutes) and caches them.

Flags:`)
		flag.PrintDefaults()
	}
	flag.Parse()
	interactive := term.IsTerminal(int(os.Stdin.Fd()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	d := &demo{out: os.Stdout, keep: *keep || interactive}
	err := d.run(ctx)
	d.cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
