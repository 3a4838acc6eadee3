package sim

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

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

// errStaleRead: a confirmation read older than a value the guard already took (the model's
// reads see the newest revision, so this does not happen; the agent would retry its read).
var errStaleRead = errors.New("status read is older than one already taken")

// sign sets the run's Term and next Seq on st and signs it, as the engine does before each
// publication.
func (c *coord) sign(st nodedrain.NodeDrainStatus) nodedrain.NodeDrainStatus {
	c.seq++
	st.Term, st.Seq = int(c.termRev), c.seq
	return coordSigner.Sign(st)
}

// delivered is the agent's bus layer handling one delivery of its status watch, as the real one
// (bus.checkDelivery): the watch cannot tell a server copy (KV watch entries carry no headers),
// so the delivery is judged on its signature and order, then a checked read of the key (which
// tells copies) gives what is taken: this revision, or a newer value superseding it. When that
// read fails, the delivery stands on its signature and order. The read is modelled at the
// delivery's instant; it fails on a lossy bus, and under a forger flooding the JetStream API.
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
	if (s.bus.lossy && s.frng.Float64() < 0.1) || (s.forger.forging(name) && s.frng.Float64() < 0.2) {
		if r.copied {
			// Known open (the agent's bus.checkDelivery): a server copy of a status the
			// coordinator signed, delivered while the checked read fails, stands on its
			// signature and order and reaches agent.Step; only the confirmation read, which
			// refuses it, keeps the agent from acting on it (S1). Counted, not excused further:
			// anything unsigned, untrusted or changed is still an F1 violation here.
			s.copiesTaken++
			s.w.logf("agent of %s takes a server copy delivered at revision %d, its checked read failed: %s", name, r.seq, describe(r.val))
		} else {
			s.checkF1(a, "was delivered (its checked read failed)", r)
		}
		a.step(agent.EvBusStatus{Status: &st, Revision: r.seq})
		return
	}
	cur, ok := s.bus.latest(bucketStatus, name)
	if !ok || cur.val == nil { // removed since
		if cur.seq != 0 && a.guard.CheckDelete(cur.seq) != agent.VerdictTake {
			return
		}
		a.step(agent.EvBusStatus{Revision: max(cur.seq, r.seq)})
		return
	}
	cst := cur.val.(nodedrain.NodeDrainStatus)
	if !a.judge("read after a delivery", cur, cst, cur.copied) {
		return
	}
	s.checkF1(a, "read after a delivery", cur)
	a.step(agent.EvBusStatus{Status: &cst, Revision: max(cur.seq, r.seq)})
}

