// Command rolling measures a rolling maintenance day on the local control plane: every node
// needs a reboot at once (the kernel-update day), edgedrain drains them max-concurrent at a
// time, each node goes down for a simulated reboot of R, comes back and holds its admission slot
// until its Longhorn replicas have rebuilt (S) and it is healthy again (the return gate). It
// prints, for each concurrency, the wall time from the first request to the last node idle
// against the lower bound Σ(drain + R + resync) / concurrency, with where the difference went,
// and what kured's --period would make of the same day (a model, not a measurement).
//
// Everything that decides is production code: the coordinator's Engine with the volume gate on
// Longhorn objects, and one agent per node (package agent, in this process) that is asked for a
// reboot, runs its reboot command, is stopped while its node is down and started again with a
// new boot ID. The harness plays the machines: kwok's Node goes NotReady for R, the node's
// replicas stop, then rebuild for S once it is back.
//
//	go run ./bench/rolling -nodes 10 -reboot 5s -resync 3s -concurrency 1,2
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
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// params are one measurement's settings.
type params struct {
	nodes, podsPerNode, concurrency int
	reboot, resync, termination     time.Duration
	volumeRecheck                   time.Duration
	verbose                         bool
}

func main() {
	var p params
	flag.IntVar(&p.nodes, "nodes", 10, "simulated nodes, every one needing a reboot (at least 3: each volume has 3 replicas)")
	flag.DurationVar(&p.reboot, "reboot", 5*time.Second, "how long a node is down for its reboot (R)")
	flag.DurationVar(&p.resync, "resync", 3*time.Second, "how long a node's Longhorn replicas take to rebuild once it is back (S)")
	flag.IntVar(&p.podsPerNode, "pods-per-node", 3, "Deployment pods per node (one PodDisruptionBudget, maxUnavailable 1)")
	flag.DurationVar(&p.termination, "termination", time.Second, "pod termination grace period")
	flag.DurationVar(&p.volumeRecheck, "volume-recheck", nodedrain.DefaultLimits().GateRecheck,
		"the coordinator's --volume-recheck: how often a blocking volume gate, and the return gate, is asked again")
	levels := flag.String("concurrency", "1,2", "max-concurrent-drains values to measure, comma-separated")
	kuredPeriod := flag.Duration("kured-period", time.Hour, "kured's --period for the comparison (its default)")
	flag.BoolVar(&p.verbose, "v", false, "log the coordinator's and agents' warnings and each node's timeline")
	flag.Parse()
	var concurrencies []int
	for _, s := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "rolling: bad concurrency %q\n", s)
			os.Exit(2)
		}
		concurrencies = append(concurrencies, n)
	}
	if p.nodes < 3 || p.volumeRecheck <= 0 || p.reboot <= 0 || p.resync <= 0 || p.podsPerNode < 1 || p.termination < time.Second {
		fmt.Fprintln(os.Stderr, "rolling: want -nodes ≥ 3, -volume-recheck > 0, -reboot and -resync > 0, -pods-per-node ≥ 1, -termination ≥ 1s")
		os.Exit(2)
	}
	if err := run(p, concurrencies, *kuredPeriod); err != nil {
		fmt.Fprintln(os.Stderr, "rolling:", err)
		os.Exit(1)
	}
}

func run(p params, concurrencies []int, kuredPeriod time.Duration) error {
	ctx := context.Background()
	cluster, stop, err := testenv.StartCluster(ctx)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("rolling maintenance: %d nodes all needing a reboot, reboot R = %s, replica rebuild S = %s, %d pods per node\n",
		p.nodes, p.reboot, p.resync, p.podsPerNode)
	fmt.Printf("coordinator: coordinator.Engine with its default policy (return gate on, --volume-recheck %s) and the Longhorn volume gate;\n", p.volumeRecheck)
	fmt.Println("agents: package agent, one per node in this process, asked through its local socket, on an embedded NATS server without bus authentication")
	var results []*result
	for i, c := range concurrencies {
		p.concurrency = c
		d, err := newDay(ctx, cluster, p, fmt.Sprintf("roll%d", i+1))
		if err != nil {
			return err
		}
		r, err := d.run(ctx)
		d.cleanup()
		if err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		results = append(results, r)
		if p.verbose {
			r.printTimeline(os.Stdout)
		}
	}
	fmt.Println()
	printSummary(os.Stdout, results)
	fmt.Println()
	printBreakdown(os.Stdout, results)
	fmt.Println()
	printKured(os.Stdout, results, kuredPeriod)
	return nil
}
