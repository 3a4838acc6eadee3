package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// result is one day's figures.
type result struct {
	p        params
	t0, end  time.Time // first request; last node idle
	nodes    []nodeResult
	timedOut int // return gates that ended by their timeout, not healthy
}

// nodeResult is one node's day: the coordinator's times (from its statuses) and the harness's.
type nodeResult struct {
	name string
	statusTimes
	rebootRan, down, back, rebuilt time.Time
}

func (n nodeResult) drain() time.Duration  { return n.complete.Sub(n.started) }
func (n nodeResult) resync() time.Duration { return n.idle.Sub(n.withdrawn) }

func newResult(d *day, t0 time.Time, rec *recorder) *result {
	r := &result{p: d.p, t0: t0}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range d.machines {
		n := nodeResult{name: m.name, statusTimes: *rec.nodes[m.name], rebootRan: m.rebootRan, down: m.down, back: m.back, rebuilt: m.rebuilt}
		if n.idle.After(r.end) {
			r.end = n.idle
		}
		if !strings.Contains(n.idleMessage, "healthy again") {
			r.timedOut++
		}
		r.nodes = append(r.nodes, n)
	}
	sort.Slice(r.nodes, func(i, j int) bool { return r.nodes[i].started.Before(r.nodes[j].started) })
	return r
}

func (r *result) wall() time.Duration { return r.end.Sub(r.t0) }

// sum adds f over the nodes.
func (r *result) sum(f func(nodeResult) time.Duration) time.Duration {
	var s time.Duration
	for _, n := range r.nodes {
		s += f(n)
	}
	return s
}

func (r *result) mean(f func(nodeResult) time.Duration) time.Duration {
	return r.sum(f) / time.Duration(len(r.nodes))
}

// bound is the lower bound of the issue: Σ(drain + R + resync) / concurrency, with drain
// STARTING→COMPLETE and resync withdrawal→return gate ended as measured, R as simulated.
func (r *result) bound() time.Duration {
	return r.sum(func(n nodeResult) time.Duration { return n.drain() + r.p.reboot + n.resync() }) / time.Duration(r.p.concurrency)
}

// floor is Σ(drain + R + S) / concurrency: what the day would take if nothing but the drains, the
// reboots and the rebuilds themselves took time.
func (r *result) floor() time.Duration {
	return r.sum(func(n nodeResult) time.Duration { return n.drain() + r.p.reboot + r.p.resync }) / time.Duration(r.p.concurrency)
}

