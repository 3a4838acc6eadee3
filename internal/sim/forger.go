package sim

import (
	"crypto/ed25519"
	"encoding/base64"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The forger (DESIGN §10): a bus client that may read status keys — the operator's identity, or
// another node's stolen agent credentials — and so can have the server write, under a node's
// status key, a copy of any message the bucket stores (a direct get whose reply subject is that
// key). Copied once under a key of its own, a status stays copyable for ever, so the forger can
// bring back any status a coordinator ever wrote, delete markers too. Beyond what copies allow,
// and as unkind as a misconfigured server or a leaked write right, it also writes statuses it
// made up: unsigned, signed by a key nobody trusts, or a coordinator's status with its fields
// changed under the signature. It strikes at random and at the moments that matter: right after
// a withdrawal, and between an agent's watch delivery of a COMPLETE and its confirmation read.

// StatusForger is a forger writing into node Target's status key for For.
const StatusForger Kind = "status-forger"

type forger struct {
	s *Sim
	// until is, per node, when the forgery of its key ends.
	until map[string]time.Time
	// archive is every status a coordinator wrote, as the forger stashed it.
	archive []revision
	// writes counts the forged writes.
	writes int
}

func newForger(s *Sim) *forger {
	return &forger{s: s, until: map[string]time.Time{}}
}

func (f *forger) forging(node string) bool { return f.s.w.now.Before(f.until[node]) }

// start begins a forgery of node's key for d.
func (f *forger) start(node string, d time.Duration) {
	if until := f.s.w.now.Add(d); until.After(f.until[node]) {
		f.until[node] = until
	}
	f.s.w.logf("a forger writes into the status key of %s for %s", node, d)
	f.loop(node)
}

func (f *forger) loop(node string) {
	if !f.forging(node) {
		return
	}
	f.forge(node)
	f.s.w.after(betweenR(f.s.frng, 200*time.Millisecond, 6*time.Second), "forger", func() { f.loop(node) })
}

// heal ends every forgery (the quiet period).
func (f *forger) heal() { clear(f.until) }

// soon strikes node's key within d, with probability p (the forger watches the keys it may read).
func (f *forger) soon(node string, p float64, d time.Duration) {
	if !f.forging(node) || f.s.frng.Float64() >= p {
		return
	}
	f.s.w.after(betweenR(f.s.frng, 0, d), "forger strikes", func() {
		if f.forging(node) {
			f.forge(node)
		}
	})
}

// observe sees every write: it stashes the coordinators' statuses and strikes right after a
// withdrawal (the request deleted, or NOTREQUESTED published).
func (f *forger) observe(bucket, key string, r revision) {
	if r.forged {
		return
	}
	switch bucket {
	case bucketStatus:
		if st, ok := r.val.(nodedrain.NodeDrainStatus); ok && key != nodedrain.TermKey {
			f.archive = append(f.archive, r)
			if st.Status == nodedrain.StatusNotRequested {
				f.soon(key, 0.5, 30*time.Millisecond)
			}
		}
	case bucketRequests:
		if r.val == nil {
			f.soon(key, 0.5, 30*time.Millisecond)
		}
	}
}

// onDelivery: an agent was delivered r; if it clears, strike before the confirmation read.
func (f *forger) onDelivery(node string, r revision) {
	if st, ok := r.val.(nodedrain.NodeDrainStatus); ok && st.Status.Clears() {
		f.soon(node, 0.5, 10*time.Millisecond)
	}
}

// onRead: an agent sends its confirmation read; strike around it.
func (f *forger) onRead(node string) { f.soon(node, 0.5, 20*time.Millisecond) }

// forge writes one forgery into node's key.
func (f *forger) forge(node string) {
	s := f.s
	if !s.bus.up || f.flooded(node) {
		return
	}
	rid := f.currentRequest(node)
	var r revision
	what := ""
	switch x := s.frng.IntN(100); {
	case x < 45:
		r, what = f.copyOf(node, rid), "a server copy"
	case x < 62:
		r, what = revision{val: f.fabricate(node, rid)}, "an unsigned status"
	case x < 80:
		r, what = revision{val: forgerSigner.Sign(f.fabricate(node, rid))}, "a status signed by an untrusted key"
	default:
		// The coordinator's newest status of the node (or any), changed under its signature.
		st, ok := s.statusOf(node).(nodedrain.NodeDrainStatus)
		what = "a coordinator's status changed under its signature"
		if !ok { // none yet: one made up, claiming the coordinator's key with 64 random bytes
			st = f.fabricate(node, rid)
			sig := make([]byte, ed25519.SignatureSize)
			for i := range sig {
				sig[i] = byte(s.frng.IntN(256))
			}
			st.SignedBy, st.Signature = coordSigner.KeyID(), base64.RawStdEncoding.EncodeToString(sig)
			what = "a status with a made-up signature of the coordinator's key"
		}
		// (The message changes too, so that the status is never the coordinator's own again.)
		st.RequestID, st.Status, st.Message = rid, nodedrain.StatusComplete, "forged: "+st.Message
		r = revision{val: st}
	}
	r.by, r.forged = "forger", true
	f.writes++
	s.w.logf("a forger writes %s into the status key of %s: %s", what, node, describe(r.val))
	s.bus.put(bucketStatus, node, r)
}

// flooded reports whether one more forged value would push the last value a coordinator wrote
// out of node's key history. Known open (random runs found it): a forger that writes a key's
// whole history (8 values) while no coordinator repairs it — one paused, or in API-outage mode
// and fenced by the forgery itself — leaves a resuming coordinator no status of the node to
// resume from: it forgets the node's drain or return gate and admits another node (S3). Until
// the coordinator keeps what it needs out of the forger's reach, the forger stops short of it.
func (f *forger) flooded(node string) bool {
	bk := f.s.bus.buckets[bucketStatus]
	revs, n := bk.keys[node], 0
	for i := len(revs) - 1; i >= 0 && revs[i].forged; i-- {
		n++
	}
	return n >= bk.history-1 && n < len(revs)
}

// currentRequest is the request the node's agent works on (the forger reads request keys, or
// learnt it before a withdrawal), else the one on the bus.
func (f *forger) currentRequest(node string) string {
	if a := f.s.agentOf(node); a != nil && a.persisted.RequestID != "" {
		return a.persisted.RequestID
	}
	if r, ok := f.s.bus.value(bucketRequests, node).(nodedrain.NodeDrainRequest); ok {
		return r.RequestID
	}
	return ""
}

// fabricate makes up a status clearing rid, claiming a term and sequence beyond any real one.
func (f *forger) fabricate(node, rid string) nodedrain.NodeDrainStatus {
	st := nodedrain.NodeDrainStatus{Node: node, RequestID: rid, Status: nodedrain.StatusComplete, Message: "node drained",
		UpdatedAt: f.s.w.now, Term: 1 << 30, Seq: 1 << 30}
	if f.s.frng.IntN(4) == 0 {
		st.Status, st.Message = nodedrain.StatusNotSupported, "no other node to drain to"
	}
	return st
}

// copyOf picks what to copy: the node's own COMPLETE or NOTSUPPORTED of rid if a coordinator
// ever wrote one (the most harmful), any status of the node, any status of any node, or a delete
// marker.
func (f *forger) copyOf(node, rid string) revision {
	var own, clearing []revision
	for _, r := range f.archive {
		st := r.val.(nodedrain.NodeDrainStatus)
		if st.Node == node {
			own = append(own, r)
			if st.RequestID == rid && st.Status.Clears() {
				clearing = append(clearing, r)
			}
		}
	}
	pick := func(rs []revision) revision {
		return revision{val: rs[f.s.frng.IntN(len(rs))].val, copied: true}
	}
	switch x := f.s.frng.IntN(10); {
	case x < 4 && len(clearing) > 0:
		return pick(clearing)
	case x < 7 && len(own) > 0:
		return pick(own)
	case x < 9 && len(f.archive) > 0:
		return pick(f.archive)
	}
	return revision{copied: true} // a delete marker
}
