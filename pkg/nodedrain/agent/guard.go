package agent

import (
	"fmt"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// StatusGuard decides which statuses read from the bus the agent takes (DESIGN §10). The bus
// says who may publish to the node's status key, not who wrote what it holds: the server writes
// a copy of any stored message where a client aims a reply, and a status the coordinator once
// published stays valid to copy. So the agent takes a status only when
//   - it is no server copy (the bus tells: GetChecked);
//   - its signature verifies under a trusted key, for this node's key;
//   - it is not older, by the coordinator's order (Term, Seq), than a status already taken:
//     a validly signed old status stored again later is a replay.
//
// Reset forgets what was taken, for a bucket that was replaced (its revisions and the
// coordinator's terms start again).
//
// A status stored at an earlier revision than one already taken is stale (a watch delivery
// behind a read): dropped without being refused. The guard is pure, so that the simulation runs
// the very rules the agent does.
type StatusGuard struct {
	// Keys returns the keys trusted now (they may be reloaded while the agent runs).
	Keys func() nodedrain.KeySet

	newest    nodedrain.NodeDrainStatus // the newest status taken (by Term, Seq)
	newestRev uint64                    // the revision of the newest value (status or delete) taken
	taken     bool
}

// Verdict is what the guard made of one stored value.
type Verdict int

// Verdicts.
const (
	// VerdictTake: act on it.
	VerdictTake Verdict = iota
	// VerdictStale: an older revision than one already taken; drop it silently.
	VerdictStale
	// VerdictRefuse: a forgery, copy or replay; count it, log it (sampled), never act on it.
	VerdictRefuse
)

// Check judges the status st stored under key at revision rev (copied: the bus says it is a
// server copy). The error says why a status is refused.
func (g *StatusGuard) Check(key string, rev uint64, st nodedrain.NodeDrainStatus, copied bool) (Verdict, error) {
	if rev != 0 && rev < g.newestRev {
		return VerdictStale, nil
	}
	if copied {
		return VerdictRefuse, nodedrain.ErrCopied
	}
	if err := g.Keys().Verify(key, st); err != nil {
		return VerdictRefuse, err
	}
	// The same (Term, Seq) again is the same status (a coordinator never reuses a pair): taken;
	// an older one stored later is a replay.
	if g.taken && rev != g.newestRev && g.newest.Newer(st) {
		return VerdictRefuse, fmt.Errorf("%w: term %d sequence %d at revision %d, after term %d sequence %d at revision %d",
			nodedrain.ErrReplayed, st.Term, st.Seq, rev, g.newest.Term, g.newest.Seq, g.newestRev)
	}
	if !g.taken || st.Newer(g.newest) {
		g.newest, g.taken = st, true
	}
	g.newestRev = max(g.newestRev, rev)
	return VerdictTake, nil
}

// CheckDelete judges the removal of the node's status at revision rev: taken unless stale. A
// delete carries nothing to act on beyond "no status" (the agent then waits or asks again).
//
// rev 0 is a read of a key that holds no message at all. Once a value was taken, that is stale
// too: a removal leaves a delete marker with its revision, so only a replica that has not applied
// the key's first write answers so (a follower of an R3 bucket that lags, answering a direct
// get); taken for "no status", it made an agent that had just taken COMPLETE wait for a status
// that never came again (invariant L1). (A replaced bucket resets the guard.)
func (g *StatusGuard) CheckDelete(rev uint64) Verdict {
	if rev < g.newestRev {
		return VerdictStale
	}
	g.newestRev = max(g.newestRev, rev)
	return VerdictTake
}

// Reset forgets every status taken: the bucket was replaced, so its revisions (and the terms,
// which are revisions of it) start again.
func (g *StatusGuard) Reset() { g.newest, g.newestRev, g.taken = nodedrain.NodeDrainStatus{}, 0, false }
