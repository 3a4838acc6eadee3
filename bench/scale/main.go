// Command scale measures edgedrain at fleet size on the local control plane: N kwok nodes, one
// agent per node, the coordinator as a process, and a rolling maintenance of D of the nodes
// (each asks for an update at once; max-concurrent-drains C at a time). It prints, per fleet
// size side by side: the coordinator's CPU time and memory, the NATS messages per drain (net of
// the fleet's idle traffic), the delay from a status's publication to its arrival at the agent
// (p50, p99), and the time of one admission pass (p50, p99, mean).
//
// The agents are the real agent package, many in this process: each has its own NATS
// connection, bucket handles, status watch (its node's key only) and local socket, as N agent
// processes would; only the Go runtime is shared. Their update command touches a file (it returns
// at once, the node does not reboot), so a drain is: request, cordon, evict (the nodes run no
// pods), volume gate, COMPLETE, command, withdrawal, uncordon, return gate. The coordinator is
// cmd/coordinator built by this program, on a NATS server embedded here whose counters give the
// messages.
//
//	go run ./bench/scale -nodes 100,1000 -drains 100 -concurrency 10
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

type params struct {
	drains, concurrency int
	idle                time.Duration
	verbose             bool
}

func main() {
	var p params
	sizes := flag.String("nodes", "100,1000", "fleet sizes to measure, comma-separated (each at least -drains)")
	flag.IntVar(&p.drains, "drains", 100, "nodes that ask for an update at once in each fleet (the rolling maintenance)")
	flag.IntVar(&p.concurrency, "concurrency", 10, "the coordinator's --max-concurrent-drains")
	flag.DurationVar(&p.idle, "idle", 10*time.Second, "how long the idle fleet's bus traffic is measured (subtracted from the drains')")
	flag.BoolVar(&p.verbose, "v", false, "show the coordinator's and agents' warnings")
	flag.Parse()
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < p.drains || n < 2 {
			fmt.Fprintf(os.Stderr, "scale: bad fleet size %q (want a number ≥ -drains and ≥ 2)\n", s)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if p.drains < 1 || p.concurrency < 1 || p.idle <= 0 {
		fmt.Fprintln(os.Stderr, "scale: want -drains ≥ 1, -concurrency ≥ 1, -idle > 0")
		os.Exit(2)
	}
	if err := run(p, ns); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(p params, sizes []int) error {
	ctx := context.Background()
	bin, err := os.MkdirTemp("", "edgedrain-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	coordBin, err := testenv.BuildGo(bctx, "./cmd/coordinator", bin)
	cancel()
	if err != nil {
		return err
	}
	cluster, stop, err := testenv.StartCluster(ctx)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("fleet scale: %d nodes of each fleet ask for an update at once, max-concurrent-drains %d; one agent per node (package agent, own NATS connection each, in this process); the coordinator a process\n",
		p.drains, p.concurrency)
	var results []result
	for _, n := range sizes {
		f, err := newFleet(ctx, cluster, coordBin, n, p)
		if err != nil {
			return err
		}
		r, err := f.measure(ctx)
		f.close()
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		results = append(results, r)
		fmt.Printf("  %d nodes measured\n", n)
	}
	printResults(results, p)
	return nil
}
