package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func status(ctx context.Context, nats cli.NATSFlags, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("status: -o %q: want table or json", *format)
	}
	b, err := open(ctx, nats)
	if err != nil {
		return err
	}
	defer b.close()
	rows, err := loadViews(ctx, b)
	if err != nil {
		return err
	}
	if *format == "json" {
		return nodedrain.WriteJSON(out, rows)
	}
	return nodedrain.WriteTable(out, rows, time.Now())
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
	keys, err := b.statuses.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list statuses: %w", err)
	}
	for _, k := range keys {
		if k == nodedrain.TermKey { // the active coordinator's term record, no node
			continue
		}
		st, _, err := b.statuses.Get(ctx, k)
		switch {
		case errors.Is(err, pubsub.ErrNotFound):
		case err != nil:
			row(k).Status.Message = "unreadable status on the bus: " + err.Error()
		default:
			row(k).Status = st
		}
	}
	keys, err = b.requests.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	for _, k := range keys {
		req, _, err := b.requests.Get(ctx, k)
		switch {
		case errors.Is(err, pubsub.ErrNotFound):
		case err != nil:
			r := row(k)
			r.Status.Message += "; unreadable request on the bus: " + err.Error()
		default:
			row(k).Request = &req
		}
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
