package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Only the coordinator writes statuses, and it signs each (DESIGN §10). Anything else under a
// node's status key is a forgery: a server copy aimed there by a client's direct get, or a
// value without a valid signature. Agents refuse such values; the coordinator also recognises
// them, so that it never resumes from one, and puts its own word back, so that status views,
// dashboards and the Node condition do not show what an attacker wrote.

// checkStatus tells whether st, stored under key at rev (copied: a server copy), is one a
// coordinator wrote: nil, or the reason it is not.
func (e *Engine) checkStatus(key string, st nodedrain.NodeDrainStatus, copied bool) error {
	if copied {
		return nodedrain.ErrCopied
	}
	return e.cfg.TrustedKeys().Verify(key, st)
}

// statusVerdict is what a checked read of a node's status key found.
type statusVerdict int

const (
	// statusOwn: a status a coordinator wrote (signed by a trusted key, no copy).
	statusOwn statusVerdict = iota
	// statusGone: no status: the server found no message under the key, or a delete marker a
	// coordinator wrote (a forgotten node).
	statusGone
	// statusForged: anything else the key holds: a server copy (of a value, a delete marker or
	// a status reply), an undecodable value, a value without a valid signature.
	statusForged
	// statusUnread: the read failed (the bus did not answer, or answered with an error):
	// nothing is known about the key.
	statusUnread
)

// judgeStatus tells what GetChecked's answer for key (st, origin, err) is; for statusForged
// the error says why (a refusal reason), for statusUnread it is the read's error. Only the
// server's own "no message" and a coordinator's delete count as no status: anything else a
// client could have aimed at the key must not make a run forget a drain, a return gate or a
// decommission.
func (e *Engine) judgeStatus(key string, st nodedrain.NodeDrainStatus, origin pubsub.Origin, err error) (statusVerdict, error) {
	switch {
	case err == nil:
		if err := e.checkStatus(key, st, origin == pubsub.Copied); err != nil {
			return statusForged, err
		}
		return statusOwn, nil
	case errors.Is(err, pubsub.ErrNotFound) && origin != pubsub.Copied:
		return statusGone, nil
	case origin == pubsub.Copied, errors.Is(err, pubsub.ErrDecode):
		return statusForged, fmt.Errorf("%w (%w)", nodedrain.ErrCopied, err)
	}
	return statusUnread, err
}

// forgedStatus counts and logs (sampled) a value under key that no coordinator wrote.
func (e *Engine) forgedStatus(key string, rev uint64, err error) {
	reason := nodedrain.RefusalReason(err)
	e.metrics.ForgedStatuses.WithLabelValues(reason).Inc()
	e.warnings.Logger("status-forged-"+reason, e.log).WithError(err).WithFields(logrus.Fields{"node": key, "revision": rev}).
		Warn("a value under this node's status key was not written by the coordinator; putting the coordinator's back")
}

// statusEvent checks a change of a node's status key that this run did not make itself, and
// repairs a forgery.
func (e *Engine) statusEvent(ctx context.Context, ev pubsub.Event[nodedrain.NodeDrainStatus]) {
	if ev.Kind == pubsub.EventSnapshotDone {
		e.statusesLive = true
		return
	}
	if ev.Key == nodedrain.TermKey || nodedrain.ValidNodeName(ev.Key) != nil {
		return
	}
	if ev.Revision != 0 && ev.Revision == e.ownRevs[ev.Key] {
		return
	}
	switch ev.Kind {
	case pubsub.EventPut:
		// The snapshot's values were checked as the run resumed from them: signatures only.
		o := pubsub.Written
		if e.statusesLive {
			var err error
			switch o, err = e.statuses.Origin(ctx, ev.Key, ev.Revision); {
			case err != nil:
				// Unknown: judged by the signature alone now; agents check copies themselves.
				o = pubsub.Written
			case o == pubsub.Superseded:
				return // a newer value's event follows
			}
		}
		if err := e.checkStatus(ev.Key, ev.Value, o == pubsub.Copied); err != nil {
			e.forgedStatus(ev.Key, ev.Revision, err)
			e.repairStatus(ctx, ev.Key, ev.Revision)
		}
	case pubsub.EventDecodeError:
		e.forgedStatus(ev.Key, ev.Revision, ev.Err)
		e.repairStatus(ctx, ev.Key, ev.Revision)
	case pubsub.EventDelete:
		// A delete this run did not make (a copied delete marker, or a coordinator before it):
		// a drain under way gets its status back.
		if d, ok := e.core.Drain(ev.Key); ok && d.Request != nil {
			e.unpublished[ev.Key] = true
		}
	}
}

