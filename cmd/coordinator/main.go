// Command coordinator drains nodes on request: it watches NodeDrainRequests on the NATS bus,
// cordons and drains the node with retries, waits until every volume with data on it is safe,
// publishes NodeDrainStatus at each step and uncordons the node when its request is withdrawn.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // maintenance windows name IANA time zones; an image may lack zoneinfo

	"github.com/spf13/cobra"

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the exit status: 0 success (and --help), 1 a
// failure at run time, 2 a usage error (a bad flag, argument or environment variable).
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	_, err := cli.Execute(ctx, newCommand(run), args, stdout, stderr)
	if msg := cli.Message(err); msg != "" {
		fmt.Fprintln(stderr, "coordinator:", msg)
	}
	return cli.ExitCode(err, 1)
}

// newCommand returns the coordinator's command, which runs run once its flags are valid.
func newCommand(run func(context.Context, *options) error) *cobra.Command {
	var opts *options
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Drains Kubernetes nodes on request from the NATS bus, one active replica per cluster",
		Long:  intro,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Exit(2, fmt.Errorf("unexpected arguments %q (see --help)", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.ApplyEnv(cmd.Flags()); err != nil {
				return cli.Exit(2, err)
			}
			if err := opts.validate(); err != nil {
				return cli.Exit(2, err)
			}
			return run(cmd.Context(), opts)
		},
	}
	opts = registerFlags(cmd.Flags())
	cli.Setup(cmd, nil)
	return cmd
}
