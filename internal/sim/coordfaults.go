package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// Faults of the coordinators beyond crashes, whole pauses and whole outages: a process paused
// between the checks that allow a write and the write itself (a stalled VM, CPU throttling), so
// that the write lands late, after whatever happened meanwhile (a takeover); and partial
// partitions, one replica cut off from the API or from NATS while everyone else has them.
const (
	// CoordPauseMidWrite arms a coordinator: its next status write passes its checks, then the
	// process pauses for For before the write goes out.
	CoordPauseMidWrite Kind = "coordinator-paused-mid-write"
	// CoordAPICut cuts one replica's path to the Kubernetes API for For; the nodes, their agents
	// and the other replicas still reach it.
	CoordAPICut Kind = "coordinator-cut-from-api"
	// CoordBusCut cuts one replica's path to NATS for For (the Lease holder's, or a standby's
	// that still reaches the API); the agents still reach NATS.
	CoordBusCut Kind = "coordinator-cut-from-nats"
)

// coordFaults draws the faults of this file for a random plan (Config.ProcessPauses).
func coordFaults(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	kinds := []Kind{CoordPauseMidWrite, CoordPauseMidWrite, CoordAPICut, CoordBusCut}
	for range rng.IntN(4) {
		k := kinds[rng.IntN(len(kinds))]
		d := time.Duration(1+rng.IntN(30)) * time.Second
		if k == CoordAPICut && rng.IntN(2) == 0 { // past --api-unreachable-timeout
			d = time.Duration(60+rng.IntN(180)) * time.Second
		}
		p = append(p, Fault{At: time.Duration(rng.Int64N(int64(cfg.Active))), Kind: k, Target: rng.IntN(cfg.Coordinators), For: d})
	}
	return p
}

// applyCoordFault makes one of this file's faults happen.
func (s *Sim) applyCoordFault(f Fault) {
	c := s.coords[f.Target%len(s.coords)]
	switch f.Kind {
	case CoordPauseMidWrite:
		if c.alive {
			c.pauseMidWrite = f.For
		}
	case CoordAPICut:
		if c.apiCut {
			return
		}
		s.w.logf("%s's path to the Kubernetes API is cut for %s (the nodes and the other replicas still reach it)", c.name, f.For)
		if s.informersLate() {
			c.loseAPI()
		} else {
			c.heldVols, c.heldNodes = c.facts()
		}
		c.apiCut = true
		s.w.after(f.For, "coordinator reaches the API again", func() {
			s.w.logf("%s reaches the API again", c.name)
			c.apiCut = false
			c.catchUpLater()
		})
	case CoordBusCut:
		if c.conn.cut {
			return
		}
		s.w.logf("%s's path to NATS is cut for %s (the agents still reach it)", c.name, f.For)
		c.conn.cut = true
		s.w.after(f.For, "coordinator reaches NATS again", func() { c.conn.cut = false; s.bus.reconnected() })
	}
}

// apiUp reports whether this replica reaches the Kubernetes API.
func (c *coord) apiUp() bool { return c.s.cluster.apiUp && !c.apiCut }

// gateFor is the volume gate of this replica: the real rules on what its informers hold.
func (c *coord) gateFor(node string, opts coordinator.GateOptions) coordinator.GateResult {
	vols, states := c.facts()
	return c.s.gateOn(vols, states, node, opts)
}

// apiOp is an API request of this replica: cut off, it fails as the cluster's does in an outage.
func (c *coord) apiOp(what string, lossy bool, apply func() error, reply func(error)) {
	if c.apiCut {
		w := c.s.w
		w.after(w.between(0, 3*time.Second), "api error", func() { reply(errUnreachable(what)) })
		return
	}
	c.s.cluster.apiOp(what, lossy, apply, reply)
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
	c.pausedAt = c.s.w.now
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