// sign numbers st as this run's next status and signs it.
func (e *Engine) sign(st nodedrain.NodeDrainStatus) nodedrain.NodeDrainStatus {
	e.seq++
	st.Term, st.Seq = int(e.term), e.seq
	return e.cfg.Signer.Sign(st)
}

// repairStatus puts the coordinator's word back under key: the node's current status if this
// run serves the node (published again, signed, with the next tick's retries); else the newest
// status a coordinator wrote there (signed anew: a status a node's agent missed, such as the
// NOTREQUESTED of a withdrawal, must not give way to a forgery), or no status. Both writes are
// conditional on the forged revision, so that a newer write stays.
func (e *Engine) repairStatus(ctx context.Context, key string, rev uint64) {
	if !e.writesItself(ctx, key) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	own, err := e.lastOwnStatus(pctx, key)
	switch {
	case err != nil:
	case own != nil:
		err = e.putSigned(pctx, key, *own, rev, true)
	default:
		err = e.statuses.UnpublishRevision(pctx, key, rev)
	}
	if err != nil && !errors.Is(err, pubsub.ErrConflict) {
		e.recheckStatusLater(key, rev, err)
	}
}

// resignStatus signs anew, with this run's key, the status st another trusted key signed under
// key at rev (a key being rotated out): once the old key is no longer trusted, agents would
// refuse it and this coordinator would take it for a forgery.
func (e *Engine) resignStatus(ctx context.Context, key string, st nodedrain.NodeDrainStatus, rev uint64) {
	if !e.writesItself(ctx, key) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := e.putSigned(pctx, key, st, rev, false); err != nil && !errors.Is(err, pubsub.ErrConflict) {
		e.log.WithField("node", key).WithError(err).Warn("cannot sign a status anew with the current key")
	}
}

// writesItself reports whether a repair of key's status is this function's to write: not when
// this run serves the node (its own status is published again, with the tick's retries), and
// only while the run holds the Lease. In API-outage mode a run's writes are fenced by the
// bucket's last revision; these, conditional on the key alone, would pass over a newer
// coordinator's term record and un-fence the run (the simulation found it): they wait (the
// tick tries again) until the run leads again.
func (e *Engine) writesItself(ctx context.Context, key string) bool {
	if _, ok := e.core.Drain(key); ok {
		e.unpublished[key] = true
		return false
	}
	if !stillLeading(ctx) {
		e.repairs[key] = true
		return false
	}
	return true
}

// putSigned writes st, numbered and signed as this run's next status, under key on condition
// that key's revision is rev.
func (e *Engine) putSigned(ctx context.Context, key string, st nodedrain.NodeDrainStatus, rev uint64, restored bool) error {
	put, err := e.statuses.PublishIfRevision(ctx, key, e.sign(st), rev, restored)
	if err == nil {
		e.ownRevs[key] = put
		if put == e.lastSeq+1 {
			// A repair is conditional on its key's revision, not fenced on the bucket's end:
			// the run's fence moves past it only when nothing came between (a takeover's term
			// record in between must still refuse the next status write).
			e.lastSeq = put
		}
	}
	return err
}

// recheckStatusLater logs a repair that failed; the key is looked at again every tick (agents
// refuse the forgery meanwhile).
func (e *Engine) recheckStatusLater(key string, rev uint64, err error) {
	e.repairs[key] = true
	e.warnings.Logger("status-repair-failed", e.log).WithFields(logrus.Fields{"node": key, "revision": rev}).WithError(err).
		Warn("cannot repair a forged status yet; trying again")
}

