package sim

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// Signed statuses (DESIGN §10), as the real processes handle them: the coordinator signs every
// status it writes with the real nodedrain.Signer (Term: its term record's revision, Seq: a
// counter of the run's publications), every agent process judges every status it reads or is
// delivered with the real agent.StatusGuard, and the coordinator watches its status bucket and
// repairs any value under a node's key that is a copy or does not verify.

var (
	// coordSigner is every coordinator's key (the replicas share one Secret); the key is fixed,
	// so that a seed replays exactly.
	coordSigner = nodedrain.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x5e}, ed25519.SeedSize)))
	// trustedKeys is what every agent trusts: the coordinator's public key.
	trustedKeys = nodedrain.NewKeySet(coordSigner.Public())
	// forgerSigner is a key nobody trusts (a forger's own, or a retired one).
	forgerSigner = nodedrain.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0xf0}, ed25519.SeedSize)))
)

func trusted() nodedrain.KeySet { return trustedKeys }

// errStaleRead: a confirmation read older than a value the guard already took (answered by a
// lagging follower, replicas.go): the agent reads again after its retry delay.
var errStaleRead = errors.New("status read is older than one already taken")

// sign sets the run's Term and next Seq on st and signs it, as the engine does before each
// publication.
func (c *coord) sign(st nodedrain.NodeDrainStatus) nodedrain.NodeDrainStatus {
	c.seq++
	st.Term, st.Seq = int(c.termRev), c.seq
	return coordSigner.Sign(st)
}

// deliveryReadWaits are the agent's bus layer's waits before each checked read of a delivered
// status (agent's deliveryReadRetries): a read that fails is tried again twice.
var deliveryReadWaits = []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond}

// delivery is one event of the agent's status watch: a revision, or the end of the snapshot.
type delivery struct {
	r        revision
	snapshot bool
}

// enqueue hands the agent's bus layer one event of its status watch. The layer (bus.forward)
// takes them one at a time, in order: while it waits to read a delivered status again, the
// events after it wait too.
func (a *agentProc) enqueue(d delivery) {
	a.deliveries = append(a.deliveries, d)
	a.nextDelivery()
}

func (a *agentProc) nextDelivery() {
	for !a.checking && len(a.deliveries) > 0 {
		d := a.deliveries[0]
		a.deliveries = a.deliveries[1:]
		if d.snapshot {
			a.step(agent.EvBusSnapshot{})
		} else {
			a.delivered(d.r)
		}
	}
}

// delivered is the agent's bus layer handling one delivery of its status watch, as the real one
// (bus.checkDelivery): the watch cannot tell a server copy (KV watch entries carry no headers),
// so the delivery is judged on its signature and order, then a checked read of the key (which
// tells copies) gives what is taken: this revision, or a newer value superseding it.
func (a *agentProc) delivered(r revision) {
	s, name := a.s, a.node.name
	s.forger.onDelivery(name, r)
	if r.val == nil {
		if a.guard.CheckDelete(r.seq) == agent.VerdictTake {
			a.step(agent.EvBusStatus{Revision: r.seq})
		}
		return
	}
	st := r.val.(nodedrain.NodeDrainStatus)
	if s.cfg.UncheckedDeliveries {
		if a.judge("delivered", r, st, r.copied) {
			s.checkF1(a, "was delivered", r)
			a.step(agent.EvBusStatus{Status: &st, Revision: r.seq})
		}
		return
	}
	if !a.judge("delivered", r, st, false) {
		return
	}
	a.checkedRead(r, st, 0)
}

