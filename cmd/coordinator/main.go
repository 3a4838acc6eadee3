// Command coordinator drains nodes on request: it watches NodeDrainRequests on the NATS bus,
// cordons and drains the node with retries, waits until every volume with data on it is safe,
// publishes NodeDrainStatus at each step and uncordons the node when its request is withdrawn.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/edgedrain/edgedrain/internal/cli"
)

const intro = `Usage: coordinator [flags]

The edgedrain coordinator (one active replica per cluster, Lease leader election) watches drain
requests on the NATS bus (bucket nodedrain-requests), cordons and drains each requested node with
retries, waits until every volume with data on the node is safe elsewhere, and publishes every
step to the bucket nodedrain-status, where the node's agent waits for COMPLETE before it reboots,
shuts down or updates the node. When the agent withdraws its request the coordinator uncordons the
node (only if it cordoned it) and returns it to NOTREQUESTED.`

func main() {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, intro)
	err := cli.Parse(fs, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "coordinator: the drain engine is not built yet (see the coordinator issue); only --help works")
	os.Exit(1)
}
