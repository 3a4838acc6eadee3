// Command drain measures how long draining one node takes, on the local control plane, four
// ways on identical setups in the same run: edgedrain (request published by the node's
// authenticated agent on the bus to COMPLETE), edgedrain on an open bus (as before bus
// authentication), `kubectl drain` of the pinned release, and a bare probe that cordons, evicts
// every pod at once with an unthrottled client and watches until they are gone. It prints one
// line per size with the four times and edgedrain's ratio to each other.
//
//	go run ./bench/drain -pods 100,1000 -termination 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

func main() {
	sizes := flag.String("pods", "100,1000", "pod counts to measure, comma-separated")
	termination := flag.Duration("termination", 2*time.Second, "how long each pod takes to terminate (its grace period)")
	nodes := flag.Int("nodes", 3, "simulated nodes (one is drained)")
	flag.Parse()
	var counts []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad pod count %q\n", s)
			os.Exit(2)
		}
		counts = append(counts, n)
	}
	if err := run(counts, *termination, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(counts []int, termination time.Duration, nodes int) error {
	ctx := context.Background()
	cluster, stop, err := testenv.StartCluster(ctx)
	if err != nil {
		return err
	}
	defer stop()
	b := &bench{c: cluster, termination: termination, nodes: nodes}
	fmt.Printf("drain of one node holding N pods, %d simulated nodes, pod termination %s\n", nodes, termination)
	fmt.Printf("%6s  %12s  %12s  %12s  %12s  %14s  %14s  %14s\n", "pods", "edgedrain", "open bus", "kubectl", "bare probe",
		"vs open bus", "vs kubectl", "vs bare probe")
	secured := func(ctx context.Context, s *setup, start func()) error { return b.edgedrain(ctx, s, true, start) }
	open := func(ctx context.Context, s *setup, start func()) error { return b.edgedrain(ctx, s, false, start) }
	kubectl := func(ctx context.Context, s *setup, start func()) error { start(); return b.kubectl(ctx, s) }
	bare := func(ctx context.Context, s *setup, start func()) error { start(); return b.bare(ctx, s) }
	for _, n := range counts {
		var times [4]time.Duration
		for i, method := range []func(context.Context, *setup, func()) error{secured, open, kubectl, bare} {
			s, err := b.prepare(ctx, n)
			if err != nil {
				return err
			}
			// Each method starts the clock once its own preparation is done (edgedrain: the
			// agent's pod and token made, before the bus and the coordinator start).
			var start time.Time
			err = method(ctx, s, func() { start = time.Now() })
			times[i] = time.Since(start)
			s.cleanup()
			if err != nil {
				return err
			}
		}
		r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
		fmt.Printf("%6d  %12s  %12s  %12s  %12s  %13.2fx  %13.2fx  %13.2fx\n", n, r(times[0]), r(times[1]), r(times[2]), r(times[3]),
			times[0].Seconds()/times[1].Seconds(), times[0].Seconds()/times[2].Seconds(), times[0].Seconds()/times[3].Seconds())
	}
	return nil
}