// Bounds of retryRepairs: at most maxRepairReads keys a tick, for at most repairReadBudget
// (checked before each key: one read may take its timeout), so that thousands of keys left to
// repair (a flood of forgeries while the run could not write) do not hold the engine's loop.
// A key that cannot be read at maxRepairReadFailures ticks running is given up.
const (
	maxRepairReads        = 16
	repairReadBudget      = 500 * time.Millisecond
	maxRepairReadFailures = 30
)

// retryRepairs looks again at the status keys whose forgery was not repaired: still forged, it
// is repaired now (at its current revision); anything else (repaired, a newer status) ends it.
// It takes the keys in turn, from where the last tick stopped, so that keys that cannot be read
// yet do not keep the others waiting.
func (e *Engine) retryRepairs(ctx context.Context) {
	keys := slices.Sorted(maps.Keys(e.repairs))
	first, _ := slices.BinarySearch(keys, e.repairNext)
	last := e.currentRevision(ctx)
	start := time.Now()
	for n := 0; n < len(keys) && n < maxRepairReads && time.Since(start) < repairReadBudget; n++ {
		if !stillLeading(ctx) {
			return // repairs wait for the Lease: no reads that could not end in one
		}
		key := keys[(first+n)%len(keys)]
		e.repairNext = key + "\x00" // the next tick starts after it (no key holds a NUL)
		delete(e.repairs, key)
		_, rev, v, err := e.readStatus(ctx, key, last)
		if v != statusUnread {
			delete(e.repairFails, key)
		}
		switch v {
		case statusForged: // a copied delete marker or status reply included: it hides the node's status
			e.repairStatus(ctx, key, rev)
		case statusUnread:
			e.repairUnread(key, err)
		}
	}
}

// repairUnread keeps a key whose status could not be read for a later tick, or gives it up
// (logged, sampled) after maxRepairReadFailures: agents refuse the forgery meanwhile, and the
// key is looked at again when it changes or a run resumes.
func (e *Engine) repairUnread(key string, err error) {
	e.repairFails[key]++
	if e.repairFails[key] < maxRepairReadFailures {
		e.repairs[key] = true
		return
	}
	delete(e.repairFails, key)
	e.repairsLost++
	e.warnings.Logger("status-repair-given-up", e.log).WithFields(logrus.Fields{"node": key, "given_up": e.repairsLost}).WithError(err).
		Warnf("giving up repairing a forged status: its key could not be read at %d ticks running (agents refuse the forgery; "+
			"it is looked at again when the key changes or a coordinator resumes)", maxRepairReadFailures)
}

// readStatus reads key's status and judges it (judgeStatus): with a direct get answered by a
// replica that has applied the bucket's revision atLeast (GetCurrent), and when that gives no
// answer, through the stream's message API (GetStored, its leader's), so that a reply a direct
// get cannot make sense of, direct gets that are not answered, or a follower that lags, do not
// leave the key unread or read stale. Each read is bounded. (A follower that lags answers a
// plain direct get with the key's value as it had it: a resume took a drain's status for none
// and announced it again, breaking E1; or an older status for the current.)
func (e *Engine) readStatus(ctx context.Context, key string, atLeast uint64) (nodedrain.NodeDrainStatus, uint64, statusVerdict, error) {
	rctx, cancel := context.WithTimeout(ctx, publishTimeout)
	st, rev, origin, err := e.statuses.GetCurrent(rctx, key, atLeast)
	cancel()
	v, verr := e.judgeStatus(key, st, origin, err)
	if v != statusUnread {
		return st, rev, v, verr
	}
	rctx, cancel = context.WithTimeout(ctx, publishTimeout)
	st, rev, origin, err = e.statuses.GetStored(rctx, key)
	cancel()
	v, err = e.judgeStatus(key, st, origin, err)
	if v == statusUnread {
		err = fmt.Errorf("%w; through the stream's message API: %w", verr, err)
	}
	return st, rev, v, err
}