// admissionGaps are the waits between a slot's release (a return gate ending) and the next
// STARTING, the first being t0 to the first STARTING: slots taken in the order they are freed.
func (r *result) admissionGaps() []time.Duration {
	c := r.p.concurrency
	var idles []time.Time
	for _, n := range r.nodes {
		idles = append(idles, n.idle)
	}
	sort.Slice(idles, func(i, j int) bool { return idles[i].Before(idles[j]) })
	gaps := []time.Duration{r.nodes[0].started.Sub(r.t0)}
	for i := c; i < len(r.nodes); i++ {
		gaps = append(gaps, r.nodes[i].started.Sub(idles[i-c]))
	}
	return gaps
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func printSummary(w io.Writer, results []*result) {
	fmt.Fprintln(w, "Each day: every node asks for a reboot at t=0; wall time = t=0 to the last node idle (its return gate ended).")
	fmt.Fprintln(w, "bound = Σ(drain + R + resync) / concurrency, drain = STARTING→COMPLETE, resync = withdrawal→return gate ended (measured);")
	fmt.Fprintln(w, "floor = Σ(drain + R + S) / concurrency, R and S as simulated: only the work itself.")
	fmt.Fprintf(w, "%11s  %10s  %10s  %8s  %10s  %8s\n", "concurrency", "wall", "bound", "ratio", "floor", "ratio")
	for _, r := range results {
		fmt.Fprintf(w, "%11d  %10s  %10s  %7.3fx  %10s  %7.3fx\n", r.p.concurrency, secs(r.wall()), secs(r.bound()),
			r.wall().Seconds()/r.bound().Seconds(), secs(r.floor()), r.wall().Seconds()/r.floor().Seconds())
		if r.timedOut > 0 {
			fmt.Fprintf(w, "%11s  %d return gate(s) ended by timeout, not healthy\n", "", r.timedOut)
		}
	}
}

// printBreakdown says where each node's time went, as means over the nodes, and how long slots
// stood free.
func printBreakdown(w io.Writer, results []*result) {
	type row struct {
		what string
		f    func(*result) time.Duration
	}
	mean := func(f func(nodeResult) time.Duration) func(*result) time.Duration {
		return func(r *result) time.Duration { return r.mean(f) }
	}
	rows := []row{
		{"drain: STARTING → COMPLETE", mean(func(n nodeResult) time.Duration { return n.drain() })},
		{"  cordon, volume gate: → evicting", mean(func(n nodeResult) time.Duration { return n.evicting.Sub(n.started) })},
		{"  eviction, final gate: evicting →", mean(func(n nodeResult) time.Duration { return n.complete.Sub(n.evicting) })},
		{"agent: COMPLETE → reboot command ran", mean(func(n nodeResult) time.Duration { return n.rebootRan.Sub(n.complete) })},
		{"harness: command ran → node down", mean(func(n nodeResult) time.Duration { return n.down.Sub(n.rebootRan) })},
		{"node down: R, then kwok makes it Ready", mean(func(n nodeResult) time.Duration { return n.back.Sub(n.down) })},
		{"agent: node back → withdrawal seen", mean(func(n nodeResult) time.Duration { return n.withdrawn.Sub(n.back) })},
		{"rebuild: withdrawal → replicas healthy", mean(func(n nodeResult) time.Duration { return n.rebuilt.Sub(n.withdrawn) })},
		{"return gate: replicas healthy → ended", mean(func(n nodeResult) time.Duration { return n.idle.Sub(n.rebuilt) })},
		{"slot held: STARTING → return gate ended", mean(func(n nodeResult) time.Duration { return n.idle.Sub(n.started) })},
		{"admission: slot free → next STARTING", func(r *result) time.Duration {
			gaps := r.admissionGaps()[1:]
			if len(gaps) == 0 {
				return 0
			}
			var s time.Duration
			for _, g := range gaps {
				s += g
			}
			return s / time.Duration(len(gaps))
		}},
		{"t=0 → first STARTING", func(r *result) time.Duration { return r.admissionGaps()[0] }},
		{"slot time free (wall × c − Σ held)", func(r *result) time.Duration {
			return r.wall()*time.Duration(r.p.concurrency) - r.sum(func(n nodeResult) time.Duration { return n.idle.Sub(n.started) })
		}},
	}
	fmt.Fprintln(w, "Where the time went (mean per node unless said otherwise):")
	fmt.Fprintf(w, "%-42s", "")
	for _, r := range results {
		fmt.Fprintf(w, "  %10s", fmt.Sprintf("c=%d", r.p.concurrency))
	}
	fmt.Fprintln(w)
	for _, rw := range rows {
		fmt.Fprintf(w, "%-42s", rw.what)
		for _, r := range results {
			fmt.Fprintf(w, "  %10s", secs(rw.f(r)))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-42s", "drains the volume gate held (of nodes)")
	for _, r := range results {
		held := 0
		for _, n := range r.nodes {
			if n.gateBlocked {
				held++
			}
		}
		fmt.Fprintf(w, "  %10s", fmt.Sprintf("%d/%d", held, len(r.nodes)))
	}
	fmt.Fprintln(w)
}

// printTimeline prints each node's times from t=0.
func (r *result) printTimeline(w io.Writer) {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.2f", t.Sub(r.t0).Seconds())
	}
	fmt.Fprintf(w, "concurrency %d, seconds from t=0:\n%-10s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", r.p.concurrency,
		"node", "start", "evicting", "complete", "cmd ran", "down", "back", "withdraw", "rebuilt", "idle")
	for _, n := range r.nodes {
		fmt.Fprintf(w, "%-10s %8s %8s %8s %8s %8s %8s %8s %8s %8s  %s\n", n.name, at(n.started), at(n.evicting), at(n.complete),
			at(n.rebootRan), at(n.down), at(n.back), at(n.withdrawn), at(n.rebuilt), at(n.idle), n.idleMessage)
		if n.gateBlocked {
			fmt.Fprintln(w, "           the volume gate held its drain before eviction")
		}
		if n.returnBlockers != "" {
			fmt.Fprintf(w, "           last return gate answer before it ended: %s\n", n.returnBlockers)
		}
	}
}
