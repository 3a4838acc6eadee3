package agent

import (
	"bytes"
	"fmt"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// This file holds how the runtime keeps the state file in step with the machine, and what it
// does when it cannot: no command starts whose start the state file does not record (a crash
// after it would run it again: S5, an operation runs once per request), no request is published
// that the state file does not record as this agent's (a crash after it would leave an agent that
// takes it for another's and waits for it to end for good, its node drained and holding its
// admission slot), and the save is tried again with backoff until it succeeds.

// saveRetryMax bounds the backoff of a failed state save, and of a command held back by one.
const saveRetryMax = time.Minute

// saveFailure is the runtime's record of failed saves in a row.
type saveFailure struct {
	count   int
	err     error
	retryAt time.Time // when the save is tried again without waiting for an event (zero: saved)
}

// persist saves the state when it changed, and reports whether the state file now holds the
// machine's State. A failure is counted (edgedrain_agent_state_errors_total), shown
// (edgedrain_agent_state_unsaved 1 until a save succeeds), logged once as an error until a save
// succeeds, and tried again at each step and on a timer with backoff.
func (a *Agent) persist() bool {
	data := encodeForCompare(a.m.State)
	if bytes.Equal(data, a.saved) {
		a.saveRecovered() // (the state went back to what the file holds)
		return true
	}
	if err := a.store.Save(a.m.State); err != nil {
		f := &a.unsaved
		f.count++
		f.err = err
		wait := nodedrain.Backoff(f.count, a.cfg.Limits.BusRetry, saveRetryMax)
		f.retryAt = a.cfg.Now().Add(wait)
		a.metrics.StateErrors.Inc()
		a.metrics.StateUnsaved.Set(1)
		e := a.entry().WithError(err).WithField("failures", f.count)
		if f.count == 1 {
			e.Errorf("cannot save the agent state: no operation command starts until it is saved (a crash after starting one "+
				"would run it again); retrying with backoff from %s", wait)
		} else {
			e.Debugf("cannot save the agent state; retrying in %s", wait)
		}
		return false
	}
	a.saved = data
	a.saveRecovered()
	return true
}

// saveRecovered notes that the state file holds the machine's State again.
func (a *Agent) saveRecovered() {
	if a.unsaved.count == 0 {
		return
	}
	a.entry().WithField("failures", a.unsaved.count).Info("agent state saved again")
	a.unsaved = saveFailure{}
	a.metrics.StateUnsaved.Set(0)
}

// NotRecorded returns the event that puts back an action the runtime does not perform, or nil if
// it may be performed. unsaved is the error of the failed save when the state file does not hold
// the machine's State; left the error of the failed removal of an override file acted on.
//   - A RunCommand is held back while either holds: with the state unsaved, an agent restarted
//     after a crash would run the command again (S5); with the override file left, it would read
//     the file again and let the next operation run without a drain.
//   - A PublishRequest is held back while the state is unsaved: an agent restarted after a crash
//     would not know the request for its own (State.Mine) and would wait for it to end, for good,
//     the node drained and holding its admission slot (the simulation found it, L1). The machine
//     takes it for a failed publish and tries again after its bus retry delay.
//   - A WithdrawRequest whose operation still stands (a retry after FAILEDDRAIN, asking again)
//     is held back while the state is unsaved: an agent restarted after a crash would find its
//     recorded request withdrawn, take it for an operator's edgedrainctl withdraw, and cancel the
//     operation for good (the simulation found it, L1). The request stays on the bus, the node
//     cordoned, until the state saves again.
//
// The simulation performs its agents' actions through it too.
func NotRecorded(act Action, unsaved, left error) Event {
	switch x := act.(type) {
	case LetShutdownProceed:
		if x.Runs {
			return NotRecorded(RunCommand{RequestID: x.RequestID}, unsaved, left)
		}
	case RunCommand:
		switch {
		case unsaved != nil:
			return EvRunNotRecorded{RequestID: x.RequestID, Err: fmt.Errorf("its start could not be recorded in the state file (%w), "+
				"and an agent restarted after a crash would run it again", unsaved)}
		case left != nil:
			return EvRunNotRecorded{RequestID: x.RequestID, Err: fmt.Errorf("the override file that was acted on could not be removed (%w), "+
				"and an agent restarted would read it again and let the next operation run without a drain", left)}
		}
	case PublishRequest:
		if unsaved != nil {
			return EvBusDone{Publish: true, RequestID: x.Request.RequestID,
				Err: fmt.Errorf("not published while the state file cannot record it: %w", unsaved)}
		}
	case WithdrawRequest:
		if unsaved != nil && x.Pending {
			return EvBusDone{RequestID: x.RequestID,
				Err: fmt.Errorf("not withdrawn while the state file cannot record it (the operation still stands): %w", unsaved)}
		}
	}
	return nil
}
