package agent

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestStatusGuard(t *testing.T) {
	coord := nodedrain.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	rotatedOut := nodedrain.NewSigner(ed25519.NewKeyFromSeed([]byte(strings.Repeat("o", ed25519.SeedSize))))
	trusted := nodedrain.NewKeySet(coord.Public())
	sign := func(status nodedrain.DrainStatus, id string, term, seq int) nodedrain.NodeDrainStatus {
		return coord.Sign(nodedrain.NodeDrainStatus{Node: "n1", Status: status, RequestID: id, Term: term, Seq: seq})
	}
	g := StatusGuard{Keys: func() nodedrain.KeySet { return trusted }}
	check := func(rev uint64, st nodedrain.NodeDrainStatus, copied bool) (Verdict, error) {
		return g.Check("n1", rev, st, copied)
	}

	complete := sign(nodedrain.StatusComplete, "r1", 3, 10)
	v, err := check(20, complete, false)
	require.NoError(t, err)
	require.Equal(t, VerdictTake, v)
	v, _ = check(20, complete, false)
	require.Equal(t, VerdictTake, v, "the same revision again (a watch delivery and a read of it)")

	withdrawn := sign(nodedrain.StatusNotRequested, "r1", 3, 11)
	v, _ = check(22, withdrawn, false)
	require.Equal(t, VerdictTake, v)

	// The old COMPLETE of the same request, stored again after the withdrawal: a copy, and even
	// if the bus could not tell, a replay.
	v, err = check(23, complete, true)
	require.Equal(t, VerdictRefuse, v)
	require.ErrorIs(t, err, nodedrain.ErrCopied)
	v, err = check(23, complete, false)
	require.Equal(t, VerdictRefuse, v)
	require.ErrorIs(t, err, nodedrain.ErrReplayed)
	// The newest status stored again is the same status: taken (a copy is refused as one).
	v, err = check(24, withdrawn, false)
	require.NoError(t, err)
	require.Equal(t, VerdictTake, v)

	// A delivery behind what was taken is stale, not an attack.
	v, err = check(20, complete, false)
	require.Equal(t, VerdictStale, v)
	require.NoError(t, err)

	for name, c := range map[string]struct {
		st   nodedrain.NodeDrainStatus
		want error
	}{
		"unsigned":        {nodedrain.NodeDrainStatus{Node: "n1", Status: nodedrain.StatusComplete, RequestID: "r2", Term: 9}, nodedrain.ErrUnsigned},
		"rotated-out key": {rotatedOut.Sign(nodedrain.NodeDrainStatus{Node: "n1", Status: nodedrain.StatusComplete, RequestID: "r2", Term: 9}), nodedrain.ErrUntrustedKey},
		"another node's":  {coord.Sign(nodedrain.NodeDrainStatus{Node: "n2", Status: nodedrain.StatusComplete, RequestID: "r2", Term: 9}), nodedrain.ErrWrongKey},
		"changed after signing": {func() nodedrain.NodeDrainStatus {
			st := sign(nodedrain.StatusRequested, "r2", 9, 1)
			st.Status = nodedrain.StatusComplete
			return st
		}(), nodedrain.ErrBadSignature},
	} {
		v, err := check(30, c.st, false)
		require.Equal(t, VerdictRefuse, v, name)
		require.ErrorIs(t, err, c.want, name)
	}

	// A new coordinator run (a higher term) starts its sequence again: newer all the same.
	v, err = check(40, sign(nodedrain.StatusRequested, "r2", 4, 1), false)
	require.NoError(t, err)
	require.Equal(t, VerdictTake, v)
	// A delete after it is taken; one before it is stale.
	require.Equal(t, VerdictStale, g.CheckDelete(39))
	require.Equal(t, VerdictTake, g.CheckDelete(41))
	v, err = check(42, withdrawn, false)
	require.ErrorIs(t, err, nodedrain.ErrReplayed, "the delete does not reset the order")
	require.Equal(t, VerdictRefuse, v)

	// A replaced bucket starts its revisions and terms again: after Reset they are taken.
	g.Reset()
	v, err = check(2, sign(nodedrain.StatusNotRequested, "r3", 1, 1), false)
	require.NoError(t, err)
	require.Equal(t, VerdictTake, v)
}

// A read of the node's key that finds no message at all (revision 0) after a status was taken is
// a replica behind that status (a lagging follower answering a direct get), not "no status": a
// removal leaves a delete marker with its revision (simulation, seed 8000058). Before anything
// is taken, or after the bucket was replaced, it is "no status".
func TestStatusGuardEmptyKeyAfterATake(t *testing.T) {
	coord := nodedrain.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	trusted := nodedrain.NewKeySet(coord.Public())
	g := StatusGuard{Keys: func() nodedrain.KeySet { return trusted }}
	require.Equal(t, VerdictTake, g.CheckDelete(0), "nothing taken yet: the key has no status")
	complete := coord.Sign(nodedrain.NodeDrainStatus{Node: "n1", Status: nodedrain.StatusComplete, RequestID: "r1", Term: 3, Seq: 10})
	v, err := g.Check("n1", 21, complete, false)
	require.NoError(t, err)
	require.Equal(t, VerdictTake, v)
	require.Equal(t, VerdictStale, g.CheckDelete(0), "a replica that has not applied the key's first write")
	require.Equal(t, VerdictTake, g.CheckDelete(22), "a removal after it")
	g.Reset()
	require.Equal(t, VerdictTake, g.CheckDelete(0), "a replaced bucket")
}
