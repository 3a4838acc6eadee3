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
	case st.Caught && st.Released:
		// Let go already (a shutdown called off and started again): the node is as drained as
		// it was then (still cordoned, its slot held), and going down again. The wait for it to
		// go down starts again too: the first one's end would withdraw the request — and
		// uncordon the node — while this shutdown takes it down.
		st.CalledOff = false
		if st.Phase == PhaseWaitingBoot && st.RetryAt.Before(s.now.Add(s.p.RebootTimeout)) {
			st.RetryAt = s.now.Add(s.p.RebootTimeout)
		}
		s.actions = append(s.actions, LetShutdownProceed{Operation: st.Operation, RequestID: st.RequestID, Drained: st.ClearedBy.Cleared(),
			Reason: "announced again, and let go already"})
		reply("already let go for request %s", st.RequestID)
	case st.Caught:
		// Announced again (the runtime hears it once more at a reconnect): the operation
		// already answers it.
		reply("already held back for request %s", st.RequestID)
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
		// The operation's command ran on its drain: the shutdown may go at once. It is the
		// command's own (a reboot through logind is announced to the agent's lock too), or one
		// that takes its place: the command's result still decides whether the operation is
		// done (commandDone), and a shutdown that does not come counts as the command failing
		// (caughtTimedOut).
		st.Caught, st.Own, st.Released = true, true, true
		s.actions = append(s.actions, LetShutdownProceed{Operation: st.Operation, RequestID: st.RequestID, Drained: true,
			Reason: fmt.Sprintf("the node is drained for the %s, whose command ran", st.Operation)})
		reply("the node is drained: the shutdown goes ahead (request %s)", st.RequestID)
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
		if st.Phase == PhaseCleared {
			st.RetryAt = time.Time{} // (a failed command's backoff: the shutdown does not wait for it)
		}
		s.report(LevelWarn, "a shutdown started outside edgedrain was caught while the %s was %s: it is held back until this drain is done, and the %s's own command will not run",
			st.Operation, st.Phase, st.Operation)
		reply("held back until the node is drained (request %s)", st.RequestID)
	}
}

// proceed lets the caught shutdown go on (the runtime releases its lock) and waits for the node
// to go down: a new boot ID ends the operation; if none comes within RebootTimeout the shutdown
// was called off (caughtTimedOut).
func (s *stepper) proceed(act LetShutdownProceed) {
	st := &s.m.State
	if st.Phase != PhaseWaitingBoot {
		st.Phase, st.CommandRan, st.CommandStartedAt = PhaseWaitingBoot, true, s.now
		st.RetryAt = s.now.Add(s.p.RebootTimeout)
	}
	st.Released = true
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
	s.proceed(LetShutdownProceed{Drained: true, Runs: true, Outcome: "drained", Reason: fmt.Sprintf("%s for request %s", st.ClearedBy, st.RequestID)})
}

// failedCaught lets a caught shutdown proceed after a failed drain: it cannot wait for the next
// try. The request stays until the node is back (the node stays cordoned while it goes down).
func (s *stepper) failedCaught(why string) {
	s.report(LevelError, "the drain failed (%s) while a shutdown started outside edgedrain was held back: letting it proceed undrained", why)
	s.proceed(LetShutdownProceed{Outcome: "drain-failed", Reason: "the drain failed: " + why})
}

// doneGoingDown: the command of the operation succeeded after a shutdown was let through
// meanwhile. The operation is done, but its request stays until the node is back: withdrawn
// now, the node would be uncordoned and its slot given to another node while it goes down.
func (s *stepper) doneGoingDown() {
	st := &s.m.State
	st.Superseded = false
	st.Phase, st.RetryAt = PhaseWaitingBoot, s.now.Add(s.p.RebootTimeout)
	s.report(LevelInfo, "%s command succeeded; the node is going down for the shutdown let through meanwhile: request %s stays until it is back",
		st.Operation, st.RequestID)
}

// failedGoingDown: the command failed after a shutdown was let through meanwhile: that shutdown
// takes the operation's place (not done: its trigger asks again after the boot).
func (s *stepper) failedGoingDown() { s.m.State.Superseded = true }

