// Command drain measures how long draining one node takes, on the local control plane, three
// ways on identical setups in the same run: edgedrain (request published on the bus to COMPLETE),
// `kubectl drain` of the pinned release, and a bare probe that cordons, evicts every pod at once
// with an unthrottled client and watches until they are gone. It prints one line per size with
// the three times and edgedrain's ratio to each.
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
	fmt.Printf("%6s  %12s  %12s  %12s  %14s  %14s\n", "pods", "edgedrain", "kubectl", "bare probe", "vs kubectl", "vs bare probe")
	for _, n := range counts {
		var times [3]time.Duration
		for i, method := range []func(context.Context, *setup) error{b.edgedrain, b.kubectl, b.bare} {
			s, err := b.prepare(ctx, n)
			if err != nil {
				return err
			}
			start := time.Now()
			err = method(ctx, s)
			times[i] = time.Since(start)
			s.cleanup()
			if err != nil {
				return err
			}
		}
		fmt.Printf("%6d  %12s  %12s  %12s  %13.2fx  %13.2fx\n", n,
			times[0].Round(10*time.Millisecond), times[1].Round(10*time.Millisecond), times[2].Round(10*time.Millisecond),
			times[0].Seconds()/times[1].Seconds(), times[0].Seconds()/times[2].Seconds())
	}
	return nil
}