// readResult is the agent's bus layer answering a confirmation read (found: the key holds a
// status at r): a status the guard does not take comes back as a failed read, so the agent
// reads again after its retry delay.
func (a *agentProc) readResult(r revision, found bool, err error) agent.EvStatusRead {
	if err != nil {
		return agent.EvStatusRead{Err: err}
	}
	if !found {
		a.guard.CheckDelete(0) // (a read of a missing key has no revision)
		return agent.EvStatusRead{}
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
	return agent.EvStatusRead{Status: &st, Revision: r.seq}
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

// resumeStatus is what a resuming engine takes for key, and (forged) the revision of a current
// value to repair once resumed (0: none). Known open (seed 532): Engine.readStatuses resumes
// from the current value only, so one forged value current when a coordinator resumes (the
// forgery itself fences an outage-mode leader, and the next one resumes at once) makes it
// resume without the node's status: it forgets a decommission whose Node it deleted (L1: the
// request waits for a Node that never registers), a return gate (S3), a drain under way. The
// model resumes, as lastOwnStatus repairs, from the newest status a coordinator wrote in the
// key's kept history, until the engine does; a forger that overwrites that whole history is
// kept off (forger.flooded).
func (s *Sim) resumeStatus(key string) (st nodedrain.NodeDrainStatus, ok bool, forged uint64) {
	r, found := s.bus.latest(bucketStatus, key)
	if !found || (r.val == nil && !r.copied) {
		return st, false, 0
	}
	if !r.copied && trustedKeys.Verify(key, r.val.(nodedrain.NodeDrainStatus)) == nil {
		return r.val.(nodedrain.NodeDrainStatus), true, 0
	}
	if r.val != nil {
		forged = r.seq // (a copied delete marker is the status watch's to see)
	}
	if st, ok = s.lastOwnStatus(key); !ok && s.statusOf(key) != nil {
		// Resumed without the status a coordinator wrote: the engine starts the node over and
		// announces its status again (E1 excuses that Event, as for any status it could not
		// know was announced).
		s.moved[key] = true
		s.w.logf("the statuses of %s a coordinator wrote are gone from the key's history (forged over)", key)
	}
	return st, ok, forged
}

// watchStatuses opens the engine run's watch of its status bucket (after Resume), drawing its
// lags from the forger's stream so that runs without forgeries keep their schedules.
func (c *coord) watchStatuses(inc int) {
	s := c.s
	c.statusWatch = s.bus.watchWith(s.frng, c.conn, bucketStatus, "", func(key string, r revision) {
		c.run("status event", inc, func() { c.statusEvent(key, r) })
	}, func() {
		// The model's snapshot holds values only; the real watch's initial values hold delete
		// markers too.
		c.run("status snapshot", inc, func() {
			for _, key := range slices.Sorted(maps.Keys(s.bus.buckets[bucketStatus].keys)) {
				if r, _ := s.bus.latest(bucketStatus, key); r.val == nil && r.by != c.name {
					c.statusEvent(key, r)
				}
			}
		})
	})
}

// statusEvent is Engine.statusEvent: a value under a node's key that is a copy or does not
// verify is repaired; a delete this run did not make gives a drain under way its status back.
func (c *coord) statusEvent(key string, r revision) {
	if key == nodedrain.TermKey || c.core == nil {
		return
	}
	if r.val == nil {
		if d, ok := c.core.Drain(key); ok && d.Request != nil && r.by != c.name {
			c.unpublished[key] = true
		}
		return
	}
	if r.copied || trustedKeys.Verify(key, r.val.(nodedrain.NodeDrainStatus)) != nil {
		c.repair(key, r.seq)
	}
}

// repair is Engine.repairStatus: a node this run serves gets its status published again (the
// tick's retries); else the newest status a coordinator wrote under key (signed anew), or none,
// is put back on condition that key still holds revision rev — a condition on the key alone,
// also in outage mode, whose writes are otherwise conditional on the bucket's last write; the
// run's last write becomes this one's revision. A repair that fails is not retried: the
// forgery stays until the node's next status.
func (c *coord) repair(key string, rev uint64) {
	s := c.s
	if _, ok := c.core.Drain(key); ok {
		c.unpublished[key] = true
		return
	}
	if !c.stillLeading() && !c.outage { // Engine.mayAct
		return
	}
	if !c.conn.connected() || (s.bus.lossy && s.frng.Float64() < 0.1) {
		s.w.logf("%s cannot repair the forged status of %s; it stays until the node's next status", c.name, key)
		return
	}
	if cur, ok := s.bus.latest(bucketStatus, key); !ok || cur.seq != rev {
		return // PublishIfRevision / UnpublishRevision: a conflict, a newer write stays
	}
	s.repairs++
	own, ok := s.lastOwnStatus(key)
	if !ok {
		s.w.logf("%s repairs %s: deletes the value at revision %d (%s)", c.name, key, rev, describe(s.bus.value(bucketStatus, key)))
		c.lastSeq = max(c.lastSeq, s.bus.write(bucketStatus, key, nil, c.name))
		return
	}
	st := c.sign(own)
	s.w.logf("%s repairs %s: puts back %s for request %q over revision %d", c.name, key, st.Status, st.RequestID, rev)
	c.lastSeq = max(c.lastSeq, s.bus.write(bucketStatus, key, st, c.name))
	// The newest status a coordinator wrote, published again: S2 and the policy's rules judged
	// it when it was first published; who publishes it now is checked as for any status.
	if !s.leads(c) {
		s.violate("S1", "%s republished %s for %s while it did not hold the Lease (nor, in outage mode, the last term)", c.name, st.Status, key)
	}
	if st.RequestID != "" {
		s.published[st.RequestID] = append(s.published[st.RequestID], st.Status)
	}
}

// lastOwnStatus is Engine.lastOwnStatus: the newest status by (Term, Seq) among the values in
// key's kept history that are no copy and verify, since a coordinator last removed the key.
func (s *Sim) lastOwnStatus(key string) (nodedrain.NodeDrainStatus, bool) {
	revs := s.bus.buckets[bucketStatus].keys[key]
	var newest nodedrain.NodeDrainStatus
	found := false
	for i := len(revs) - 1; i >= 0; i-- {
		r := revs[i]
		switch {
		case r.copied:
		case r.val == nil:
			return newest, found
		default:
			st := r.val.(nodedrain.NodeDrainStatus)
			if trustedKeys.Verify(key, st) == nil && (!found || st.Newer(newest)) {
				newest, found = st, true
			}
		}
	}
	return newest, found
}

// sameStatus reports whether a and b are the same status but for its order and signature.
func sameStatus(a, b nodedrain.NodeDrainStatus) bool {
	a.Term, a.Seq, a.SignedBy, a.Signature = 0, 0, "", ""
	b.Term, b.Seq, b.SignedBy, b.Signature = 0, 0, "", ""
	return reflect.DeepEqual(a, b)
}
