package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Faults of the coordinators' processes beyond crashes and whole pauses: a process paused between
// the checks that allow a write and the write itself (a stalled VM, CPU throttling), so that the
// write lands late, after whatever happened meanwhile (a takeover).

// CoordPauseMidWrite arms a coordinator: its next status write passes its checks, then the
// process pauses for For before the write goes out.
const CoordPauseMidWrite Kind = "coordinator-paused-mid-write"

// coordFaults draws the faults of this file for a random plan (Config.ProcessPauses).
func coordFaults(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	for range rng.IntN(3) {
		d := time.Duration(1+rng.IntN(30)) * time.Second
		p = append(p, Fault{At: time.Duration(rng.Int64N(int64(cfg.Active))), Kind: CoordPauseMidWrite,
			Target: rng.IntN(cfg.Coordinators), For: d})
	}
	return p
}

// paused reports whether the process is paused now: what it does meanwhile waits (hold).
func (c *coord) paused() bool { return c.s.w.now.Before(c.frozenUntil) }

// pause pauses the process for d from now (a pause within a pause ends with the later one).
func (c *coord) pause(d time.Duration, why string) {
	c.s.w.logf("%s pauses for %s %s", c.name, d, why)
	if until := c.s.w.now.Add(d); until.After(c.frozenUntil) {
		c.frozenUntil = until
	}
}

// hold queues f to run, in order with the process's other held events, when the pause ends.
func (c *coord) hold(what string, f func()) {
	c.held = append(c.held, heldEvent{what: what, inc: c.inc, f: f})
	if !c.thawing {
		c.thawing = true
		c.s.w.at(c.frozenUntil, "thaw", c.thaw)
	}
}

// publishLate is publishOne paused between its checks and its write: the write lands when the
// pause ends (before anything held), its reply is handled then.
func (c *coord) publishLate(st nodedrain.NodeDrainStatus, d time.Duration) {
	c.pause(d, fmt.Sprintf("between its checks and its write of %s %s", st.Node, st.Status))
	last, inc := c.lastSeq, c.inc
	var seq uint64
	refused := true // (killed while paused, it never wrote)
	c.s.w.at(c.frozenUntil, "late status write lands", func() {
		if c.alive && c.inc == inc {
			seq, refused = c.land(st, last, true)
		}
	})
	c.hold("status write reply", func() { c.written(st, seq, refused) })
}
