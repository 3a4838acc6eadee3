package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

const requestIntro = `Usage: agent request reboot|shutdown|update|decommission [--context TEXT] [--socket PATH]

Asks the agent running on this node (over its unix socket) for an operation. The agent publishes a
drain request and runs the operation's command once the drain is COMPLETE; the context text is
published with the request and given to the command as EDGEDRAIN_CONTEXT (e.g. "update v1.2.3").

decommission retires the node for good: its request's context is "decommission" followed by the
--context text ("decommission disk failed"), which asks the coordinator to evict the node's volume
replicas and delete its Node object before COMPLETE; then --decommission-command runs. Another
operation whose context is "decommission" or starts with "decommission " is refused.

Exit status 0: accepted (or the same operation is already pending); 1: refused (another operation
is pending, no command configured, a context declaring a decommission for another operation) or
the agent cannot be reached; 2: usage error.`

const statusIntro = `Usage: agent status [--json] [--socket PATH]

Prints this node's drain status as the agent running on this node sees it: the status it acts on
(from the bus or the override file), the coordinator's message and blockers, and the operation it
holds back, if any.`

// clientFlags adds the flags of a command that asks the running agent: its socket and how long
// to wait for the answer.
func clientFlags(fs *pflag.FlagSet) (socket *string, timeout *time.Duration) {
	socket = fs.String("socket", agent.DefaultSocket, "unix socket of the running agent")
	timeout = fs.Duration("timeout", 10*time.Second, "how long to wait for the agent's answer")
	return socket, timeout
}

func newRequestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "request reboot|shutdown|update|decommission",
		Short: "Ask the agent running on this node for an operation",
		Long:  requestIntro,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cli.Exit(2, fmt.Errorf("want exactly one operation (reboot, shutdown, update or decommission), got %q", args))
			}
			if _, err := agent.ParseOperation(args[0]); err != nil {
				return cli.Exit(2, err)
			}
			return nil
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var ops []string
			for _, op := range agent.Operations {
				ops = append(ops, string(op))
			}
			return ops, cobra.ShellCompDirectiveNoFileComp
		},
	}
	socket, timeout := clientFlags(cmd.Flags())
	opContext := cmd.Flags().String("context", "", "free text published with the request and given to the command (default: the operation)")
	cli.BindEnv(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		op, _ := agent.ParseOperation(args[0])
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		msg, err := agent.Request(ctx, *socket, op, *opContext)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), msg)
		return nil
	}
	return cmd
}

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "status",
		Short:             "Print this node's drain status as the running agent sees it",
		Long:              statusIntro,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	socket, timeout := clientFlags(cmd.Flags())
	asJSON := cmd.Flags().Bool("json", false, "print the agent's full answer as JSON")
	cli.BindEnv(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		st, err := agent.QueryStatus(ctx, *socket)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		printStatus(cmd.OutOrStdout(), st, time.Now())
		return nil
	}
	return cmd
}

// printStatus writes the report for people.
func printStatus(w io.Writer, st agent.StatusReport, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	line := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	line("node", "%s", st.Node)
	status := fmt.Sprintf("%s (%d), from %s", st.StatusName, int(st.Status), st.Source)
	if st.Bus != nil && st.Source == agent.SourceBus && st.Bus.RequestID != "" {
		status += ", for request " + st.Bus.RequestID
		if st.Bus.Attempt > 0 {
			status += fmt.Sprintf(", attempt %d", st.Bus.Attempt)
		}
	}
	line("status", "%s", status)
	if st.Message != "" {
		line("message", "%s", st.Message)
	}
	if st.Bus != nil && st.Source == agent.SourceBus {
		for _, b := range st.Bus.Blockers {
			name := b.Name
			if b.Namespace != "" {
				name = b.Namespace + "/" + b.Name
			}
			line("blocker", "%s %s: %s", b.Kind, name, b.Reason)
		}
	}
	s := st.State
	if s.Phase == agent.PhaseIdle {
		line("operation", "none")
	} else {
		line("operation", "%s, %s (request %s, context %q, asked %s ago)", s.Operation, s.Phase, s.RequestID, s.Context,
			now.Sub(s.RequestedAt).Round(time.Second))
		if !s.RetryAt.IsZero() && s.RetryAt.After(now) {
			line("next", "%s in %s", nextWhat(s.Phase), s.RetryAt.Sub(now).Round(time.Second))
		}
		if s.CommandFailures > 0 {
			line("failures", "%d failed command run(s)", s.CommandFailures)
		}
	}
	if st.Override != nil {
		by := "any operation"
		if st.Override.RequestedBy != 0 {
			by = st.Override.RequestedBy.String()
		}
		line("override", "%s forced for %s", st.Override.Status, by)
	}
	line("bus", "%s", map[bool]string{true: "connected", false: "not connected"}[st.BusConnected])
}

func nextWhat(p agent.Phase) string {
	switch p {
	case agent.PhaseBackoff:
		return "asking again for a drain"
	case agent.PhaseWaitingBoot:
		return "giving up waiting for the node to go down"
	}
	return strings.TrimSpace("running the command again")
}
