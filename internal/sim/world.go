// Package sim is a deterministic simulation of the whole edgedrain protocol (DESIGN §8). It
// drives the project's real decision code — the coordinator's Core (nodedrain.Step, Resume and
// Admit), the agent's Step and the volume gate's rules — against a model bus (last-value
// keys with history, lagging watchers that replay on reconnect, publications that fail or
// whose reply is lost), a model cluster (nodes, pods with PodDisruptionBudgets and grace
// periods, ReplicaSets, Longhorn replicas that fail and rebuild, API writes that take time and
// whose reply may be lost) and injected faults (crashes, leadership changes, reboots, bus and
// API outages, operator actions, a forger writing copies and made-up statuses into status keys).
// It owns time and randomness: one seed replays exactly. After every event it checks the safety
// invariants S1–S5 and F1 (agents act only on statuses a coordinator wrote); at the end, after a
// quiet period without faults, the liveness invariant L1.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// epoch is the simulated clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is the simulator's core: the clock, the randomness, the event queue and the story.
type world struct {
	now   time.Time
	rng   *rand.Rand
	queue eventQueue
	seq   uint64
	story []string
	// events counts the events run.
	events int
	// stopped is set by a violation: the run ends after the current event.
	stopped bool
	// livelock names the last event when a run exceeded maxEvents.
	livelock string
}

// maxEvents bounds a run: a run takes about 4 500 events on average (TestSimulation logs the
// figure); a hundred times that means something loops.
const maxEvents = 500_000

type scheduled struct {
	at   time.Time
	seq  uint64
	what string
	f    func()
}

type eventQueue []*scheduled

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*scheduled)) }
func (q *eventQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// after schedules f to run d from now.
func (w *world) after(d time.Duration, what string, f func()) {
	w.seq++
	heap.Push(&w.queue, &scheduled{at: w.now.Add(max(d, 0)), seq: w.seq, what: what, f: f})
}

// at schedules f at t (now if t is past).
func (w *world) at(t time.Time, what string, f func()) { w.after(t.Sub(w.now), what, f) }

// runUntil runs events until the queue is empty, end is reached or the run is stopped; check
// runs after every event.
func (w *world) runUntil(end time.Time, check func()) {
	for w.queue.Len() > 0 && !w.stopped {
		next := w.queue[0]
		if next.at.After(end) {
			w.now = end
			return
		}
		heap.Pop(&w.queue)
		w.now = next.at
		w.events++
		if w.events > maxEvents {
			w.logf("LIVELOCK: more than %d events (the last: %s)", maxEvents, next.what)
			w.livelock = next.what
			w.stopped = true
			return
		}
		next.f()
		check()
	}
	if !w.stopped {
		w.now = end
	}
}

// between returns a duration uniformly in [lo, hi].
func (w *world) between(lo, hi time.Duration) time.Duration { return betweenR(w.rng, lo, hi) }

// betweenR is between drawn from rng: parts added later (the forger, the coordinator's status
// watch) draw from streams of their own, so that every other draw of a seed stays what it was.
func betweenR(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// chance returns true with probability p.
func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

// logf adds a line to the story, stamped with the simulated time.
func (w *world) logf(format string, args ...any) {
	w.story = append(w.story, fmt.Sprintf("t=%7.3fs  %s", w.now.Sub(epoch).Seconds(), fmt.Sprintf(format, args...)))
}

// Story returns the lines of the story joined, the last n of them when n > 0.
func story(lines []string, n int) string {
	if n > 0 && len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
