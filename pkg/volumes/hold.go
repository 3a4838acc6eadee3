package volumes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// holdMargin is added to a node's expected time away: the reboot's own jitter, Longhorn's
// reconcile delays.
const holdMargin = 5 * time.Minute

// holdGiveUp is how long a hold that fails holds COMPLETE before the drain goes on without it.
const holdGiveUp = time.Minute

// awayMemory remembers each node's last measured time away (in memory: a restart forgets it and
// falls back to Config.ExpectedAway), and its hold's failures.
type awayMemory struct {
	mu   sync.Mutex
	last map[string]time.Duration
	// failingSince: the first of the node's hold failures in a row; given: the node's hold was
	// given up, not tried again until the drain is over.
	failingSince map[string]time.Time
	given        map[string]bool
}

// failing records a failure of node's hold and returns since when it has been failing.
func (m *awayMemory) failing(node string, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failingSince == nil {
		m.failingSince, m.given = map[string]time.Time{}, map[string]bool{}
	}
	if _, ok := m.failingSince[node]; !ok {
		m.failingSince[node] = now
	}
	return m.failingSince[node]
}

// giveUp records that node's hold is given up until the drain is over.
func (m *awayMemory) giveUp(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.given[node] = true
}

// givenUp reports whether node's hold was given up in this drain.
func (m *awayMemory) givenUp(node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.given[node]
}

// reset ends node's row of failures (a hold made, or the drain over).
func (m *awayMemory) reset(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.failingSince, node)
	delete(m.given, node)
}

func (m *awayMemory) get(node string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[node]
}

func (m *awayMemory) set(node string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = map[string]time.Duration{}
	}
	m.last[node] = d
}

// holdFor is how long node's replicas are held: the longer of the expected time away and 1.5
// times the node's last measured one, plus holdMargin.
func (g *Gate) holdFor(node string) time.Duration {
	away := g.cfg.ExpectedAway
	if last := g.away.get(node) * 3 / 2; last > away {
		away = last
	}
	return away + holdMargin
}

// holdReplicas holds node's Longhorn replicas before COMPLETE (Config.HoldReplicas, under
// PolicyWait, not in a whole-cluster shutdown or a decommission, where nothing comes back
// soon); a failure to is a blocker: the drain waits and asks again.
func (g *Gate) holdReplicas(ctx context.Context, log logrus.FieldLogger, node string, opts coordinator.GateOptions) []nodedrain.Blocker {
	if !g.cfg.HoldReplicas || g.longhorn == nil || g.policyFor(opts) != PolicyWait || opts.WholeCluster || opts.Decommission ||
		opts.HeldElsewhere || g.away.givenUp(node) {
		// (Given up: not tried again until the drain is over, lest a write that hangs eat the
		// time of every check before COMPLETE.)
		return nil
	}
	budget := g.cfg.WriteTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl))
	}
	wctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	away := g.holdFor(node)
	raised, wrote, err := g.longhorn.HoldReplicas(wctx, node, away, g.now())
	if err != nil {
		// The hold saves a rebuild; it must not cost the drain. A failure no retry mends, or one
		// that lasts holdGiveUp, lets COMPLETE through without it, said once.
		since := g.away.failing(node, g.now())
		if permanent := errors.Is(err, errHoldImpossible) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) ||
			apierrors.IsBadRequest(err); permanent || g.now().Sub(since) >= holdGiveUp {
			g.away.giveUp(node)
			msg := fmt.Sprintf("going on without holding the node's Longhorn replicas (--longhorn-hold-replicas): %v", err)
			log.Warn(msg)
			g.event(nodeRef(node), corev1.EventTypeWarning, "ReplicaHoldFailed", "%s", msg)
			return nil
		}
		log.WithError(err).Warn("could not raise Longhorn's waits for the node's replicas; will ask again")
		return []nodedrain.Blocker{{Kind: nodedrain.BlockerVolume, Name: ReplenishmentWaitSetting,
			Reason: fmt.Sprintf("longhorn: could not hold the node's replicas for %s (--longhorn-hold-replicas; giving up on it %s after the first failure): %v",
				away, holdGiveUp, err)}}
	}
	g.away.reset(node)
	if len(raised) > 0 {
		msg := fmt.Sprintf("held the node's Longhorn replicas for %s (expected time away): raised %s", away, strings.Join(raised, ", "))
		log.Info(msg)
		g.event(nodeRef(node), corev1.EventTypeNormal, "ReplicasHeld", "%s", msg)
	}
	if wrote {
		// The writes took part of the time the check before COMPLETE has for its read of the
		// API (MaxConfirmTime); the next check (the gate's recheck) finds the hold in place.
		return []nodedrain.Blocker{{Kind: nodedrain.BlockerVolume, Name: ReplenishmentWaitSetting,
			Reason: fmt.Sprintf("longhorn: holding the node's replicas for %s (--longhorn-hold-replicas); checking again", away)}}
	}
	return nil
}

// releaseHold marks node's replica hold released (its drain is over) and ends the holds that
// are done.
func (g *Gate) releaseHold(ctx context.Context, node string) error {
	if g.longhorn == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
	defer cancel()
	g.away.reset(node) // the next drain tries the hold afresh
	if err := g.longhorn.ReleaseHold(wctx, node, g.now()); err != nil {
		return fmt.Errorf("longhorn replica hold: %w", err)
	}
	g.settleHolds(wctx, node)
	return nil
}

// settleHolds ends the replica holds that are done — the node back and its replicas healthy
// again, or its expected time away past — restoring Longhorn's values, and reports each.
// justReleased names a node whose release was just written (the caches may not show it yet).
func (g *Gate) settleHolds(ctx context.Context, justReleased string) {
	if g.longhorn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
	defer cancel()
	outcomes, err := g.longhorn.SettleHolds(ctx, g.now(), func(node string) bool {
		vols, err := g.longhorn.Volumes(node)
		return err == nil && len(ReturnBlockers(vols, node)) == 0
	}, justReleased)
	if err != nil {
		g.log.WithError(err).Warn("could not end a Longhorn replica hold; will try again")
	}
	for _, o := range outcomes {
		outcome, msg := HoldCaughtUp, fmt.Sprintf("back after %s: %d volume(s) caught up, none rebuilt in full", o.Away.Round(time.Second), o.CaughtUp)
		switch {
		case o.Expired:
			outcome, msg = HoldExpired, fmt.Sprintf("away longer than its replicas were held: Longhorn's waits restored (%d replica(s) there came back, %d did not)", o.CaughtUp, o.Rebuilt)
		case o.Rebuilt > 0:
			outcome, msg = HoldRebuilt, fmt.Sprintf("back after %s: %d volume(s) caught up, %d rebuilt in full", o.Away.Round(time.Second), o.CaughtUp, o.Rebuilt)
		}
		if !o.Expired {
			g.away.set(o.Node, o.Away)
		}
		g.metrics.ReplicaHolds.WithLabelValues(outcome).Observe(o.Away.Seconds())
		g.log.WithFields(logrus.Fields{"node": o.Node, "outcome": outcome}).Info("replica hold ended: " + msg)
		kind := corev1.EventTypeNormal
		if outcome != HoldCaughtUp {
			kind = corev1.EventTypeWarning
		}
		g.event(nodeRef(o.Node), kind, "ReplicaHoldEnded", "%s", msg)
	}
}
