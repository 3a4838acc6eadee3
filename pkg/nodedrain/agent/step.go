package agent

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Step returns the machine after ev happened at now, and the actions to take, in order. It never
// runs an operation for a COMPLETE that answers another request than the current one.
func Step(m Machine, ev Event, now time.Time, p Limits) (Machine, []Action) {
	s := stepper{m: m, now: now, p: p}
	edge := false // a status change the agent has not reacted to yet
	switch e := ev.(type) {
	case EvStart:
		switch {
		case e.Fresh && !e.BootTime.IsZero():
			s.m.State.CleanupBefore = e.BootTime
			// (Info: a first start has no state file; one that was unreadable is logged as an
			// error where it is moved aside.)
			s.report(LevelInfo, "no usable state file (a first start, or it was unreadable): a request on the bus for this node made before the node booted is withdrawn (it may be this agent's own from before)")
		case e.Fresh:
			s.report(LevelWarn, "no usable state file and no boot time: a request left on the bus for this node by an earlier agent stays; withdraw it with edgedrainctl if the node is held")
		}
		s.start(e.BootID, e.Succeeded)
	case EvTrigger:
		s.trigger(e)
	case EvBusStatus:
		// The watch delivers in order; a lower revision means the bucket was replaced (a server
		// back without its store) and the watch read every key again: take it.
		s.takeBus(e.Status, e.Revision)
		edge = s.m.BusKnown
	case EvBusSnapshot:
		s.m.BusKnown, edge = true, true
	case EvBusDone:
		s.busDone(e)
	case EvOverride:
		s.m.Override = nil
		if e.Override != nil {
			c := *e.Override
			s.m.Override = &c
			if overrideClears(s.m.Effective()) { // an operator's go-ahead for this operation
				s.m.OverrideAt = s.now
			}
		}
	case EvCommandDone:
		s.commandDone(e)
	case EvRunNotRecorded:
		s.runNotRecorded(e)
	case EvTimer:
		s.timer(e.RequestID)
	case EvShutdownCalledOff:
		if st := &s.m.State; st.Caught && st.Released {
			st.CalledOff = true // (acted on once the command, if one runs, has returned: below)
		}
	case EvStatusRead:
		s.statusRead(e)
		edge = s.m.BusKnown
	}
	if st := s.m.State; st.CalledOff && st.Caught && st.Released && st.Phase == PhaseWaitingBoot {
		s.caughtTimedOut("was called off by logind")
	}
	s.reconcile(edge)
	return s.m, s.actions
}

type stepper struct {
	m       Machine
	now     time.Time
	p       Limits
	actions []Action
	synced  bool // a publish or withdrawal was queued in this step
}

func (s *stepper) report(l Level, format string, args ...any) {
	s.actions = append(s.actions, Report{Level: l, Message: fmt.Sprintf(format, args...)})
}

// sync queues the bus action that makes the bus hold what State.OnBus asks for.
func (s *stepper) sync() {
	s.m.BusSynced, s.m.BusRetryAt, s.synced = false, time.Time{}, true
	if s.m.State.OnBus {
		// (A request left from before the boot is replaced too: the start-up clean-up may not
		// have been done, its withdrawal failed, when the operation came.)
		s.actions = append(s.actions, PublishRequest{Request: s.m.Request(), Own: s.own(), Before: s.m.State.CleanupBefore,
			Boot: s.cleanupBoot()})
		return
	}
	s.actions = append(s.actions, WithdrawRequest{RequestID: s.m.State.RequestID, Own: s.own(), Before: s.m.State.CleanupBefore,
		Boot: s.cleanupBoot(), Pending: s.m.State.Phase == PhaseBackoff})
}

// cleanupBoot is the boot ID a bus action carries for the start-up clean-up (see Stale): empty
// while none is pending.
func (s *stepper) cleanupBoot() string {
	if s.m.State.CleanupBefore.IsZero() {
		return ""
	}
	return s.m.Boot
}

// own lists the requests this agent made, for a withdrawal.
func (s *stepper) own() []string {
	st := s.m.State
	out := slices.Clone(st.Mine)
	if st.RequestID != "" && !slices.Contains(out, st.RequestID) {
		out = append(out, st.RequestID)
	}
	return out
}

