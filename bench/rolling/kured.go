package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"time"
)

// The kured comparison is a model of kured's documented behaviour, not a measurement: each
// node's kured looks for its sentinel once every --period (pkg/delaytick: a random first delay,
// then a fixed period; a long-running kured's checks fall at a random phase of the period when
// the sentinel appears), takes the lock if fewer than --concurrency nodes hold it, drains and
// reboots, and releases the lock when it starts again after the reboot. A node that finds the
// lock taken tries again one period later. Nothing waits for replicas to rebuild.

// kuredDays simulates n days and returns their spans, shortest first.
func kuredDays(days, nodes, concurrency int, period, hold time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	spans := make([]time.Duration, days)
	for i := range spans {
		spans[i] = kuredDay(rng, nodes, concurrency, period, hold)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i] < spans[j] })
	return spans
}

// kuredDay is one day: every node needs a reboot at t=0; it returns when the last node is back.
func kuredDay(rng *rand.Rand, nodes, concurrency int, period, hold time.Duration) time.Duration {
	next := make([]time.Duration, nodes) // each waiting node's next check
	for i := range next {
		next[i] = time.Duration(rng.Int64N(int64(period)))
	}
	var releases []time.Duration // lock holders' release times
	var end time.Duration
	for len(next) > 0 {
		k := 0
		for i := range next {
			if next[i] < next[k] {
				k = i
			}
		}
		now := next[k]
		held := releases[:0]
		for _, r := range releases {
			if r > now {
				held = append(held, r)
			}
		}
		releases = held
		if len(releases) >= concurrency {
			next[k] += period
			continue
		}
		releases = append(releases, now+hold)
		end = max(end, now+hold)
		next = append(next[:k], next[k+1:]...)
	}
	return end
}

func printKured(w io.Writer, results []*result, period time.Duration) {
	fmt.Fprintf(w, "kured with --period=%s on the same day (a model of its documented behaviour, not measured: each node checks its\n", period)
	fmt.Fprintln(w, "sentinel once per period at a random phase, takes the lock if free, holds it for drain + reboot, and retries a")
	fmt.Fprintln(w, "period later if not; 10 000 simulated days). It does not wait for replicas to rebuild before the next node goes.")
	for _, r := range results {
		hold := r.mean(func(n nodeResult) time.Duration { return n.withdrawn.Sub(n.started) })
		spans := kuredDays(10000, r.p.nodes, r.p.concurrency, period, hold, 1)
		var sum time.Duration
		for _, s := range spans {
			sum += s
		}
		fmt.Fprintf(w, "  --concurrency=%d, lock held %s a node: mean %s, p95 %s (edgedrain measured %s); one reboot per period would be %s\n",
			r.p.concurrency, secs(hold), hours(sum/time.Duration(len(spans))), hours(spans[len(spans)*95/100]), secs(r.wall()),
			hours(period*time.Duration((r.p.nodes+r.p.concurrency-1)/r.p.concurrency)))
	}
}

func hours(d time.Duration) string { return fmt.Sprintf("%.2f h", d.Hours()) }
