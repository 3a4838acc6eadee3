package sim

import (
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// Shutdowns edgedrain did not ask for: an administrator types `systemctl reboot` on a node.
// logind sends PrepareForShutdown to every holder of a delay lock on shutdown and waits until
// they all release theirs, or until its InhibitDelayMaxSec runs out. The agent holds one for as
// long as its process lives (a crash closes it: logind goes on at once); a paused agent holds it
// and acts late. The node goes down when the lock is let go (for a drain done, or failed) or the
// delay runs out, drained or not.
const (
	// TypedReboot: `systemctl reboot` on the target node.
	TypedReboot Kind = "typed-reboot"
)

// typedRebootFaults draws the typed reboots of a plan (Config.CatchShutdown).
func typedRebootFaults(cfg Config, rng *rand.Rand, at func() time.Duration) Plan {
	var p Plan
	for range 1 + rng.IntN(3) {
		p = append(p, Fault{At: at(), Kind: TypedReboot, Target: rng.IntN(cfg.Nodes)})
	}
	return p
}

// caughtShutdown is a shutdown logind is holding back for the agent's lock.
type caughtShutdown struct {
	boot     int // the boot it takes down
	deadline time.Time
	// own is how the machine goes down for the agent's own command's shutdown (nil: a typed one).
	own func()
	// calledOff: logind dropped it (its job failed, logind restarted during its delay): the
	// machine does not go down for it, whoever lets go.
	calledOff bool
}

// applyTypedReboot: an administrator types `systemctl reboot` on the target's machine.
func (s *Sim) applyTypedReboot(a *agentProc) {
	w, n := s.w, a.node
	if !n.up || a.f.caught != nil {
		return
	}
	if !s.cfg.CatchShutdown || !a.alive {
		w.logf("an administrator reboots %s (systemctl reboot): no agent holds a lock, it goes down undrained", n.name)
		a.cmdRequest = ""
		s.powerCycle(a, w.between(5*time.Second, 40*time.Second))
		return
	}
	w.logf("an administrator reboots %s (systemctl reboot)", n.name)
	s.logindShutdown(a, "systemctl reboot", nil)
}

// logindShutdown: logind starts a shutdown of a's machine and holds it back for the agent's
// lock, at most InhibitDelay; own, when not nil, takes the machine down for the agent's own
// command. One in five is called off during the delay (logind restarted, its job failed).
func (s *Sim) logindShutdown(a *agentProc, what string, own func()) {
	w, n := s.w, a.node
	if !n.up {
		return
	}
	if !a.alive || a.f.caught != nil {
		if own != nil {
			own() // (no lock of a live agent holds it back)
		}
		return
	}
	c := &caughtShutdown{boot: n.bootID, deadline: w.now.Add(s.cfg.InhibitDelay), own: own}
	a.f.caught = c
	w.logf("logind holds the shutdown of %s (%s) back for the agent's lock, at most %s", n.name, what, s.cfg.InhibitDelay)
	inc := a.inc
	a.later(w.between(10*time.Millisecond, 100*time.Millisecond), "PrepareForShutdown", func() {
		if a.inc == inc && a.f.caught == c {
			a.step(agent.EvTrigger{Operation: agent.OpReboot, Context: "caught: " + what, RequestID: s.newRequestID(n.name), Caught: true})
		}
	})
	if own == nil && w.chance(0.2) {
		w.after(w.between(time.Second, s.cfg.InhibitDelay), "shutdown called off", func() {
			if n.up && n.bootID == c.boot && !c.calledOff {
				w.logf("the shutdown of %s is called off (logind restarted during its delay)", n.name)
				c.calledOff = true
				if a.f.caught == c {
					a.f.caught = nil
				}
			}
		})
	}
	w.after(s.cfg.InhibitDelay, "logind's delay runs out", func() {
		if a.f.caught == c && n.up && n.bootID == c.boot {
			w.logf("logind's delay for %s runs out: it goes down with its drain unfinished", n.name)
			s.shutdownProceeds(a, "", false)
		}
	})
}

// lockLost: the agent's process ended while logind held a shutdown back for its lock; logind
// goes on at once.
func (a *agentProc) lockLost() {
	if c := a.f.caught; c != nil && a.node.up && a.node.bootID == c.boot {
		a.s.w.logf("the agent of %s ended while logind held a shutdown back for its lock: logind goes on", a.node.name)
		a.s.shutdownProceeds(a, "", false)
	}
}

// letProceed performs LetShutdownProceed: the agent lets its lock go. A release that is the
// operation's run is judged as a command's run is (S1, or O1 for an override); the machine then
// goes down for the request.
func (a *agentProc) letProceed(x agent.LetShutdownProceed) {
	s := a.s
	c := a.f.caught
	if c == nil || !a.node.up || a.node.bootID != c.boot {
		s.w.logf("agent of %s lets go of its lock (%s): no shutdown is held back", a.node.name, x.Reason)
		return
	}
	byBus := !a.m.State.ClearedBy.Override
	s.w.logf("agent of %s lets the shutdown proceed for request %s (drained %v: %s)", a.node.name, x.RequestID, x.Drained, x.Reason)
	if x.Runs { // (a release for the operation's own command's shutdown ran on its own check)
		if byBus {
			s.checkS1(a, x.RequestID)
		} else {
			s.checkO1(a, x.RequestID)
		}
	}
	s.shutdownProceeds(a, x.RequestID, x.Drained)
}

// shutdownProceeds takes the machine down for the shutdown logind held back: for the agent's own
// command; for request rid when it was drained for it; else as a power cut is (nothing of
// edgedrain's decides it).
func (s *Sim) shutdownProceeds(a *agentProc, rid string, drained bool) {
	c := a.f.caught
	a.f.caught = nil
	if c.own == nil && !c.calledOff && s.jrng.Float64() < s.cfg.ShutdownJobFailures {
		// logind starts the job as soon as the last lock goes, and learns at once that it failed.
		s.w.after(s.w.between(10*time.Millisecond, 100*time.Millisecond), "shutdown job fails", func() {
			if a.node.up && a.node.bootID == c.boot {
				s.shutdownJobFails(a)
			}
		})
		return
	}
	s.w.after(s.w.between(100*time.Millisecond, 2*time.Second), "machine goes down", func() {
		n := a.node
		switch {
		case !n.up || n.bootID != c.boot:
			// (its own command took it down meanwhile)
		case c.calledOff:
			s.w.logf("%s stays up: its shutdown was called off", n.name)
		case c.own != nil:
			c.own()
		case drained && a.cmdRequest == "":
			a.cmdRequest, a.cmdByBus = rid, !a.m.State.ClearedBy.Override
			s.goDown(a, rid, a.cmdByBus)
		default:
			if a.cmdRequest == "" {
				s.w.logf("%s goes down undrained (a reboot edgedrain did not ask for)", n.name)
			}
			s.powerCycle(a, s.w.between(5*time.Second, 40*time.Second))
		}
	})
}

// shutdownJobFails: logind, let go, could not start the reboot's job (reboot.target masked, a
// conflicting job): the machine stays up and logind tells every lock holder the shutdown is
// called off (PrepareForShutdown(false)), after the true it sent before and before any later one.
func (s *Sim) shutdownJobFails(a *agentProc) {
	s.w.logf("%s stays up: logind could not start its shutdown's job and calls it off (PrepareForShutdown false)", a.node.name)
	inc := a.inc
	a.later(s.w.between(10*time.Millisecond, 100*time.Millisecond), "PrepareForShutdown(false)", func() {
		if a.inc == inc && a.f.caught == nil { // (a shutdown started since: its true came after this false)
			a.step(agent.EvShutdownCalledOff{})
		}
	})
}