// remember records a request ID as this agent's own.
func (s *stepper) remember(id string) {
	st := &s.m.State
	if id == "" || slices.Contains(st.Mine, id) {
		return
	}
	st.Mine = append(st.Mine, id)
	if len(st.Mine) > maxMine {
		st.Mine = slices.Clone(st.Mine[len(st.Mine)-maxMine:])
	}
}

func (s *stepper) start(boot, succeeded string) {
	s.m.Boot = boot
	st := &s.m.State
	if st.Retired != "" && st.Retired != boot {
		st.Retired = "" // the machine booted again after its decommission: a node like any other
	}
	if st.Phase != PhaseIdle && st.ClearedBy.Override {
		// An override let this operation run, and the agent stopped before its file was removed
		// (the removal is in memory only, retried at each step): it goes first, or no command
		// starts. Left in place, it would let the next operation run without a drain. (If an
		// operator wrote a new one meanwhile, losing it holds an operation back: the safe side.)
		s.consumeOverride()
	}
	switch {
	case st.Phase != PhaseIdle && st.BootID != "" && st.BootID != boot:
		// Done only if the node went down for the command: it returned and the agent waited
		// for the node to go down, or it was still running a command that may take the node
		// down (a decommission powering the machine off). An update whose command failed is
		// not done by an unrelated reboot.
		if st.Caught {
			s.caughtAtBoot()
		} else if st.Phase == PhaseWaitingBoot || (st.Phase == PhaseRunning && st.Operation.mayGoDown(s.p)) {
			s.finish(fmt.Sprintf("the node is back after the %s (boot ID changed): withdrawing request %s so the coordinator %s",
				st.Operation, st.RequestID, st.Operation.afterWithdrawal()))
		} else {
			s.report(LevelWarn, "the node rebooted while the %s was still %s (not by edgedrain): withdrawing request %s; its trigger asks again if it is still needed",
				st.Operation, st.Phase, st.RequestID)
			s.end(st.Handled)
		}
	case st.Phase == PhaseRunning && st.Operation.goesDown(s.p):
		st.Phase, st.RetryAt = PhaseWaitingBoot, st.CommandStartedAt.Add(s.p.RebootTimeout)
		s.report(LevelInfo, "the agent restarted while the %s command ran: waiting for the node to go down until %s",
			st.Operation, st.RetryAt.UTC().Format(time.RFC3339))
	case st.Phase == PhaseRunning && succeeded != "" && succeeded == st.RequestID:
		// Its shell recorded that the command succeeded, which the agent could not (paused or
		// killed before it heard, or its disk refusing the state file): it does not run again.
		s.report(LevelInfo, "the agent restarted while the %s command ran for request %s, and the command's shell recorded that it succeeded",
			st.Operation, st.RequestID)
		s.commandDone(EvCommandDone{RequestID: st.RequestID})
	case st.Phase == PhaseRunning:
		s.m.Interrupted = true
		s.commandFailed("interrupted: the agent restarted while the command ran; the bus says whether its request still stands " +
			"before it runs again")
	}
	if !s.synced && !s.m.Interrupted {
		s.sync() // re-publish a deferred request, or withdraw any leftover one
	}
}

func (s *stepper) busDone(e EvBusDone) {
	st := s.m.State
	if e.Publish != st.OnBus || (e.Publish && e.RequestID != st.RequestID) {
		return // the result of an action since superseded
	}
	verb := "withdraw"
	if e.Publish {
		verb = "publish"
	}
	if e.Err == nil {
		s.m.State.CleanupBefore = time.Time{} // the start-up clean-up is done (withdrawn, or replaced)
		if s.m.BusFailures > 0 {
			s.report(LevelInfo, "%s of the drain request succeeded after %d failed attempt(s)", verb, s.m.BusFailures)
		}
		s.m.BusSynced, s.m.BusRetryAt, s.m.BusFailures = true, time.Time{}, 0
		return
	}
	s.m.BusFailures++
	s.m.BusRetryAt = s.now.Add(s.p.BusRetry)
	if s.m.BusFailures == 1 {
		s.report(LevelWarn, "cannot %s the drain request: %v; retrying every %s", verb, e.Err, s.p.BusRetry)
	}
}