// checkedRead is the delivery's checked read number try (the first at the delivery's instant).
// A read fails while the agent is cut off, on a lossy bus, and under a forger flooding the
// JetStream API; a failed one takes up to a second (the model bus's error replies). A read
// answered by a replica behind the delivery (a lagging follower, replicas.go: an older revision,
// a delete marker the guard does not take, or no value at an older revision) is read again as a
// failed one is (bus.checkDelivery). When all fail, the delivery stands on its signature and
// order.
func (a *agentProc) checkedRead(r revision, st nodedrain.NodeDrainStatus, try int) {
	s, name := a.s, a.node.name
	failed := !a.conn.connected() || (s.bus.lossy && s.frng.Float64() < 0.1) || (s.forger.forging(name) && s.frng.Float64() < 0.2)
	if !failed {
		cur, ok, lagged := s.bus.direct(bucketStatus, name) // (a direct get)
		switch {
		case !ok || cur.val == nil: // removed since, or a replica behind the delivery
			if (cur.seq != 0 && a.guard.CheckDelete(cur.seq) != agent.VerdictTake) || cur.seq < r.seq {
				failed = true
				break
			}
			a.step(agent.EvBusStatus{Revision: max(cur.seq, r.seq)})
			return
		default:
			cst := cur.val.(nodedrain.NodeDrainStatus)
			v, err := a.guard.Check(name, cur.seq, cst, cur.copied)
			switch v {
			case agent.VerdictStale:
				failed = true
			case agent.VerdictRefuse:
				a.refused("read after a delivery", cur, err)
				return
			default:
				s.checkF1(a, "read after a delivery", cur)
				a.step(agent.EvBusStatus{Status: &cst, Revision: max(cur.seq, r.seq)})
				return
			}
		}
		if lagged {
			s.w.logf("agent of %s: its read after a delivery at revision %d is answered by a lagging follower (revision %d): reading again", name, r.seq, cur.seq)
		}
	}
	if try+1 < len(deliveryReadWaits) {
		a.checking = true
		a.later(betweenR(s.frng, 0, time.Second)+deliveryReadWaits[try+1], "checked read retry", func() {
			a.checking = false
			a.checkedRead(r, st, try+1)
			a.nextDelivery()
		})
		return
	}
	if r.copied {
		// Known open (the agent's bus.checkDelivery): a server copy of a status the
		// coordinator signed, delivered while every checked read fails, stands on its
		// signature and order and reaches agent.Step; only the confirmation read, which
		// refuses it, keeps the agent from acting on it (S1). Counted, not excused further:
		// anything unsigned, untrusted or changed is still an F1 violation here.
		s.copiesTaken++
		s.w.logf("agent of %s takes a server copy delivered at revision %d, its checked reads failed: %s", name, r.seq, describe(r.val))
	} else {
		s.checkF1(a, "was delivered (its checked reads failed)", r)
	}
	a.step(agent.EvBusStatus{Status: &st, Revision: r.seq})
}

// readResult is the agent's bus layer answering a confirmation read (found: the key holds a
// status at r): a status the guard does not take comes back as a failed read, so the agent
// reads again after its retry delay.
func (a *agentProc) readResult(r revision, found bool, err error) agent.EvStatusRead {
	if err != nil {
		return agent.EvStatusRead{Err: err}
	}
	if !found { // (a read of a key that holds no message has no revision)
		if a.guard.CheckDelete(r.seq) != agent.VerdictTake { // as bus.readChecked: a replica behind
			return agent.EvStatusRead{Err: errStaleRead}
		}
		return agent.EvStatusRead{Revision: r.seq}
	}
	st := r.val.(nodedrain.NodeDrainStatus)
	v, gerr := a.guard.Check(a.node.name, r.seq, st, r.copied)
	switch v {
	case agent.VerdictStale:
		return agent.EvStatusRead{Err: errStaleRead}
	case agent.VerdictRefuse:
		a.refused("read", r, gerr)
		return agent.EvStatusRead{Err: fmt.Errorf("status refused: %w", gerr)}
	}
	a.s.checkF1(a, "read to confirm", r)
	// The agent's API probe (apiprobe.go) on the API-unreachable rule's COMPLETE: the nodes reach
	// the API unless it is down for everyone.
	return agent.EvStatusRead{Status: &st, Revision: r.seq, APIReachable: st.APIUnreachable && a.s.cluster.apiUp}
}

// judge runs the guard on a status read or delivered (copied: what the bus tells); true: taken.
func (a *agentProc) judge(via string, r revision, st nodedrain.NodeDrainStatus, copied bool) bool {
	v, err := a.guard.Check(a.node.name, r.seq, st, copied)
	if v == agent.VerdictRefuse {
		a.refused(via, r, err)
	}
	return v == agent.VerdictTake
}

func (a *agentProc) refused(via string, r revision, err error) {
	a.s.refusals++
	a.s.w.logf("agent of %s refuses the status %s at revision %d (%s): %v", a.node.name, via, r.seq, describe(r.val), err)
}

// checkF1: an agent acts only on statuses the coordinator wrote — no status its bus layer gives
// agent.Step was a server copy or another writer's, whatever it says. (Delete markers carry
// nothing to act on: a copied one is taken as "no status", and the coordinator puts the status
// back.)
func (s *Sim) checkF1(a *agentProc, via string, r revision) {
	if r.forged {
		s.violate("F1", "the agent of %s took a status it %s, revision %d, that no coordinator wrote (copied %v, by %s): %s",
			a.node.name, via, r.seq, r.copied, r.by, describe(r.val))
	}
}

// statusOf is the node's status as the coordinators last wrote it (nil: none, or deleted): what
// the checkers judge, whatever a forger wrote over it since.
func (s *Sim) statusOf(node string) any {
	return s.bus.buckets[bucketStatus].genuine[node].val
}

// sameStatus reports whether a and b are the same status but for its order and signature.
func sameStatus(a, b nodedrain.NodeDrainStatus) bool {
	a.Term, a.Seq, a.SignedBy, a.Signature = 0, 0, "", ""
	b.Term, b.Seq, b.SignedBy, b.Signature = 0, 0, "", ""
	return reflect.DeepEqual(a, b)
}