// lastOwnStatus is the newest status, by the coordinator's order (Term, Seq), among the values
// under key in the bucket's kept history that a coordinator wrote (no copy, signed by a trusted
// key) since a coordinator last removed the key's status; nil: none.
func (e *Engine) lastOwnStatus(ctx context.Context, key string) (*nodedrain.NodeDrainStatus, error) {
	hist, err := e.statuses.History(ctx, key)
	if err != nil {
		return nil, err
	}
	var newest *nodedrain.NodeDrainStatus
	for _, r := range hist { // newest revision first
		if !r.Deleted && (r.Err != nil || e.cfg.TrustedKeys().Verify(key, r.Value) != nil) {
			continue
		}
		o, err := e.statuses.Origin(ctx, key, r.Rev)
		if err != nil {
			return nil, err
		}
		switch {
		case o != pubsub.Written && o != pubsub.Restored:
			continue // a copy, or superseded meanwhile
		case r.Deleted:
			return newest, nil // removed by a coordinator (a forgotten node): nothing before it
		}
		if newest == nil || r.Value.Newer(*newest) {
			st := r.Value
			newest = &st
		}
	}
	return newest, nil
}

// readStatuses reads every node's published status for a resume: the ones a coordinator wrote
// (statuses), the keys holding anything else (forged, at that revision: resumed from, a forgery
// would be signed as this coordinator's own; repaired once resumed), and the statuses signed
// by another trusted key (resign, at that revision: a key being rotated out). A forged key,
// an undecodable value, a copied delete marker or status reply included, is resumed from the
// newest status a coordinator wrote there: a forgery must not make the run forget a drain, a
// return gate or a decommission. For the same reason a key that cannot be read fails the
// resume (the run is started again), rather than being left out.
func (e *Engine) readStatuses(ctx context.Context) (statuses map[string]nodedrain.NodeDrainStatus, forged, resign map[string]uint64, err error) {
	statuses, forged, resign = map[string]nodedrain.NodeDrainStatus{}, map[string]uint64{}, map[string]uint64{}
	keys, last, err := e.statusKeys(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, k := range keys {
		if k == nodedrain.TermKey || nodedrain.ValidNodeName(k) != nil {
			continue
		}
		st, rev, v, err := e.readStatus(ctx, k, last)
		switch v {
		case statusGone:
			continue
		case statusUnread:
			return nil, nil, nil, fmt.Errorf("read the status of %s/%s for the resume (a drain, a return gate or a decommission may be under way there): %w",
				nodedrain.StatusBucket, k, err)
		case statusForged:
			e.forgedStatus(k, rev, err)
			forged[k] = rev
			hctx, cancel := context.WithTimeout(ctx, historyTimeout)
			own, err := e.lastOwnStatus(hctx, k)
			cancel()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("read the history of %s/%s under a forged value: %w", nodedrain.StatusBucket, k, err)
			}
			if own != nil {
				statuses[k] = *own
			}
			continue
		}
		statuses[k] = st
		if st.SignedBy != e.cfg.Signer.KeyID() {
			resign[k] = rev
		}
	}
	return statuses, forged, resign, nil
}

// historyTimeout bounds the reads of one key's kept history (lastOwnStatus: the history, then
// one read per revision kept).
const historyTimeout = 10 * time.Second

// statusKeys lists every key of the status bucket that holds a message, a delete marker
// included (the bucket's Keys leaves out keys whose newest message is one, which a copied
// delete marker would hide from the resume), and the bucket's last revision then (the stream's
// leader answers both): the keys' reads must be answered as of it.
func (e *Engine) statusKeys(ctx context.Context) ([]string, uint64, error) {
	stream, err := e.cfg.JetStream.Stream(ctx, "KV_"+nodedrain.StatusBucket)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", nodedrain.StatusBucket, err)
	}
	prefix := "$KV." + nodedrain.StatusBucket + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", nodedrain.StatusBucket, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, prefix))
	}
	slices.Sort(keys)
	return keys, info.State.LastSeq, nil
}

// currentRevision is the bucket's last revision as its stream's leader tells it, or (no answer)
// the run's own last write: a read answered as of it is no older than what the run knows.
func (e *Engine) currentRevision(ctx context.Context) uint64 {
	rctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if last, err := e.statuses.LastRevision(rctx); err == nil {
		return max(last, e.lastSeq)
	}
	return e.lastSeq
}