func (s *stepper) commandDone(e EvCommandDone) {
	st := &s.m.State
	if st.Phase != PhaseRunning || e.RequestID != st.RequestID {
		return // stale
	}
	s.m.UnrecordedRuns = 0 // its start was recorded: it ran
	switch {
	case e.Err != nil && st.Caught:
		s.failedGoingDown()
		s.commandFailed(e.Err.Error())
	case e.Err != nil:
		s.commandFailed(e.Err.Error())
	case st.Caught:
		s.doneGoingDown()
	case st.Operation.goesDown(s.p):
		st.Phase, st.RetryAt = PhaseWaitingBoot, s.now.Add(s.p.RebootTimeout)
		s.report(LevelInfo, "%s command returned: waiting for the node to go down (a new boot ID); if it is still up after %s the command runs again",
			st.Operation, s.p.RebootTimeout)
	default:
		retired := st.Operation == OpDecommission
		s.finish(fmt.Sprintf("%s command succeeded: withdrawing request %s so the coordinator %s",
			st.Operation, st.RequestID, st.Operation.afterWithdrawal()))
		if retired {
			s.m.State.Retired = s.m.Boot
		}
	}
}

// runNotRecorded puts back a command the runtime did not start because what it must record first
// could not be (its start in the state file, the removal of the override file acted on; see
// NotRecorded): it runs once that succeeds, after the backoff and, when the bus cleared it, a
// fresh confirmation (the bus may have changed meanwhile). Not a failure of the command.
func (s *stepper) runNotRecorded(e EvRunNotRecorded) {
	st := &s.m.State
	released := st.Caught && st.Phase == PhaseWaitingBoot // (a caught shutdown's release is its run)
	if (st.Phase != PhaseRunning && !released) || e.RequestID != st.RequestID {
		return // stale
	}
	if released {
		st.Released = false // (not let go after all)
	}
	s.m.UnrecordedRuns++
	wait := nodedrain.Backoff(s.m.UnrecordedRuns, s.p.BusRetry, saveRetryMax)
	// As before this start: in the cleared phase every earlier run of the command failed.
	st.Phase, st.RetryAt, st.CommandRan = PhaseCleared, s.now.Add(wait), st.CommandFailures > 0
	s.report(LevelError, "the %s for request %s was not started: %v; trying again in %s", st.Operation, st.RequestID, e.Err, wait)
}

func (s *stepper) commandFailed(reason string) {
	st := &s.m.State
	st.CommandFailures++
	st.Phase, st.RetryAt = PhaseCleared, s.now.Add(nodedrain.Backoff(st.CommandFailures, s.p.CommandRetryBackoff, s.p.CommandRetryBackoffMax))
	s.actions = append(s.actions, CommandFailed{Operation: st.Operation, Failures: st.CommandFailures, RetryAt: st.RetryAt, Reason: reason})
}

func (s *stepper) timer(id string) {
	if !s.m.ConfirmRetryAt.IsZero() && !s.now.Before(s.m.ConfirmRetryAt) {
		s.m.ConfirmRetryAt = time.Time{}
	}
	if !s.m.RepublishAt.IsZero() && !s.now.Before(s.m.RepublishAt) {
		s.m.RepublishAt = time.Time{}
		if s.m.State.Phase == PhaseDeferred && s.m.State.OnBus && s.m.BusSynced {
			s.sync()
		}
	}
	if !s.m.BusSynced && !s.m.BusRetryAt.IsZero() && !s.now.Before(s.m.BusRetryAt) {
		s.sync()
	}
	st := &s.m.State
	if s.now.Before(st.RetryAt) {
		return
	}
	switch st.Phase {
	case PhaseBackoff:
		st.Phase, st.RequestID, st.RequestedAt, st.RetryAt = PhasePending, id, s.now, time.Time{}
		s.remember(id)
		s.report(LevelInfo, "backoff over: asking again for a drain for the %s (request %s)", st.Operation, id)
	case PhaseWaitingBoot:
		if st.Caught {
			s.caughtTimedOut(fmt.Sprintf("did not take the node down within %s (called off?)", s.p.RebootTimeout))
			return
		}
		s.commandFailed(fmt.Sprintf("the node did not go down within %s after the %s command returned", s.p.RebootTimeout, st.Operation))
	}
}

