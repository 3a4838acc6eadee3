// Command agent runs on every node: it asks the coordinator, over the NATS bus, to drain its node
// before a reboot, shutdown or OS update, holds the operation back until the drain is COMPLETE, then
// runs it. It holds no Kubernetes credentials.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/edgedrain/edgedrain/internal/cli"
)

const intro = `Usage: agent [flags]

The edgedrain agent (a DaemonSet, one per node) notices that its node wants a reboot, shutdown or
OS update (a sentinel file such as /var/run/reboot-required, or "agent request reboot"), publishes
a drain request for the node on the NATS bus, holds the operation back while the coordinator
drains the node, and runs it once the node's status is COMPLETE. After the reboot it withdraws the
request so the coordinator uncordons the node. It speaks only NATS, never to Kubernetes.`

func main() {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, intro)
	err := cli.Parse(fs, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "agent: the agent's logic is not built yet (see the agent issue); only --help works")
	os.Exit(1)
}
