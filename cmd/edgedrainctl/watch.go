package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// clearScreen moves a terminal's cursor home and clears the screen: the table is drawn again in
// place.
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus prints the status table, then again, in place, whenever a status or a request
// changes (changes within debounce drawn once), until ctx ends; a failed redraw is said on
// errOut, keeping out a clean table or JSON stream. setup bounds the connection and
// the first table (--timeout); ctx is the command's whole life (an interrupt ends it).
func watchStatus(setup, ctx context.Context, b *buckets, format string, out, errOut io.Writer, debounce time.Duration) error {
	draw := func(c context.Context, first bool) error {
		rows, err := loadViews(c, b)
		if err != nil {
			return err
		}
		if format == "json" {
			return nodedrain.WriteJSON(out, rows) // one array per change
		}
		if !first {
			fmt.Fprint(out, clearScreen)
		}
		return nodedrain.WriteTable(out, rows, time.Now())
	}
	if err := draw(setup, true); err != nil {
		return err
	}
	statuses, err := b.statuses.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch statuses: %w", err)
	}
	defer func() { _ = statuses.Stop() }()
	requests, err := b.requests.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch requests: %w", err)
	}
	defer func() { _ = requests.Stop() }()
	// Each watch first delivers what is there (already drawn): draw again only after both
	// snapshots, on a change.
	snapshots, changed := 0, false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var kind pubsub.EventKind
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-statuses.Events():
			if !ok {
				return fmt.Errorf("status watch ended: %w", statuses.Err())
			}
			kind = ev.Kind
		case ev, ok := <-requests.Events():
			if !ok {
				return fmt.Errorf("request watch ended: %w", requests.Err())
			}
			kind = ev.Kind
		case <-timer.C:
			if changed {
				changed = false
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := draw(dctx, false)
				cancel()
				if err != nil && ctx.Err() == nil {
					fmt.Fprintf(errOut, "edgedrainctl: could not read the bus: %v; drawing again on the next change\n", err)
				}
			}
			continue
		}
		if kind == pubsub.EventSnapshotDone {
			snapshots++
			if snapshots < 2 {
				continue
			} // both watches are up: draw once more, for a change made before they were
		}
		if snapshots >= 2 && !changed {
			changed = true
			timer.Reset(debounce)
		}
	}
}
