// Command agent runs on every node: it asks the coordinator, over the NATS bus, to drain its node
// before a reboot, shutdown, OS update or decommission, holds the operation back until the drain is
// COMPLETE, then runs it. It holds no Kubernetes credentials.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/edgedrain/edgedrain/internal/cli"
)

const intro = `Usage: agent [run] [flags]
       agent request reboot|shutdown|update|decommission [--context TEXT] [--socket PATH]
       agent status [--json] [--socket PATH]

The edgedrain agent (a DaemonSet, one per node) notices that its node wants a reboot, shutdown, OS
update or decommission, publishes a drain request for the node on the NATS bus (bucket
nodedrain-requests, key = node name), holds the operation back while the coordinator drains the
node, and runs the operation's command only once the node's status (bucket nodedrain-status) is
COMPLETE for that very request. It speaks only NATS, never to Kubernetes, and holds no Kubernetes credentials.

Commands:
  run (the default)  run the agent.
  request OP         ask the running agent (over --socket) for a reboot, shutdown, update or
                     decommission; the --context text is published with the request and given to
                     the command.
  status             print this node's drain status as the running agent sees it.

Triggers: a sentinel file per operation (--reboot-sentinel, --shutdown-sentinel, --update-sentinel,
--decommission-sentinel), checked every --sentinel-interval plus random jitter; and "agent request".
One operation at a time: a request for another operation while one is pending is refused.

What the agent does for each status of its node:
  UNKNOWN (nothing seen yet)          waits
  NOTSUPPORTED (e.g. a single node)   runs the operation at once
  NOTREQUESTED                        publishes its request and defers the operation
  REQUESTED, STARTING, CORDONED,
  DRAINRETRYING                       keeps the operation deferred
  COMPLETE for its current request    runs the operation (a COMPLETE for an older request never does)
  FAILEDCORDON, FAILEDDRAIN           withdraws the request, keeps the operation deferred and asks
                                      again after --drain-retry-backoff (doubling)

A failed command (non-zero exit, --command-timeout) is logged, counted and run again after
--command-retry-backoff (doubling), never dropped. After an update command succeeds the request is
withdrawn at once. A reboot or shutdown is over when the node is back with a new boot ID
(--boot-id-file): the agent then withdraws its request, so the coordinator uncordons the node. If the
node is still up --reboot-timeout after the command returned, the command counts as failed and runs
again; the node stays drained meanwhile. A sentinel whose operation is done does not ask again until
it is rewritten.

A decommission retires the node for good (off unless --decommission-command is set). Its request's
context is "decommission [TEXT]"; the coordinator drains the node, evicts its volume replicas and
deletes its Node object before COMPLETE. The agent then runs --decommission-command (e.g. stop the
kubelet and power off) and, once it returns success, withdraws its request: the coordinator removes
the node's keys from the bus (by itself after a linger time if the machine went off first). A
reboot, shutdown or update whose context is "decommission" or starts with "decommission " is refused.

The deferred operation lives in a state file under --state-dir and survives agent restarts; an
unreadable state file is moved aside (the agent starts idle and withdraws any request).

--force-status-file (e.g. {"Status":9,"RequestedBy":2}; numbers or names) replaces the bus status
for this node within a second of being written, for the operation whose requester it names (any, if
none): COMPLETE runs the operation and is removed once acted on; other statuses stay in force until
the file is removed. An invalid file is logged, counted (edgedrain_agent_override_errors_total) and
changes nothing.

SIGTERM stops the agent without running or stopping any command; the state file keeps the operation.
Metrics on --listen: /metrics (edgedrain_agent_*), /healthz, /readyz (connected to NATS, and the bus buckets answered the last check).`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the command line args and returns the exit code: 0 success (and --help), 1 a
// failure at run time, 2 a usage error.
func realMain(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runMain(args, stderr)
	case "request":
		return requestMain(args, stdout, stderr)
	case "status":
		return statusMain(args, stdout, stderr)
	case "help":
		return runMain([]string{"--help"}, stderr)
	}
	fmt.Fprintf(stderr, "agent: unknown command %q: want run, request or status (see agent --help)\n", cmd)
	return 2
}

func runMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := registerRunFlags(fs)
	fs.Usage = cli.Usage(fs, intro)
	err := cli.Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if err == nil {
		err = opts.validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "agent:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(stderr, "agent:", err)
		return 1
	}
	return 0
}
