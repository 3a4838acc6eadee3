package agent

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"
)

// perform carries out one action of the machine.
func (a *Agent) perform(ctx context.Context, act Action) {
	switch act := act.(type) {
	case PublishRequest:
		a.entry().Debug("publishing the drain request")
		a.busOp(busOp{publish: true, req: act.Request, own: act.Own, before: a.bootTimeNow(act.Before), boot: act.Boot})
	case WithdrawRequest:
		a.entry().WithField("withdrawn", act.RequestID).Debug("withdrawing the drain request")
		a.busOp(busOp{id: act.RequestID, own: act.Own, before: a.bootTimeNow(act.Before), boot: act.Boot})
	case ReadStatus:
		a.busOp(busOp{read: true})
	case RunCommand:
		if a.catcher != nil {
			a.catcher.releaseBlock() // (the agent's own command would be refused by its own block lock)
		}
		a.startCommand(ctx, act)
	case LetShutdownProceed:
		a.letProceed(act)
	case UndrainedShutdown:
		a.undrained(act)
	case RemoveOverride:
		a.consumeOverride()
	case TriggerResult:
		if c := a.call; c != nil {
			a.call = nil
			reply := SocketReply{OK: act.Accepted, Message: act.Message}
			entry := a.entry().WithField("operation", c.req.Operation)
			if !act.Accepted {
				reply = SocketReply{Error: act.Message}
				entry.Warnf("local request refused: %s", act.Message)
			} else {
				entry.Infof("local request: %s", act.Message)
			}
			c.reply <- reply
		}
	case DrainFailed:
		a.metrics.DrainFailures.WithLabelValues(string(act.Operation), act.Status.String()).Inc()
		if act.RetryAt.IsZero() { // (a caught shutdown's: it does not wait for another try)
			a.entry().Warnf("drain %s (%s)", act.Status, act.Message)
			return
		}
		a.entry().WithFields(logrus.Fields{"failures": act.Failures, "retryAt": act.RetryAt.UTC().Format(time.RFC3339)}).
			Warnf("drain %s (%s): request withdrawn, the %s stays deferred; asking again in %s",
				act.Status, act.Message, act.Operation, act.RetryAt.Sub(a.cfg.Now()).Round(time.Second))
	case CommandFailed:
		a.metrics.CommandFailures.WithLabelValues(string(act.Operation)).Inc()
		a.entry().WithFields(logrus.Fields{"failures": act.Failures, "retryAt": act.RetryAt.UTC().Format(time.RFC3339)}).
			Errorf("%s failed: %s; running it again in %s", act.Operation, act.Reason, act.RetryAt.Sub(a.cfg.Now()).Round(time.Second))
	case Report:
		e := a.entry()
		switch act.Level {
		case LevelWarn:
			e.Warn(act.Message)
		case LevelError:
			e.Error(act.Message)
		default:
			e.Info(act.Message)
		}
	}
}

// busOp hands op to the bus; when too many wait, its failure comes back as an event at once.
func (a *Agent) busOp(op busOp) {
	if err := a.bus.enqueue(op); err != nil {
		id := op.id
		if op.publish {
			id = op.req.RequestID
		}
		var ev Event = EvBusDone{Publish: op.publish, RequestID: id, Err: err}
		if op.read {
			ev = EvStatusRead{Err: err}
		}
		a.queue = append(a.queue, ev)
	}
}

// startCommand runs the operation's command in the background; its result comes back as an
// event. Nothing is started once the agent is stopping.
func (a *Agent) startCommand(ctx context.Context, act RunCommand) {
	if ctx.Err() != nil {
		return
	}
	command := a.cfg.Commands[act.Operation]
	entry := a.entry().WithField("attempt", act.Attempt)
	if command == "" {
		a.queue = append(a.queue, EvCommandDone{RequestID: act.RequestID, Err: errors.New(noCommand(act.Operation))})
		return
	}
	entry.WithField("command", command).Infof("running the %s command", act.Operation)
	go func() {
		started := time.Now()
		out, err := a.runOperation(command, act, entry)
		if err == nil {
			e := entry.WithField("took", time.Since(started).Round(time.Millisecond).String())
			if out != "" {
				e = e.WithField("output", truncateTail(out, 1024))
			}
			e.Infof("%s command succeeded", act.Operation)
		}
		select {
		case a.events <- EvCommandDone{RequestID: act.RequestID, Err: err}:
		case <-ctx.Done():
		}
	}()
}

// bootTimeNow is the start-up clean-up's bound (State.CleanupBefore, the boot time read at start)
// read again: the kernel's boot time moves with the clock, and a node without a real-time clock
// starts with its clock wrong (at the last saved time, or far in the past) until NTP sets it.
// Read before, it makes the request the last boot left look made since this boot (found by
// the simulation with clocks). Zero (no clean-up pending) stays zero.
func (a *Agent) bootTimeNow(before time.Time) time.Time {
	if before.IsZero() || a.cfg.BootTimeFile == "" {
		return before
	}
	bt, err := ReadBootTime(a.cfg.BootTimeFile)
	if err != nil {
		return before
	}
	return bt
}
