package agent

import (
	"fmt"
	"time"
)

// This file holds what the machine does with a shutdown it did not ask for: an administrator's
// `systemctl reboot`, an unattended upgrade's reboot, a power button. The runtime holds a logind
// delay lock on shutdown (inhibit.go); logind's PrepareForShutdown(true) comes in as an EvTrigger
// with Caught set. The shutdown is already under way and cannot be undone, only held back for
// at most logind's InhibitDelayMaxSec: the operation's "command" is letting it proceed
// (LetShutdownProceed, which releases the lock), once the drain is COMPLETE (or NOTSUPPORTED, or
// an override lets it), or at once when the drain fails. If the delay runs out first, logind
// proceeds without the agent: the node goes down undrained, and the agent says so when it is back.
//
//	idle --caught--> pending --...--> deferred --COMPLETE (ours), confirmed--> waiting-boot (lock released)
//	deferred --FAILED*--> waiting-boot (lock released, undrained)
//	running / waiting-boot (our own command's shutdown) --caught--> lock released at once
//	new boot ID before the release --> idle (withdraw; an undrained shutdown reported)

// caught handles a shutdown caught through logind (e.Caught).
func (s *stepper) caught(e EvTrigger) {
	st := &s.m.State
	reply := func(format string, args ...any) {
		s.actions = append(s.actions, TriggerResult{Accepted: true, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case st.Phase == PhaseIdle && st.Retired != "" && st.Retired == s.m.Boot:
		// Decommissioned: no Node to drain, and nothing would ever answer a request.
		s.actions = append(s.actions, LetShutdownProceed{Operation: e.Operation, RequestID: e.RequestID, Drained: true,
			Reason: "the node is decommissioned: nothing to drain"})
		reply("the node is decommissioned: the %s goes ahead", e.Operation)
	case st.Phase == PhaseIdle:
		*st = State{Phase: PhasePending, Operation: e.Operation, Context: e.Context, RequestID: e.RequestID,
			RequestedAt: s.now, BootID: s.m.Boot, Caught: true, Handled: st.Handled, Mine: st.Mine,
			CleanupBefore: st.CleanupBefore, Retired: st.Retired}
		s.remember(e.RequestID)
		s.report(LevelWarn, "a %s started outside edgedrain was caught (context %q): held back until the node is drained, at most for logind's delay",
			e.Operation, e.Context)
		reply("%s held back until the node is drained (request %s)", e.Operation, e.RequestID)
	case st.Phase == PhaseRunning || st.Phase == PhaseWaitingBoot:
		// The shutdown of the operation's own command (or one that coincides with it): the
		// drain is done.
		st.Caught = true
		s.proceed(LetShutdownProceed{Drained: true, Reason: fmt.Sprintf("the node is going down for the %s it was drained for", st.Operation)})
		reply("the node is going down for the %s (request %s)", st.Operation, st.RequestID)
	case st.Phase == PhaseBackoff:
		// The last drain failed and the next try is not due: the shutdown will not wait that
		// long. Ask again now.
		st.Caught, st.Superseded, st.Phase, st.RequestID, st.RequestedAt, st.RetryAt = true, true, PhasePending, e.RequestID, s.now, time.Time{}
		s.remember(e.RequestID)
		s.report(LevelWarn, "a shutdown started outside edgedrain was caught while the %s waited to ask again after a failed drain: asking now (request %s)",
			st.Operation, e.RequestID)
		reply("held back until the node is drained (request %s)", e.RequestID)
	default: // pending, deferred, cleared: the drain under way serves the shutdown too
		st.Caught, st.Superseded = true, true
		s.report(LevelWarn, "a shutdown started outside edgedrain was caught while the %s was %s: it is held back until this drain is done, and the %s's own command will not run",
			st.Operation, st.Phase, st.Operation)
		reply("held back until the node is drained (request %s)", st.RequestID)
	}
}

// proceed lets the caught shutdown go on (the runtime releases its lock) and waits for the node
// to go down: a new boot ID ends the operation; if none comes within RebootTimeout the shutdown
// was cancelled, and the request is withdrawn.
func (s *stepper) proceed(act LetShutdownProceed) {
	st := &s.m.State
	if st.Phase != PhaseWaitingBoot {
		st.Phase, st.CommandRan, st.CommandStartedAt = PhaseWaitingBoot, true, s.now
		st.RetryAt = s.now.Add(s.p.RebootTimeout)
	}
	act.Operation, act.RequestID = st.Operation, st.RequestID
	s.actions = append(s.actions, act)
}

// releaseCaught lets a caught shutdown proceed once its operation is cleared (instead of the
// command: the shutdown is already under way). As a command's start, it waits while the state
// file cannot record it or the override file that cleared it cannot be removed (NotRecorded;
// runNotRecorded puts it back): a file left would let the next operation run without a drain.
func (s *stepper) releaseCaught() {
	st := &s.m.State
	s.m.Confirmed = ""
	s.proceed(LetShutdownProceed{Drained: true, Runs: true, Reason: fmt.Sprintf("%s for request %s", st.ClearedBy, st.RequestID)})
}

// failedCaught lets a caught shutdown proceed after a failed drain: it cannot wait for the next
// try. The request stays until the node is back (the node stays cordoned while it goes down).
func (s *stepper) failedCaught(why string) {
	s.report(LevelError, "the drain failed (%s) while a shutdown started outside edgedrain was held back: letting it proceed undrained", why)
	s.proceed(LetShutdownProceed{Reason: "the drain failed: " + why})
}

// caughtTimedOut ends a caught operation whose node did not go down after its lock was
// released: the shutdown was cancelled (or never came).
func (s *stepper) caughtTimedOut() {
	st := &s.m.State
	s.finish(fmt.Sprintf("the node did not go down within %s of the caught %s being let through (cancelled?): withdrawing request %s so the coordinator %s",
		s.p.RebootTimeout, st.Operation, st.RequestID, st.Operation.afterWithdrawal()))
}

// caughtAtBoot ends a caught operation at the first start of a new boot. A shutdown let through
// is done, unless it took the place of an operation asked for before (that one is not: its
// trigger asks again). One that went ahead before the agent let it (logind's delay ran out, or
// the lock was lost with the agent's process) is reported as undrained.
func (s *stepper) caughtAtBoot() {
	st := &s.m.State
	switch {
	case st.Phase == PhaseWaitingBoot && st.Superseded:
		s.report(LevelWarn, "the node is back after a shutdown started outside edgedrain, which took the place of the %s: the %s is not done, withdrawing request %s (its trigger asks again if it is still there)",
			st.Operation, st.Operation, st.RequestID)
		s.end(st.Handled)
		return
	case st.Phase == PhaseWaitingBoot:
		s.finish(fmt.Sprintf("the node is back after the caught %s (boot ID changed): withdrawing request %s so the coordinator %s",
			st.Operation, st.RequestID, st.Operation.afterWithdrawal()))
		return
	}
	s.report(LevelError, "the node went down for a %s started outside edgedrain before its drain was done (the drain was still %s: logind's delay ran out, or its lock was lost); withdrawing request %s",
		st.Operation, st.Phase, st.RequestID)
	s.actions = append(s.actions, UndrainedShutdown{Operation: st.Operation, RequestID: st.RequestID, Phase: st.Phase})
	s.end(st.Handled)
}