// reconcile acts on the effective status for the current phase. edge says the bus status just
// changed, which is when a missing or outdated request is published again.
func (s *stepper) reconcile(edge bool) {
	switch s.m.State.Phase {
	case PhaseIdle:
		s.idle(edge)
	case PhasePending:
		s.pending(edge)
	case PhaseDeferred:
		s.deferred(edge)
	case PhaseBackoff:
		if v := s.m.Effective(); overrideClears(v) {
			s.clear(v)
		}
	case PhaseCleared:
		s.stillCleared(edge)
	}
	s.runIfDue()
}

// idle withdraws a request the coordinator still serves for this node although the agent has
// no operation (a state file lost, a request left from before a restart).
func (s *stepper) idle(edge bool) {
	b := s.m.Bus
	if b != nil && b.RequestID == s.m.Withdrew && b.Status != nodedrain.StatusComplete {
		s.m.Withdrew = "" // the coordinator has caught up: a COMPLETE of it from now on is a replay
	}
	if !edge || b == nil || !s.m.BusSynced || !s.m.State.mine(b.RequestID) ||
		b.Status == nodedrain.StatusNotRequested || b.Status == nodedrain.StatusUnknown {
		return // nothing of ours is served (another agent's request is not ours to withdraw)
	}
	// The COMPLETE of the request this agent just withdrew is the coordinator not having seen the
	// withdrawal yet; any other status of it (REQUESTED, STARTING: a replay of the request) is not.
	if b.RequestID != s.m.Withdrew || b.Status != nodedrain.StatusComplete {
		s.report(LevelWarn, "the coordinator serves request %s (%s) for this node, for which this agent has no operation: withdrawing it",
			b.RequestID, b.Status)
	}
	s.sync() // (again for one this agent withdrew: the withdrawal may not have landed)
}

// pending waits for a known status before the request is published (UNKNOWN waits).
func (s *stepper) pending(edge bool) {
	v := s.m.Effective()
	st := &s.m.State
	switch {
	case v.Status == nodedrain.StatusUnknown:
		return
	case overrideClears(v):
		s.clear(v)
	case v.Source == SourceOverride && v.Status.Failed():
		s.failed(v)
	case v.RequestID == st.RequestID && v.Status != nodedrain.StatusNotRequested:
		// Our request is on the bus already (published just before a restart): adopt it.
		st.Phase, st.OnBus = PhaseDeferred, true
		s.deferred(false)
	case s.foreign(v):
		s.waitForeign(v, edge)
	default:
		s.publish() // nothing, or a request of ours that is over, is served: ask
	}
}

// foreign reports whether the bus serves a request for this node that this agent did not make:
// another agent runs under the same node name. It is not this agent's to withdraw or replace.
func (s *stepper) foreign(v View) bool {
	return v.Source == SourceBus && v.RequestID != "" && !s.m.State.mine(v.RequestID) &&
		v.Status != nodedrain.StatusNotRequested && v.Status != nodedrain.StatusUnknown
}

func (s *stepper) waitForeign(v View, edge bool) {
	if edge {
		s.report(LevelWarn, "the coordinator serves request %s (%s) for this node, which this agent did not make "+
			"(is another agent running with this node's name, or was this agent's state file lost?): waiting for it to end; "+
			"if no agent owns it, `edgedrainctl withdraw %s` releases it", v.RequestID, v.Status, s.m.Node)
	}
}

// deferred holds the operation back until the status answers the current request.
func (s *stepper) deferred(edge bool) {
	v := s.m.Effective()
	if v.Status == nodedrain.StatusUnknown {
		return
	}
	ours := v.Source == SourceOverride || v.RequestID == s.m.State.RequestID
	if ours || s.foreign(v) {
		s.m.RepublishAt = time.Time{} // answered: nothing to publish again
	}
	switch {
	case v.Source == SourceBus && ours && s.m.slotReleased():
		s.released()
	case ours && v.Status.Clears():
		s.clear(v)
	case ours && v.Status.Failed():
		s.failed(v)
	case v.Source == SourceBus && ours && v.Status == nodedrain.StatusNotRequested:
		s.cancelled() // an override file saying NOTREQUESTED only holds the operation back
	case ours:
		// Queued or draining: wait.
	case s.foreign(v):
		s.waitForeign(v, edge)
	case edge && s.m.BusSynced:
		// The status answers no request or an older one of ours: make sure ours is there
		// (idempotent: the coordinator ignores a request it already serves).
		s.sync()
	case s.m.BusSynced && s.m.RepublishAt.IsZero():
		// Still no answer: publish again later, in case the request vanished while no
		// coordinator ran to see it (withdrawn then, or the bus lost its store).
		s.m.RepublishAt = s.now.Add(republishAfter)
	}
}

