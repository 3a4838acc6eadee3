package sim

import (
	"maps"
	"slices"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The coordinator's side of signed statuses, as coordinator/statuses.go: it watches its status
// bucket and repairs any value under a node's key that is a copy or does not verify, and it
// resumes from the statuses a coordinator wrote, never from a forgery.

// resumeStatus is what a resuming engine takes for key (Engine.readStatuses), and (forged) the
// revision of a current value to repair once resumed (0: none). A key whose current value is a
// coordinator's delete marker has no status. A forged current value, a copied delete marker
// included (the engine lists the stream's subjects, not only the keys holding a value), is
// resumed from the newest status a coordinator wrote in the key's kept history (lastOwnStatus),
// so that a forgery does not make the run forget a drain, a return gate or a decommission; a
// forger that overwrites that whole history is kept off (forger.flooded).
func (s *Sim) resumeStatus(key string) (st nodedrain.NodeDrainStatus, ok bool, forged uint64, read bool) {
	r, found, read := s.bus.current(bucketStatus, key) // (Engine.readStatus)
	if !read {
		return st, false, 0, false
	}
	switch {
	case !found:
		return st, false, 0, true
	case r.val == nil && !r.copied:
	case r.val == nil:
		forged = r.seq
		st, ok = s.lastOwnStatus(key)
	case !r.copied && trustedKeys.Verify(key, r.val.(nodedrain.NodeDrainStatus)) == nil:
		return r.val.(nodedrain.NodeDrainStatus), true, 0, true
	default:
		forged = r.seq
		st, ok = s.lastOwnStatus(key)
	}
	if !ok && s.statusOf(key) != nil {
		// Resumed without the status a coordinator wrote: the engine starts the node over and
		// announces its status again (E1 excuses that Event, as for any status it could not
		// know was announced).
		s.moved[key] = true
		s.w.logf("the status of %s a coordinator wrote is not what the key holds (forged over)", key)
	}
	return st, ok, forged, true
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
	if forgedValue(key, r) {
		c.repair(key, r.seq)
	}
}

// forgedValue reports whether r, a value under key, is one no coordinator wrote, as the
// coordinator tells: a copy, or a status that does not verify.
func forgedValue(key string, r revision) bool {
	return r.copied || trustedKeys.Verify(key, r.val.(nodedrain.NodeDrainStatus)) != nil
}

// repair is Engine.repairStatus: the newest status a coordinator wrote under key (signed anew),
// or none, is put back on condition that key still holds revision rev. Only while the run holds
// the Lease (writesItself): the write is conditional on the key alone, and an outage-mode run's
// writes must stay conditional on the bucket's last write (its fence). A repair that fails is
// tried again every tick (retryRepairs).
func (c *coord) repair(key string, rev uint64) {
	s := c.s
	pending := c.repairs[key] // (told once in the story)
	delete(c.repairs, key)
	if !c.writesItself(key) {
		if c.repairs[key] && !pending {
			s.w.logf("%s does not hold the Lease: the forged status of %s waits to be repaired until it does", c.name, key)
		}
		return
	}
	if !c.conn.connected() || (s.bus.lossy && s.frng.Float64() < 0.1) || s.bus.writeFails() || s.bus.consumersRefused() {
		c.repairs[key] = true // (the history's reads or the write failed)
		if !pending {
			s.w.logf("%s cannot repair the forged status of %s yet; trying again", c.name, key)
		}
		return
	}
	if cur, ok := s.bus.latest(bucketStatus, key); !ok || cur.seq != rev {
		return // PublishIfRevision / UnpublishRevision: a conflict, a newer write stays
	}
	s.repairs++
	own, ok := s.lastOwnStatus(key)
	var seq uint64
	fenceAt := s.bus.buckets[bucketStatus].last == c.lastSeq // nothing came between (putSigned)
	if !ok {
		s.w.logf("%s repairs %s: deletes the value at revision %d (%s)", c.name, key, rev, describe(s.bus.value(bucketStatus, key)))
		seq = s.bus.write(bucketStatus, key, nil, c.name)
	} else {
		st := c.sign(own)
		s.w.logf("%s repairs %s: puts back %s for request %q over revision %d", c.name, key, st.Status, st.RequestID, rev)
		seq = s.bus.write(bucketStatus, key, st, c.name)
		// The newest status a coordinator wrote, published again: S2 and the policy's rules
		// judged it when it was first published; who publishes it now is checked as for any.
		if !s.leads(c) {
			s.violate("S1", "%s republished %s for %s while it did not hold the Lease (nor, in outage mode, the last term)", c.name, st.Status, key)
		}
		if st.RequestID != "" {
			s.published[st.RequestID] = append(s.published[st.RequestID], st.Status)
		}
	}
	if s.bus.lossy && s.frng.Float64() < 0.15 || s.bus.ackLost() {
		// Written, but the reply was lost: an error, so the key is looked at again; the run
		// does not know the write's revision.
		c.repairs[key] = true
		return
	}
	if fenceAt {
		c.lastSeq = seq
	}
}

// writesItself is Engine.writesItself: a node this run serves gets its own status published
// again (the tick's retries); any other repair is written only while the run holds the Lease,
// else remembered for the tick to try again.
func (c *coord) writesItself(key string) bool {
	if _, ok := c.core.Drain(key); ok {
		c.unpublished[key] = true
		return false
	}
	if !c.leaseValid() {
		c.repairs[key] = true
		return false
	}
	return true
}

// retryRepairs is Engine.retryRepairs, every tick: each key whose repair was not written is read
// again (a checked read); still forged, it is repaired at its current revision; anything else
// (repaired, a newer status, no status) ends it.
func (c *coord) retryRepairs() {
	s := c.s
	for _, key := range slices.Sorted(maps.Keys(c.repairs)) {
		if !c.stillLeading() && !c.outage { // Engine.mayAct
			return
		}
		if !c.conn.connected() || (s.bus.lossy && s.frng.Float64() < 0.1) {
			continue // the read failed: next tick
		}
		r, ok, read := s.bus.current(bucketStatus, key) // (Engine.readStatus)
		if !read {
			continue // next tick
		}
		if ok && r.val != nil && forgedValue(key, r) {
			c.repair(key, r.seq)
		} else {
			delete(c.repairs, key)
		}
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
