package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
)

// This file is the runtime's side of catching shutdowns (Config.CatchShutdown): the catcher's
// locks and signals (inhibit.go) wired to the machine (caught.go).

// startCatching takes the logind locks and raises InhibitDelayMaxSec when asked to; it returns
// the channel PrepareForShutdown comes in on (nil when not catching).
func (a *Agent) startCatching(ctx context.Context) <-chan caughtSignal {
	log := a.log.WithField("component", "logind")
	if !a.cfg.catching() {
		// A drop-in an earlier run left (killed, or catching turned off since) goes.
		if a.cfg.LogindConfDir != "" && ours(filepath.Join(a.cfg.LogindConfDir, logindDropIn)) {
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			if err := restoreInhibitDelay(rctx, a.cfg.SystemBus, a.cfg.LogindConfDir); err != nil {
				log.WithError(err).Warn("cannot remove the logind drop-in an earlier run left")
			} else {
				log.Info("removed the logind drop-in an earlier run left (shutdowns are not caught now)")
			}
		}
		return nil
	}
	if a.cfg.InhibitDelayMax > 0 {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		got, wrote, err := raiseInhibitDelay(rctx, a.cfg.SystemBus, a.cfg.LogindConfDir, a.cfg.InhibitDelayMax)
		cancel()
		a.wroteDropIn = wrote
		e := log.WithFields(logrus.Fields{"delay": got.String(), "wanted": a.cfg.InhibitDelayMax.String()})
		switch {
		case err != nil:
			e.WithError(err).Warn("cannot raise logind's InhibitDelayMaxSec: a reboot typed on the node is held back only this long, drained or not")
		case got < a.cfg.InhibitDelayMax:
			e.Warn("logind holds a shutdown back for less than asked (another drop-in wins?): a longer drain lets the node go down undrained")
		case wrote:
			e.Infof("logind's InhibitDelayMaxSec raised by %s/%s (removed when the agent stops)", a.cfg.LogindConfDir, logindDropIn)
		default:
			e.Info("logind already holds a shutdown back long enough")
		}
	} else if got, err := InhibitDelay(ctx, a.cfg.SystemBus); err == nil { // (bounded by callTimeout)
		log.WithField("delay", got.String()).Info("logind holds a shutdown typed on the node back for at most this long (its InhibitDelayMaxSec)")
	}
	ch := make(chan caughtSignal, 4)
	a.catcher = newCatcher(a.cfg.CatchShutdown, a.cfg.SystemBus, log, ch, a.metrics.InhibitLocked)
	go a.catcher.run(ctx)
	return ch
}

// stopCatching puts logind's InhibitDelayMaxSec back, unless a shutdown is under way (the drop-in
// then stays: reloading logind while it holds the shutdown back is not the agent's to risk).
func (a *Agent) stopCatching() {
	if !a.wroteDropIn {
		return
	}
	if a.m.State.Caught || a.shuttingDown {
		a.log.Info("leaving the logind drop-in in place: a shutdown is under way")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := restoreInhibitDelay(ctx, a.cfg.SystemBus, a.cfg.LogindConfDir); err != nil {
		a.log.WithError(err).Warn("cannot put logind's InhibitDelayMaxSec back")
	}
}

// onCaught hands logind's PrepareForShutdown to the machine: a shutdown starting is caught; one
// called off lets the locks be taken again.
func (a *Agent) onCaught(ctx context.Context, s caughtSignal) {
	a.shuttingDown = s.start
	if !s.start {
		if s.stopping {
			// Not called off for the node: another shutdown's job took its place.
			a.entry().Warn("logind says the shutdown was called off, but systemd is stopping the machine all the same: waiting for the node to go down")
		} else {
			a.entry().Info("logind says the shutdown was called off")
			a.step(ctx, EvShutdownCalledOff{}) // (one let through ends now, not at the reboot timeout)
		}
		a.syncLocks()
		return
	}
	a.entry().WithField("what", s.what).Warn("logind announces a shutdown started outside edgedrain (PrepareForShutdown): holding it back for the drain")
	a.step(ctx, EvTrigger{Operation: s.op, Context: "caught: " + s.what + " started outside edgedrain (logind)",
		RequestID: a.newRequestID(), Caught: true})
}

// syncLocks takes the delay lock again whenever no shutdown is under way (logind refuses a lock
// on one already under way), whatever the operation: a reboot typed later is caught too. The
// block lock only once no operation is under way (it would refuse the agent's own command).
func (a *Agent) syncLocks() {
	if a.catcher != nil && !a.shuttingDown {
		a.catcher.hold(a.m.State.Phase == PhaseIdle)
	}
}

// letProceed performs LetShutdownProceed.
func (a *Agent) letProceed(act LetShutdownProceed) {
	e := a.entry().WithField("why", act.Reason)
	if !act.Drained {
		e.Error("letting a shutdown started outside edgedrain go ahead undrained")
	} else {
		e.Info("letting the shutdown go ahead: the node is drained")
	}
	if act.Outcome != "" {
		a.metrics.CaughtShutdowns.WithLabelValues(act.Outcome).Inc()
	}
	if a.catcher != nil {
		a.catcher.release(fmt.Sprintf("%s (request %s)", act.Reason, act.RequestID))
	}
}

// undrained performs UndrainedShutdown.
func (a *Agent) undrained(act UndrainedShutdown) {
	a.metrics.CaughtShutdowns.WithLabelValues("undrained").Inc()
	a.entry().WithFields(logrus.Fields{"request": act.RequestID, "drainWas": act.Phase}).
		Errorf("the node went down for a %s started outside edgedrain before it was drained", act.Operation)
}
