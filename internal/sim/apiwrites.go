package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"
)

// API writes as client-go makes them (the model as unkind as reality): a request
// whose context ends (its timeout, or a cancellation: a drain withdrawn, a run stopped) returns
// an error at once, while the write it sent may still land at the server later, or never; and a
// write that landed may have its reply lost. Both hold for the coordinator's Node patches
// (cordon, uncordon, its record's removal, a decommission's deletion) and its evictions.
const (
	// WritesLate: for For, the coordinator's API writes time out at the client (an error 0.1 to
	// 3 s after they are sent) and land at the server 0 to 10 s after they were sent, or, one in
	// four, never.
	WritesLate Kind = "api-writes-time-out-and-land-late"
	// WriteRepliesLost: for For, the coordinator's API writes land and their replies are lost
	// (the client's timeout).
	WriteRepliesLost Kind = "api-write-replies-lost"
)

// apiWriteKinds are the kinds random plans draw with Config.LateWrites.
var apiWriteKinds = []weightedKind{{WritesLate, 2}, {WriteRepliesLost, 1}}

// apiWriteFaults draws this file's faults for a random plan (Config.LateWrites).
func apiWriteFaults(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	for range 1 + rng.IntN(2) {
		k := drawKind(apiWriteKinds, rng)
		at := time.Duration(rng.Int64N(int64(cfg.Active)))
		p = append(p, Fault{At: at, Kind: k, For: time.Duration(5+rng.IntN(56)) * time.Second})
	}
	return p
}

// applyAPIWriteFault makes one of this file's faults happen.
func (s *Sim) applyAPIWriteFault(f Fault) {
	cl := s.cluster
	until := s.w.now.Add(f.For) // (faults stop with the active phase)
	if end := epoch.Add(s.cfg.Active); until.After(end) {
		until = end
	}
	switch f.Kind {
	case WritesLate:
		s.w.logf("the coordinator's API writes time out at the client and land late for %s", f.For)
		cl.lateUntil = later(cl.lateUntil, until)
	case WriteRepliesLost:
		s.w.logf("the replies to the coordinator's API writes are lost for %s", f.For)
		cl.lostUntil = later(cl.lostUntil, until)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// errTimeout is what client-go returns for a request whose context ended before its reply.
func errTimeout(op string) error {
	return &url.Error{Op: op, URL: "https://127.0.0.1:6443", Err: context.DeadlineExceeded}
}

// unkindWrite makes a write of apiOp late or unanswered while this file's faults last, and
// reports whether it did (the caller then does nothing more).
func (c *cluster) unkindWrite(what string, apply func() error, reply func(error)) bool {
	w := c.w
	late, lost := w.now.Before(c.lateUntil), w.now.Before(c.lostUntil)
	switch {
	case late:
		w.after(betweenR(c.urng, 100*time.Millisecond, 3*time.Second), "api timeout "+what, func() { reply(errTimeout(what)) })
		if c.urng.IntN(4) > 0 {
			w.after(betweenR(c.urng, 10*time.Millisecond, 10*time.Second), "late api write "+what, func() {
				if !c.apiUp {
					return
				}
				err := apply()
				w.logf("a %s sent earlier, whose client timed out, lands late (%v)", what, errOrOK(err))
			})
		}
		return true
	case lost:
		w.after(betweenR(c.urng, time.Millisecond, 30*time.Millisecond), "api request "+what, func() {
			if !c.apiUp {
				reply(errUnreachable(what))
				return
			}
			err := apply()
			w.logf("the reply to a %s is lost (%v)", what, errOrOK(err))
			w.after(betweenR(c.urng, 100*time.Millisecond, 3*time.Second), "api timeout "+what, func() { reply(errTimeout(what)) })
		})
		return true
	}
	return false
}

func errOrOK(err error) string {
	if err == nil {
		return "done"
	}
	return err.Error()
}

// evictCall is one eviction request of the evictor: late or unanswered while this file's faults
// last (an eviction that lands late is judged by the PodDisruptionBudget as it lands).
func (c *cluster) evictCall(p *pod) error {
	w := c.w
	switch {
	case w.now.Before(c.lateUntil):
		if c.urng.IntN(4) > 0 {
			w.after(betweenR(c.urng, 10*time.Millisecond, 10*time.Second), "late eviction", func() {
				if q, ok := c.pods[p.name]; ok && q == p && !p.deleting && c.apiUp {
					err := c.evict(p)
					w.logf("the eviction of %s sent earlier, whose client timed out, lands late (%v)", p.name, errOrOK(err))
				}
			})
		}
		return fmt.Errorf("evict %s: %w", p.name, errTimeout("evict"))
	case w.now.Before(c.lostUntil):
		if err := c.evict(p); err != nil {
			return err
		}
		w.logf("the reply to the eviction of %s is lost", p.name)
		return fmt.Errorf("evict %s: %w", p.name, errTimeout("evict"))
	}
	return c.evict(p)
}
