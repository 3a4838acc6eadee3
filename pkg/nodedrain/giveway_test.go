package nodedrain

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// admitted is drainIn for a drain admitted at t0+at, past its own cordon, waiting for a gate
// recheck.
func admitted(status DrainStatus, node string, at time.Duration) Drain {
	d := drainIn(status, node, 0)
	d.Status.StartedAt, d.Status.CordonedByUs, d.CordonKnown, d.RetryOp = t0.Add(at), true, true, OpFinalGate
	return d
}

// Two drains whose volume's only copies are on their two nodes (a third copy failed after
// both were admitted) would each wait for the other's copy: the one admitted last gives way,
// and only while it can (no operation in flight, its own cordon, not a decommission).
func TestTheLaterOfTwoDrainsWaitingForEachOthersCopyGivesWay(t *testing.T) {
	peers := map[string][]VolumePeers{
		"a": {{Volume: "v1", Nodes: []string{"b"}}},
		"b": {{Volume: "v1", Nodes: []string{"a"}}, {Volume: "v2"}},
		"c": {{Volume: "v3", Nodes: []string{"a", "d"}}},
	}
	pf := func(n string) []VolumePeers { return peers[n] }
	drains := map[string]Drain{
		"a": admitted(StatusCordoned, "a", 0),
		"b": admitted(StatusDrainRetrying, "b", time.Second),
		"c": admitted(StatusCordoned, "c", 2*time.Second),
	}
	gw := GiveWay(drains, pf)
	assert.Equal(t, []string{"b"}, slices.Sorted(maps.Keys(gw)), "c's v3 has a copy on d, not in maintenance")
	assert.Contains(t, gw["b"], "the other copies of volume v1 are on a, whose drains came first")

	b := drains["b"]
	b.Waiting = OpEvict
	drains["b"] = b
	assert.Empty(t, GiveWay(drains, pf), "an eviction attempt in flight: b gives way once it is over")

	b.Waiting, b.Status.CordonedByUs = OpNone, false
	drains["b"] = b
	assert.Empty(t, GiveWay(drains, pf), "someone else's cordon, which edgedrain leaves: giving way frees no copy")

	b.Status.CordonedByUs, b.Status.CompleteSent = true, true
	drains["b"] = b
	gw = GiveWay(drains, pf)
	assert.Equal(t, []string{"a"}, slices.Sorted(maps.Keys(gw)),
		"b's COMPLETE was sent (its publication failed, it may have landed): b cannot give way, a does, though admitted first")

	b.Status.CompleteSent = false
	drains["b"] = b
	drains["a"] = admitted(StatusComplete, "a", 0)
	assert.Empty(t, GiveWay(drains, pf), "a is going down: its copy comes back with it")
}

// A drain that gives way goes back to REQUESTED and undoes its cordon; admission takes it up
// again only once that is done, and it starts over from the cordon.
func TestAGivenWayDrainUncordonsAndStartsOver(t *testing.T) {
	r := newRun(t).step(EvRequest{Request: req("r1")}).step(EvAdmit{}).ok(OpCordon).
		ok(OpGate, func(e *EvResult) {
			e.Safe = false
			e.Blockers = []Blocker{{Kind: BlockerVolume, Name: "v1", Reason: "r"}}
		})
	r.step(EvGiveWay{Reason: "giving way: x"}).expect(StatusRequested, OpUncordon)
	assert.Contains(t, r.d.Status.Message, "giving way: x; uncordoning the node")
	assert.True(t, r.d.Status.StartedAt.IsZero())
	assert.False(t, r.d.AwaitsAdmission(), "not admitted before its uncordon answers")
	r.step(EvAdmit{}).expect(StatusRequested)
	r.ok(OpUncordon)
	assert.True(t, r.d.AwaitsAdmission())
	r.step(EvAdmit{}).expect(StatusStarting, OpCordon)
	assert.Equal(t, 1, r.d.Status.Attempt)
}