// caughtTimedOut handles a caught shutdown let through that will not take the node down: logind
// called it off, or it did not come within RebootTimeout (how says which). An operation it took
// the place of goes back to run its own command, after a fresh confirmation of its COMPLETE; one
// whose command ran counts the command as failed, as without a lock, unless it succeeded and
// needs no reboot (then it is done); one it started ends.
func (s *stepper) caughtTimedOut(how string) {
	st := &s.m.State
	st.CalledOff = false
	switch {
	case st.Superseded:
		st.Caught, st.Superseded, st.Released, st.Own = false, false, false, false
		st.Phase, st.RetryAt, st.CommandRan = PhaseCleared, time.Time{}, st.CommandFailures > 0
		s.report(LevelWarn, "the shutdown that took the place of the %s %s: running the %s's own command once its COMPLETE is confirmed again",
			st.Operation, how, st.Operation)
	case st.Own && !st.Operation.goesDown(s.p):
		// Its command succeeded (doneGoingDown) and needs no reboot: the operation is done, the
		// shutdown let through meanwhile was only keeping its request.
		st.Caught, st.Released, st.Own = false, false, false
		retired := st.Operation == OpDecommission
		s.finish(fmt.Sprintf("%s command succeeded, and the shutdown let through meanwhile %s: withdrawing request %s so the coordinator %s",
			st.Operation, how, st.RequestID, st.Operation.afterWithdrawal()))
		if retired { // (as commandDone: no Node answers a request of this boot)
			s.m.State.Retired = s.m.Boot
		}
	case st.Own:
		st.Caught, st.Released, st.Own = false, false, false
		s.commandFailed(fmt.Sprintf("the shutdown after the %s command returned %s", st.Operation, how))
	default:
		s.finish(fmt.Sprintf("the caught %s, let through, %s: withdrawing request %s so the coordinator %s",
			st.Operation, how, st.RequestID, st.Operation.afterWithdrawal()))
	}
}

// caughtAtBoot ends a caught operation at the first start of a new boot. A shutdown let through
// is done, unless it took the place of an operation asked for before (that one is not: its
// trigger asks again). One that went ahead before the agent let it (logind's delay ran out, or
// the lock was lost with the agent's process) is reported as undrained.
func (s *stepper) caughtAtBoot() {
	st := &s.m.State
	switch {
	case st.Released && (st.Superseded || (st.Phase == PhaseRunning && !st.Operation.mayGoDown(s.p))):
		// (An update's command the shutdown cut short is not done, as without a lock.)
		s.report(LevelWarn, "the node is back after a shutdown started outside edgedrain, which took the place of the %s: the %s is not done, withdrawing request %s (its trigger asks again if it is still there)",
			st.Operation, st.Operation, st.RequestID)
		s.end(st.Handled)
	case st.Released:
		s.finish(fmt.Sprintf("the node is back after the caught %s (boot ID changed): withdrawing request %s so the coordinator %s",
			st.Operation, st.RequestID, st.Operation.afterWithdrawal()))
	default:
		s.report(LevelError, "the node went down for a %s started outside edgedrain before its drain was done (the drain was still %s: logind's delay ran out, or its lock was lost); withdrawing request %s",
			st.Operation, st.Phase, st.RequestID)
		s.actions = append(s.actions, UndrainedShutdown{Operation: st.Operation, RequestID: st.RequestID, Phase: st.Phase})
		s.end(st.Handled)
	}
}

// endCaught lets a caught shutdown go on when its operation ends another way in the same boot
// (its request withdrawn by an operator): nothing else would, and logind would wait out its
// delay with the node uncordoned.
func (s *stepper) endCaught() {
	st := s.m.State
	if st.Caught && !st.Released && st.BootID == s.m.Boot {
		s.actions = append(s.actions, LetShutdownProceed{Operation: st.Operation, RequestID: st.RequestID, Outcome: "withdrawn",
			Reason: fmt.Sprintf("request %s ended without a drain (withdrawn)", st.RequestID)})
	}
}
