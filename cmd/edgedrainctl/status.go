package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func status(ctx, life context.Context, nats cli.NATSFlags, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("o", "table", "output: table or json")
	watch := fs.Bool("watch", false, "draw the table again, in place, whenever a status or request changes, until interrupted")
	domains := fs.String("js-domain", "", "JetStream domains of the sites to show, comma-separated, through a hub with a leaf node per site; empty: this bus")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("status: -o %q: want table or json", *format)
	}
	if *watch {
		if *domains != "" {
			return fmt.Errorf("status: --watch reads one bus; leave out --js-domain")
		}
		b, err := open(ctx, nats)
		if err != nil {
			return err
		}
		defer b.close()
		return watchStatus(ctx, life, b, *format, out, errOut, 100*time.Millisecond)
	}
	var rows []nodedrain.StatusView
	var failed, err error
	if *domains == "" {
		b, err := open(ctx, nats)
		if err != nil {
			return err
		}
		defer b.close()
		if rows, err = loadViews(ctx, b); err != nil {
			return err
		}
	} else if rows, failed, err = sites(ctx, nats, *domains); err != nil {
		return err
	}
	if *format == "json" {
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

func withdraw(ctx context.Context, nats cli.NATSFlags, args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("withdraw: want exactly one NODE")
	}
	node := args[0]
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