// republishAfter is how long a published request may go unanswered before it is published again.
const republishAfter = 30 * time.Second

// overrideClears reports whether v is an operator's override that lets the operation run.
func overrideClears(v View) bool {
	return v.Source == SourceOverride && v.Status.Clears()
}

// stillCleared checks, while the command waits to run (or to run again), that the bus still
// clears it; a withdrawal by someone else cancels it, anything else defers it again.
func (s *stepper) stillCleared(edge bool) {
	st := s.m.State
	if s.m.Interrupted {
		if !s.m.BusKnown {
			return
		}
		s.m.Interrupted = false
		if st.OnBus && s.withdrawnOnBus() && !s.m.WithdrawnAt.Before(s.m.OverrideAt) {
			// Its command ran, and the request it recorded as on the bus was withdrawn since:
			// by this agent after the command succeeded (the state file did not record it), or
			// by an operator. Either way it does not run again (S5). (A request the agent had
			// withdrawn itself before an override let the command run says nothing of it.)
			s.finish(fmt.Sprintf("the agent restarted while the %s command ran, and request %s is withdrawn on the bus: the command "+
				"succeeded and this agent withdrew it before it could record so, or an operator withdrew it; it does not run again",
				st.Operation, st.RequestID))
			return
		}
		s.sync()
	}
	// edgedrainctl withdraw cancels it, unless an operator's go-ahead came after the withdrawal.
	// A withdrawal the agent made itself (its request no longer on the bus: after a failed drain
	// or a released slot, before an override let the operation run) cancels nothing.
	if st.OnBus && s.withdrawnOnBus() && !s.m.WithdrawnAt.Before(s.m.OverrideAt) {
		s.cancelled()
		return
	}
	v := s.m.Effective()
	switch {
	case v.Status == nodedrain.StatusUnknown:
	case overrideClears(v):
		// An operator's COMPLETE or NOTSUPPORTED now clears it (and is consumed), whatever the
		// bus says; a failed command's backoff still holds.
		retry := st.RetryAt
		s.clear(v)
		s.m.State.RetryAt = retry
	case v.Source != SourceOverride && st.ClearedBy.Override:
		// Cleared by an operator's override (consumed since): the bus does not hold it back.
	case v.Source == SourceBus && v.RequestID == st.RequestID && s.m.slotReleased():
		s.released()
	case v.Source == SourceBus && v.RequestID == st.RequestID && v.Status.Clears():
	default: // the bus, or an operator's override, holds it back
		s.m.State.Phase, s.m.Confirmed, s.m.ConfirmRetryAt = PhaseDeferred, "", time.Time{}
		s.report(LevelWarn, "the status for request %s is %s again (%s): the %s waits again", st.RequestID, v.Status, v.Message, st.Operation)
		s.deferred(edge)
	}
}

// takeBus takes st (nil: none published) at rev as the node's status on the bus, noting when
// the current request was first seen withdrawn (NOTREQUESTED naming it).
func (s *stepper) takeBus(st *nodedrain.NodeDrainStatus, rev uint64) {
	was := s.withdrawnOnBus()
	s.m.Bus, s.m.BusRevision = nil, rev
	if st != nil {
		c := *st
		s.m.Bus = &c
	}
	if !was && s.withdrawnOnBus() {
		s.m.WithdrawnAt = s.now
	}
}

// withdrawnOnBus reports whether the bus says the current request was withdrawn.
func (s *stepper) withdrawnOnBus() bool {
	b := s.m.Bus
	return b != nil && s.m.State.RequestID != "" && b.RequestID == s.m.State.RequestID && b.Status == nodedrain.StatusNotRequested
}

// cancelled ends the operation because its request was withdrawn by someone else (edgedrainctl
// withdraw): it is not run; a sentinel that asked for it asks again only when it changes.
func (s *stepper) cancelled() {
	st := s.m.State
	if v := s.m.Effective(); overrideClears(v) {
		// An operator's go-ahead (COMPLETE or NOTSUPPORTED) for this operation, older than the
		// withdrawal: it goes with the operation, or it would let the next one run without a drain.
		s.consumeOverride()
	}
	s.finish(fmt.Sprintf("request %s was withdrawn by someone else (edgedrainctl withdraw): the %s is cancelled; ask again to run it",
		st.RequestID, st.Operation))
}

