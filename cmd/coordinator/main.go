// Command coordinator drains nodes on request: it watches NodeDrainRequests on the NATS bus,
// cordons and drains the node with retries, waits until every volume with data on it is safe,
// publishes NodeDrainStatus at each step and uncordons the node when its request is withdrawn.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // maintenance windows name IANA time zones; an image may lack zoneinfo

	"github.com/edgedrain/edgedrain/internal/cli"
)

const intro = `Usage: coordinator [flags]

The edgedrain coordinator (one active replica per cluster, Lease leader election) watches drain
requests on the NATS bus (bucket nodedrain-requests), cordons and drains each requested node with
retries, waits until every volume with data on the node is safe elsewhere, and publishes every
step to the bucket nodedrain-status, where the node's agent waits for COMPLETE before it reboots,
shuts down or updates the node. When the agent withdraws its request the coordinator uncordons the
node (only if it cordoned it) and returns it to NOTREQUESTED.

Bus: --nats-url points at an existing NATS cluster (production; use --bucket-replicas 3), or
--nats-embedded runs a NATS server with JetStream inside this process, listening on --nats-listen
for the agents (single replica only: each replica would have its own bus).

Maintenance policy: a ConfigMap (--policy-configmap, key policy.yaml), watched, says when drains
may start (windows per requester), what blocks them (pods matching a selector, Prometheus alerts
and queries; failing closed) and in what order (priorities, failure domains), e.g.

  windows:
    UPDATE: {days: [Sat, Sun], start: "01:00", end: "05:00", timeZone: Europe/Berlin}
  blockers:
    podSelector: app=critical-batch
    prometheus: {url: "http://prometheus.monitoring:9090", alerts: {exclude: "^Watchdog$"}}
  order:
    failureDomainLabel: topology.kubernetes.io/zone

Before cordoning it predicts what would block (--preflight); after a node's operation it keeps
the node's admission slot until the node is healthy again (--return-gate-timeout); a COMPLETE
node that never returns frees its slot (--stale-holder-timeout).

SIGTERM stops the coordinator at once without undoing anything: drains under way are resumed by
the next active replica from the bus and the cluster.`

func main() {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	opts := registerFlags(fs)
	fs.Usage = cli.Usage(fs, intro)
	err := cli.Parse(fs, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if err == nil {
		err = opts.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}
