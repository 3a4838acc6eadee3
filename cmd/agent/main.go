// Command agent runs on every node: it asks the coordinator, over the NATS bus, to drain its node
// before a reboot, shutdown, OS update or decommission, holds the operation back until the drain is
// COMPLETE, then runs it. It holds no Kubernetes credentials.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

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
  completion SHELL   print the shell completion script for bash, zsh, fish or powershell.

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
	cmd, err := cli.Execute(context.Background(), newRootCmd(args), args, stdout, stderr)
	if msg := cli.Message(err); msg != "" {
		prefix := "agent"
		if cmd != nil && cmd.HasParent() && cmd.Name() != "run" {
			prefix = "agent " + cmd.Name()
		}
		fmt.Fprintln(stderr, prefix+":", msg)
	}
	return cli.ExitCode(err, 1)
}

// newRootCmd returns the agent's command: without a command it runs the agent, as "agent run"
// does. args are the command line, to tell a mistyped command from a stray argument.
func newRootCmd(args []string) *cobra.Command {
	root := newRunCmd("agent")
	root.Args = func(_ *cobra.Command, rest []string) error {
		if len(rest) > 0 && len(args) > 0 && args[0] == rest[0] {
			return cli.Exit(2, fmt.Errorf("unknown command %q: want run, request or status (see agent --help)", rest[0]))
		}
		return noArgs(nil, rest)
	}
	run := newRunCmd("run")
	run.Short = "Run the agent (the default)"
	run.Hidden = true // the same as the root command: one reference page for both
	root.AddCommand(run, newRequestCmd(), newStatusCmd())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := cli.ApplyEnv(cmd.Flags()); err != nil {
			return cli.Exit(2, err)
		}
		return nil
	}
	cli.Setup(root, nil)
	return root
}

// noArgs is the Args of a command that takes no positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.Exit(2, fmt.Errorf("unexpected arguments %q (see --help)", args))
	}
	return nil
}

// newRunCmd returns a command named use that runs the agent.
func newRunCmd(use string) *cobra.Command {
	var opts *options
	cmd := &cobra.Command{
		Use:   use,
		Short: "Drains its node through the coordinator before a reboot, shutdown, OS update or decommission",
		Long:  intro,
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := opts.validate(); err != nil {
				return cli.Exit(2, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, opts)
		},
	}
	opts = registerRunFlags(cmd.Flags())
	return cmd
}
