package agent

import (
	"context"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
)

// Other programs may hold logind's delay lock on shutdown too, and they act on the same
// PrepareForShutdown the agent catches — at once, not after the drain. The one that matters is
// the kubelet's graceful node shutdown (shutdownGracePeriod > 0): on PrepareForShutdown it marks
// the node NotReady and kills its pods in priority order, ignoring PodDisruptionBudgets, Longhorn's
// instance managers among them, then lets its lock go. Nothing in its configuration makes it wait
// for a drain, and the signal comes once; so with the agent catching shutdowns the kubelet's own
// must be off (shutdownGracePeriod: 0, its default). The agent says so when it sees the kubelet's
// lock.

// kubeletWho is the "who" of the kubelet's inhibitor lock.
const kubeletWho = "kubelet"

// inhibitor is one lock of logind's ListInhibitors.
type inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// otherDelayLocks lists the delay locks on shutdown held by programs other than the agent.
func otherDelayLocks(ctx context.Context, conn *dbus.Conn) ([]inhibitor, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var all []inhibitor
	if err := conn.Object(logindName, logindPath).CallWithContext(cctx, logindName+".Manager.ListInhibitors", 0).Store(&all); err != nil {
		return nil, err
	}
	var out []inhibitor
	for _, in := range all {
		if in.Who != agentWho && in.Mode == "delay" && strings.Contains(":"+in.What+":", ":shutdown:") {
			out = append(out, in)
		}
	}
	return out, nil
}

// reportOtherLocks logs the other programs that will act on a caught shutdown before its drain.
func (c *catcher) reportOtherLocks(ctx context.Context, conn *dbus.Conn) {
	others, err := otherDelayLocks(ctx, conn)
	if err != nil {
		c.log.WithError(err).Debug("logind: could not list the other inhibitor locks")
		return
	}
	for _, in := range others {
		log := c.log.WithFields(logrus.Fields{"who": in.Who, "why": in.Why, "pid": in.PID})
		if in.Who == kubeletWho {
			log.Warn("logind: the kubelet's graceful node shutdown is on: on a caught shutdown it kills this node's pods at once, " +
				"ignoring PodDisruptionBudgets and before the drain has made the volumes safe; set the kubelet's shutdownGracePeriod to 0 " +
				"(its default) where the agent catches shutdowns")
			continue
		}
		log.Info("logind: another program holds a delay lock on shutdown: it acts on a caught shutdown at once, not after the drain")
	}
}
