package sim

import (
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// A replicated NATS cluster: each bucket is a stream of three replicas, which the
// model bus otherwise answers as one server that is always current. nats.go reads a bucket's
// keys with direct gets (the buckets allow them: allow_direct), which every replica subscribed
// for them answers, a queue group of the stream's replicas; a follower that is behind answers
// from what it has applied (nats-server enables a follower's direct gets once it is 90% caught
// up and does not turn them off when it falls behind again): an older revision of the key, or
// not-found. The stream's leader answers writes, the stream's info and its message API. A leader
// election leaves the stream without one for a few seconds: writes fail, and some land anyway
// with their ack lost. A quorum loss takes the cluster away; when it is back the JetStream API
// has no meta leader for a while, and refuses to create consumers ("503 JetStream system
// temporarily unavailable"), so every watch whose consumer was lost with its server is
// re-created late, and a read of a key's history (a consumer) fails; direct gets and writes to
// a stream that has a leader go on.
const (
	// FollowerLags: a follower of a bucket's stream stops applying for For (a slow disk, a
	// partition from its leader); it answers direct gets from what it had applied then.
	FollowerLags Kind = "stream-follower-lags"
	// StreamElection: the streams elect a new leader for For (a few seconds).
	StreamElection Kind = "stream-leader-election"
	// QuorumLoss: the cluster loses its quorum for For; back, it elects its stream leaders,
	// and its JetStream API refuses consumers for a while longer.
	QuorumLoss Kind = "nats-quorum-loss"
)

// replicas is the state of the cluster's replicas (bus.rep).
type replicas struct {
	// lag is, per bucket, the last sequence its lagging follower applied (0: none lags).
	lag map[string]uint64
	// electing counts the leader elections under way; refusing the windows in which the API
	// refuses consumers.
	electing, refusing int
	// rng draws who answers and what fails: a stream of its own, so that runs without these
	// faults keep their schedules.
	rng *rand.Rand
}

// keyRev is one write to a bucket, in order (bucket.log): what a lagging follower has applied.
type keyRev struct {
	key string
	r   revision
}

// replicaFaults draws the faults of this file for a random plan (Config.ReplicatedBus).
func replicaFaults(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	kinds := []Kind{FollowerLags, FollowerLags, FollowerLags, StreamElection, StreamElection, QuorumLoss}
	for range 1 + rng.IntN(4) {
		k := kinds[rng.IntN(len(kinds))]
		var d time.Duration
		switch k {
		case FollowerLags:
			d = time.Duration(1+rng.IntN(60)) * time.Second
		case StreamElection:
			d = time.Duration(500+rng.IntN(5000)) * time.Millisecond
		case QuorumLoss:
			d = time.Duration(2+rng.IntN(30)) * time.Second
		}
		p = append(p, Fault{At: time.Duration(rng.Int64N(int64(cfg.Active))), Kind: k, Target: rng.IntN(2), For: d})
	}
	return p
}

// applyReplicaFault makes one of this file's faults happen.
func (s *Sim) applyReplicaFault(f Fault) {
	w, b := s.w, s.bus
	switch f.Kind {
	case FollowerLags:
		bk := []string{bucketStatus, bucketRequests}[f.Target%2]
		if b.rep.lag[bk] != 0 {
			return
		}
		applied := b.buckets[bk].last
		if applied == 0 {
			return // (nothing written yet: it lags behind nothing)
		}
		w.logf("a follower of the %s stream stops applying at revision %d for %s (it still answers direct gets)", bk, applied, f.For)
		b.rep.lag[bk] = applied
		w.after(s.until(f.For), "follower catches up", func() {
			if b.rep.lag[bk] == applied {
				w.logf("the lagging follower of the %s stream catches up", bk)
				delete(b.rep.lag, bk)
			}
		})
	case StreamElection:
		s.election(f.For)
	case QuorumLoss:
		if !b.up {
			return
		}
		refuse := time.Duration(10+b.rep.rng.IntN(80)) * time.Second
		if s.until(f.For+refuse) < f.For+refuse { // (over by the quiet period)
			return
		}
		w.logf("the NATS cluster loses its quorum for %s (then its JetStream API refuses consumers for %s more)", f.For, refuse)
		b.up = false
		w.after(f.For, "quorum back", func() {
			w.logf("the NATS cluster has its quorum again; its streams elect leaders, its API refuses consumers")
			b.up = true
			b.rep.refusing++
			s.election(time.Duration(500+b.rep.rng.IntN(3000)) * time.Millisecond)
			b.reconnected()
			w.after(refuse, "consumers again", func() {
				if b.rep.refusing > 0 {
					b.rep.refusing--
				}
				if b.rep.refusing == 0 {
					w.logf("the JetStream API creates consumers again")
				}
				b.reconnected()
			})
		})
	}
}

// election leaves the streams without a leader for d.
func (s *Sim) election(d time.Duration) {
	b := s.bus
	s.w.logf("the NATS streams elect new leaders (%s without one: writes fail, some land with their ack lost)", d)
	b.rep.electing++
	s.w.after(s.until(d), "stream leaders elected", func() {
		if b.rep.electing > 0 {
			b.rep.electing--
		}
	})
}

// until is d from now, cut at the end of the active phase: the faults of this file are over
// when the quiet period begins (heal).
func (s *Sim) until(d time.Duration) time.Duration {
	return max(0, min(d, epoch.Add(s.cfg.Active).Sub(s.w.now)))
}

// direct is a direct get of key: any of the stream's three replicas answers, a lagging follower
// from what it has applied. lagged: that follower answered.
func (b *bus) direct(bucket, key string) (r revision, found, lagged bool) {
	if applied := b.rep.lag[bucket]; applied != 0 && b.rep.rng.IntN(3) == 0 {
		r, found = b.readAt(bucket, key, applied)
		return r, found, true
	}
	r, found = b.latest(bucket, key)
	return r, found, false
}

// current is a read as the coordinator's engine makes it (pubsub.GetCurrent, then GetStored): a
// direct get answered only by a replica that has applied the bucket's last revision, else through
// the stream's message API (its leader's), which does not answer while the stream has no leader
// or the JetStream API no meta leader (consumersRefused). read false: the key is unread.
func (b *bus) current(bucket, key string) (r revision, found, read bool) {
	r, found, lagged := b.direct(bucket, key)
	if !lagged || b.rep.lag[bucket] >= b.buckets[bucket].last {
		return r, found, true
	}
	if b.noLeader() || b.consumersRefused() {
		b.w.logf("a read of %s/%s answered by a lagging follower is behind revision %d; the stream's leader does not answer", bucket, key, b.buckets[bucket].last)
		return revision{}, false, false
	}
	b.w.logf("a read of %s/%s answered by a lagging follower is behind revision %d: read from the stream's leader", bucket, key, b.buckets[bucket].last)
	r, found = b.latest(bucket, key)
	return r, found, true
}

// readAt is key's last revision as of sequence seq (what a follower that applied up to seq holds).
func (b *bus) readAt(bucket, key string, seq uint64) (revision, bool) {
	log := b.buckets[bucket].log
	for i := len(log) - 1; i >= 0; i-- {
		if log[i].key == key && log[i].r.seq <= seq {
			return log[i].r, true
		}
	}
	return revision{}, false
}

// writeFails: a write during a leader election fails before it lands (no leader takes it).
func (b *bus) writeFails() bool { return b.rep.electing > 0 && b.rep.rng.IntN(2) == 0 }

// ackLost: a write during a leader election landed, and its ack is lost.
func (b *bus) ackLost() bool { return b.rep.electing > 0 && b.rep.rng.IntN(2) == 0 }

// noLeader: the stream has no leader (its info and its message API do not answer).
func (b *bus) noLeader() bool { return b.rep.electing > 0 }

// streamInfo is the stream's info as LastRevision reads it: its leader's last sequence. While the
// stream has no leader, a replica that takes it for leaderless answers from what it has applied
// (a lagging follower: behind the writes its leader refused others over), or none answers.
func (b *bus) streamInfo(bucket string) (last uint64, answered bool) {
	if !b.noLeader() {
		return b.buckets[bucket].last, true
	}
	if applied := b.rep.lag[bucket]; applied != 0 && b.rep.rng.IntN(2) == 0 {
		return applied, true
	}
	return 0, false
}

// consumersRefused: the JetStream API refuses to create consumers (a watch's, a history read's).
func (b *bus) consumersRefused() bool { return b.rep.refusing > 0 }

// termTakenOver is Engine.takenOver as the model has it: the term record read as of the bucket's
// last revision (current: a follower that lags is not taken for its answer); a coordinator wrote
// one after this run's. read false: the record could not be read (the refusal is a failed write,
// the fence unchanged).
func (c *coord) termTakenOver() (over, read bool) {
	r, ok, read := c.s.bus.current(bucketStatus, nodedrain.TermKey)
	return read && ok && r.val != nil && !r.forged && r.seq > c.termRev, read
}
