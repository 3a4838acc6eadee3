package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Review: only a checked confirmation read starts a command, never a delivered value. A delivery
// may stand without its checked read (the bus layer's fallback after three reads that fail or
// answer older than it: a replica behind, or a server copy the read answers "no value" for), and
// a server copy of an old genuine COMPLETE is validly signed. A delivery taken while the
// confirmation read is under way used to confirm the command in the read's place: the copy ran
// the reboot though the read found no COMPLETE.
func TestStepDeliveryDuringTheReadDoesNotConfirm(t *testing.T) {
	complete := func(rev uint64) Event {
		return EvBusStatus{Status: &nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: "r1"}, Revision: rev}
	}
	m, _, acts := playFrom(t, fresh(), t0, testPolicy(), seq(deferredReboot, []step{
		now(complete(10)),   // a copy that stood on its signature: cleared, a read asked for
		now(complete(11)),   // another, delivered while the read is under way
		now(EvStatusRead{}), // the read: no value under the key (revision 0)
	}))
	got := summaries(acts)
	assert.NotContains(t, got, "run reboot r1 #1", "the command ran though the confirmation read found no COMPLETE")
	assert.NotEqual(t, PhaseRunning, m.State.Phase)
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "read"}, got,
		"a newer delivery during the read is read again, checked")

	// That second read decides: no value, so the reboot waits (and the request is published again).
	m, _, acts = playFrom(t, m, t0, testPolicy(), []step{now(EvStatusRead{})})
	assert.Equal(t, PhaseDeferred, m.State.Phase)
	assert.NotContains(t, summaries(acts), "run reboot r1 #1")

	// A genuine COMPLETE delivered during the read, the read answering older (served before it):
	// read again; the second read, answering the COMPLETE, runs the reboot.
	cordoned := nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusCordoned, RequestID: "r1"}
	done := nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: "r1"}
	m, _, acts = playFrom(t, fresh(), t0, testPolicy(), seq(deferredReboot, []step{
		now(complete(10)),
		now(EvBusStatus{Status: &cordoned, Revision: 11}),
		now(complete(12)),
		now(EvStatusRead{Status: &cordoned, Revision: 11}), // served before the COMPLETE
	}))
	assert.Equal(t, PhaseCleared, m.State.Phase, "no roll-back to the older read: %v", summaries(acts))
	assert.Equal(t, uint64(12), m.BusRevision)
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "read"}, summaries(acts))
	m, _, acts = playFrom(t, m, t0, testPolicy(), []step{now(EvStatusRead{Status: &done, Revision: 12})})
	assert.Equal(t, []string{"run reboot r1 #1"}, summaries(acts))
	assert.Equal(t, PhaseRunning, m.State.Phase)
}