func (s *stepper) publish() {
	st := &s.m.State
	st.Phase, st.OnBus = PhaseDeferred, true
	s.report(LevelInfo, "publishing drain request %s; the %s waits for COMPLETE", st.RequestID, st.Operation)
	s.sync()
}

func (s *stepper) failed(v View) {
	st := &s.m.State
	st.DrainFailures++
	if st.Caught {
		s.actions = append(s.actions, DrainFailed{Operation: st.Operation, Status: v.Status, Failures: st.DrainFailures, Message: v.Message})
		s.failedCaught(fmt.Sprintf("%s: %s", v.Status, v.Message))
		return
	}
	st.Phase, st.RetryAt = PhaseBackoff, s.now.Add(nodedrain.Backoff(st.DrainFailures, s.p.DrainRetryBackoff, s.p.DrainRetryBackoffMax))
	s.actions = append(s.actions, DrainFailed{Operation: st.Operation, Status: v.Status, Failures: st.DrainFailures,
		RetryAt: st.RetryAt, Message: v.Message})
	if st.OnBus {
		st.OnBus = false
		s.sync()
	}
}

func (s *stepper) clear(v View) {
	st := &s.m.State
	st.Phase, st.RetryAt = PhaseCleared, time.Time{}
	st.ClearedBy = Clearance{Status: v.Status, Override: v.Source == SourceOverride}
	if st.ClearedBy.Override {
		s.consumeOverride() // acted on now
	}
	s.report(LevelInfo, "%s for request %s: running the %s", st.ClearedBy, st.RequestID, st.Operation)
}

// consumeOverride drops the override that let the current operation run, and has its file
// removed: it answers this operation only. Left in force, a NOTSUPPORTED (as a COMPLETE) would let
// every later operation run at once, without a drain.
func (s *stepper) consumeOverride() {
	s.m.Override = nil
	s.actions = append(s.actions, RemoveOverride{})
}

func (s *stepper) runIfDue() {
	st := &s.m.State
	if st.Phase != PhaseCleared || s.now.Before(st.RetryAt) || s.m.Interrupted {
		return
	}
	if !st.ClearedBy.Override && !s.confirmedNow() {
		s.confirm()
		return
	}
	if st.Caught {
		s.releaseCaught()
		return
	}
	s.m.Confirmed = ""
	st.Phase, st.CommandRan, st.CommandStartedAt, st.RetryAt = PhaseRunning, true, s.now, time.Time{}
	s.actions = append(s.actions, RunCommand{Operation: st.Operation, Context: st.Context, RequestID: st.RequestID,
		Attempt: st.CommandFailures + 1})
}

// finish ends the operation as done: its sentinel is recorded as handled and the request withdrawn.
func (s *stepper) finish(msg string) {
	st := s.m.State
	handled := st.Handled
	if st.Sentinel != "" {
		handled = maps.Clone(handled)
		if handled == nil {
			handled = map[Operation]int64{}
		}
		handled[st.Operation] = st.SentinelModTime
	}
	s.report(LevelInfo, "%s", msg)
	s.end(handled)
}

// end returns to idle and withdraws the request.
func (s *stepper) end(handled map[Operation]int64) {
	s.endCaught()
	id, own := s.m.State.RequestID, s.own()
	s.m.Withdrew = id
	s.m.State = State{Phase: PhaseIdle, Handled: handled, Mine: s.m.State.Mine, CleanupBefore: s.m.State.CleanupBefore}
	s.m.BusSynced, s.m.BusRetryAt, s.synced = false, time.Time{}, true
	s.m.Confirmed, s.m.Confirming, s.m.ConfirmRetryAt, s.m.RepublishAt = "", false, time.Time{}, time.Time{}
	s.m.UnrecordedRuns = 0
	// (With the start-up clean-up still due: its success clears it.)
	s.actions = append(s.actions, WithdrawRequest{RequestID: id, Own: own, Before: s.m.State.CleanupBefore, Boot: s.cleanupBoot()})
}
