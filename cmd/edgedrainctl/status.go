package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

const statusIntro = `Usage: edgedrainctl status [-o table|json] [--watch] [--js-domain SITE,...]

Prints every node's drain status: status, requester, attempt, age, message, and what blocks the
drain (pods that refuse eviction, volumes not yet safe), read from the bus (buckets
nodedrain-status and nodedrain-requests). -o json prints the same as JSON.

--watch draws the table again, in place, whenever a status or request changes, until
interrupted (-o json: one array per change); --timeout bounds only the connection and the first
table.

--js-domain reads, through a hub NATS server with a leaf node per site, the sites' buckets (each
site's JetStream domain), with one SITE column; a site that does not answer is named on stderr
and the exit status is 1, the others are still shown.

Exit status: 0 done, 1 the bus could not be read (or a site did not answer), or bad arguments.`

const withdrawIntro = `Usage: edgedrainctl withdraw NODE

Deletes NODE's drain request, as its agent does when the node is back: the coordinator cancels a
drain under way, uncordons the node if it cordoned it, and returns it to NOTREQUESTED. For a node
that will not come back to withdraw by itself.

Exit status: 0 done, 1 failed or bad arguments.`

func newStatusCmd(g *global) *cobra.Command {
	var format, domains string
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print every node's drain status, read from the bus",
		Long:  statusIntro,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("status: unexpected arguments %q", args)
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.bounded(cmd.Context())
			defer cancel()
			return status(ctx, cmd.Context(), g.nats, format, watch, domains, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table or json")
	cmd.Flags().BoolVar(&watch, "watch", false, "draw the table again, in place, whenever a status or request changes, until interrupted")
	cmd.Flags().StringVar(&domains, "js-domain", "", "JetStream domains of the sites to show, comma-separated, through a hub with a leaf node per site; empty: this bus")
	mustComplete(cmd, "output", "table", "json")
	// A mistake in status's flags has always been a failure (1), not a usage error.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("status: %w", err) })
	return cmd
}

func newWithdrawCmd(g *global) *cobra.Command {
	return &cobra.Command{
		Use:   "withdraw NODE",
		Short: "Delete a node's drain request, as its agent does when the node is back",
		Long:  withdrawIntro,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("withdraw: want exactly one NODE")
			}
			return nil
		},
		ValidArgsFunction: completeNodes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.bounded(cmd.Context())
			defer cancel()
			return withdraw(ctx, g.nats, args[0], cmd.OutOrStdout())
		},
	}
}

// mustComplete completes flag's values from values.
func mustComplete(cmd *cobra.Command, flag string, values ...string) {
	if err := cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)); err != nil {
		panic(err)
	}
}

func status(ctx, life context.Context, nats cli.NATSFlags, format string, watch bool, domains string, out, errOut io.Writer) error {
	if format != "table" && format != "json" {
		return fmt.Errorf("status: -o %q: want table or json", format)
	}
	if watch {
		if domains != "" {
			return fmt.Errorf("status: --watch reads one bus; leave out --js-domain")
		}
		b, err := open(ctx, nats)
		if err != nil {
			return err
		}
		defer b.close()
		return watchStatus(ctx, life, b, format, out, errOut, 100*time.Millisecond)
	}
	var rows []nodedrain.StatusView
	var failed, err error
	if domains == "" {
		b, err := open(ctx, nats)
		if err != nil {
			return err
		}
		defer b.close()
		if rows, err = loadViews(ctx, b); err != nil {
			return err
		}
	} else if rows, failed, err = sites(ctx, nats, domains); err != nil {
		return err
	}
	if format == "json" {
		err = nodedrain.WriteJSON(out, rows)
	} else {
		err = nodedrain.WriteTable(out, rows, time.Now())
	}
	return errors.Join(err, failed)
}

// sites reads every listed site's buckets through one connection (to the hub), each in its
// JetStream domain. A site that does not answer is in failed; the others' rows are returned.
func sites(ctx context.Context, nats cli.NATSFlags, list string) (rows []nodedrain.StatusView, failed, err error) {
	var names []string
	for _, d := range strings.Split(list, ",") {
		d = strings.TrimSpace(d)
		if !domainRe.MatchString(d) {
			return nil, nil, fmt.Errorf("status: --js-domain %q: want JetStream domain names (letters, digits, - and _), comma-separated", list)
		}
		names = append(names, d)
	}
	nc, err := connect(ctx, nats)
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	// In parallel: a site that hangs (its JetStream without quorum, a slow WAN) uses up the
	// --timeout for itself only.
	type answer struct {
		rows []nodedrain.StatusView
		err  error
	}
	answers := make([]answer, len(names))
	var wg sync.WaitGroup
	for i, d := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows, err := siteViews(ctx, nc, d)
			if err != nil {
				err = fmt.Errorf("site %s: %w", d, err)
			}
			answers[i] = answer{rows, err}
		}()
	}
	wg.Wait()
	var errs []error
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		rows = append(rows, a.rows...)
	}
	nodedrain.SortViews(rows)
	return rows, errors.Join(errs...), nil
}

var domainRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func siteViews(ctx context.Context, nc *nats.Conn, domain string) ([]nodedrain.StatusView, error) {
	js, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		return nil, err
	}
	b, err := openBuckets(ctx, js, "JetStream domain "+domain)
	if err != nil {
		return nil, err
	}
	rows, err := loadViews(ctx, b)
	for i := range rows {
		rows[i].Site = domain
	}
	return rows, err
}

// loadViews reads every node's status and pending request. An entry that does not decode is
// shown as such rather than hiding the node.
func loadViews(ctx context.Context, b *buckets) ([]nodedrain.StatusView, error) {
	byNode := map[string]*nodedrain.StatusView{}
	row := func(node string) *nodedrain.StatusView {
		if r, ok := byNode[node]; ok {
			return r
		}
		r := &nodedrain.StatusView{Status: nodedrain.NodeDrainStatus{Node: node}}
		byNode[node] = r
		return r
	}
	// Read through consumers (a watch's snapshot): the operator identity may not send direct
	// gets, whose replies it could aim at another key (DESIGN §10).
	statuses, bad, err := b.statuses.ReadAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("read statuses: %w", err)
	}
	for k, st := range statuses {
		if k != nodedrain.TermKey { // the active coordinator's term record, no node
			row(k).Status = st
		}
	}
	for k, err := range bad {
		if k != nodedrain.TermKey {
			row(k).Status.Message = "unreadable status on the bus: " + err.Error()
		}
	}
	requests, bad, err := b.requests.ReadAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("read requests: %w", err)
	}
	for k, req := range requests {
		row(k).Request = &req
	}
	for k, err := range bad {
		r := row(k)
		r.Status.Message += "; unreadable request on the bus: " + err.Error()
	}
	rows := make([]nodedrain.StatusView, 0, len(byNode))
	for _, r := range byNode {
		rows = append(rows, *r)
	}
	nodedrain.SortViews(rows)
	return rows, nil
}

func withdraw(ctx context.Context, nats cli.NATSFlags, node string, out io.Writer) error {
	if err := nodedrain.ValidNodeName(node); err != nil {
		return fmt.Errorf("withdraw: %w", err)
	}
	b, err := open(ctx, nats)
	if err != nil {
		return err
	}
	defer b.close()
	if err := b.requests.Unpublish(ctx, node); err != nil {
		return fmt.Errorf("withdraw %s: %w", node, err)
	}
	fmt.Fprintf(out, "withdrew the drain request of %s; the coordinator will uncordon it if it cordoned it\n", node)
	return nil
}
