package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Every write this coordinator makes to the status bucket is fenced: it lands only while the
// bucket's stream still ends at this run's own last write (pubsub.PublishIfLast and
// UnpublishIfLast on lastSeq). The Lease alone fences by time: a run paused between its lease
// check and its write (a stalled VM, CPU throttling) or a write delivered late after a partition
// could land a stale status after another coordinator took over. A coordinator that takes over
// writes its term record before anything else, so such a write is refused.
//
// A refusal is either a takeover (a term record a coordinator wrote after this run's own: the run
// stops), this run's own write whose reply was lost, or a write no coordinator made (a forgery or
// a server copy, repaired on its own): then the next write is fenced on the bucket's last
// revision as of now.

// errFenced says a status write was refused because another coordinator took over.
var errFenced = errors.New("another coordinator has taken over (its term record is on the bus)")

// fenceRefused handles a write refused with pubsub.ErrConflict. It returns errFenced after
// stopping the run when another coordinator took over; nil when the write may be tried again
// (lastSeq moved past writes no coordinator made); or why it could not tell (lastSeq unchanged:
// the next try is refused again until it can).
func (e *Engine) fenceRefused(ctx context.Context, what string, refusal error) error {
	// The bucket's end first, then the term records: a takeover written after this read is
	// after last, so a write fenced on last is still refused.
	last, err := e.statuses.LastRevision(ctx)
	if err != nil {
		return err
	}
	// A replica that takes its stream for leaderless answers the stream's info from what it has
	// applied (a NATS cluster regaining its quorum): behind the leader that refused the write.
	// Stepping to it would be refused again, at once and over and over; the write waits for the
	// next try instead.
	if at, ok := pubsub.RefusedAt(refusal); ok && at > last {
		return fmt.Errorf("the bucket's stream info (revision %d) is behind its leader (revision %d): "+
			"writing again once it has caught up", last, at)
	}
	over, err := e.takenOver(ctx, last)
	if err != nil {
		return err
	}
	if over {
		e.metrics.FencedWrites.Inc()
		e.log.WithField("write", what).Warn("write to the status bucket refused: another coordinator has written its term record " +
			"since this one's, so it is the active one now; this coordinator stops acting")
		leaveOutage(ctx, "another coordinator took over")
		e.stopRun()
		return errFenced
	}
	e.log.WithField("write", what).Warn("write to the status bucket refused: the bucket was written since this coordinator's " +
		"last acknowledged write, by no other coordinator (a write of its own whose reply was lost, or a value no coordinator " +
		"wrote, repaired separately); writing again after it, unless it is a COMPLETE on checks too old to act on again")
	e.lastSeq = max(e.lastSeq, last)
	return nil
}

// takenOver reports whether a coordinator wrote a term record after this run's, up to the
// bucket's revision last: a revision of the term key newer than e.term that is not a server
// copy. (A copy cannot hide a takeover by standing in for it; only a flood of more copies than
// the key's history keeps could push the record out, and the Lease still fences the replica that
// lost it.)
func (e *Engine) takenOver(ctx context.Context, last uint64) (bool, error) {
	// The current record first, with one direct get: the stream's replicas answer it even while
	// the cluster's JetStream API cannot create a consumer (a NATS cluster regaining its quorum),
	// which the history needs; a status write refused then (its ack lost in the outage) would
	// wait for it. Answered only by a replica that has applied last (GetCurrent): a follower
	// that lags answers a direct get with the record it had, this run's own while another
	// coordinator's is already written, and the run would step over the takeover and write
	// after it (invariant S1, found by the simulation with replicated buckets). Else through the stream's message API (its
	// leader's).
	_, rev, origin, err := e.terms.GetCurrent(ctx, nodedrain.TermKey, last)
	if err != nil && !errors.Is(err, pubsub.ErrNotFound) && !errors.Is(err, pubsub.ErrDecode) {
		_, rev, origin, err = e.terms.GetStored(ctx, nodedrain.TermKey) // (no current replica answered)
	}
	switch {
	case (err == nil || errors.Is(err, pubsub.ErrDecode)) && origin != pubsub.Copied:
		return rev > e.term, nil // (a newer record a coordinator wrote; ours, else)
	case errors.Is(err, pubsub.ErrNotFound) && origin != pubsub.Copied:
		return false, nil // (no record: none newer)
	case err != nil && !errors.Is(err, pubsub.ErrNotFound) && !errors.Is(err, pubsub.ErrDecode):
		return false, fmt.Errorf("read the term record: %w", err)
	}
	// A server copy stands there: a record a coordinator wrote may be behind it.
	revs, err := e.terms.History(ctx, nodedrain.TermKey)
	if err != nil {
		return false, fmt.Errorf("read the term records: %w", err)
	}
	for _, r := range revs {
		if r.Rev <= e.term {
			break
		}
		if r.Deleted {
			continue
		}
		origin, err := e.terms.Origin(ctx, nodedrain.TermKey, r.Rev)
		if err != nil {
			return false, fmt.Errorf("read term record %d: %w", r.Rev, err)
		}
		// A record written as a coordinator writes (or put back by an administrator). A revision
		// gone by now (Superseded, pushed out by later copies) proves nothing: a forger's flood
		// must not stop the run over and over.
		if origin == pubsub.Written || origin == pubsub.Restored {
			return true, nil
		}
	}
	return false, nil
}
