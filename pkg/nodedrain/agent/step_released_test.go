package agent

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// releasedStatus is a COMPLETE for request id whose admission slot the coordinator released as a
// stale holder's (the node counted as gone: NotReady, or its Node object missing, for too long).
func releasedStatus(id string) *nodedrain.NodeDrainStatus {
	return &nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: id, SlotReleased: true,
		Message: "COMPLETE, but the node has been NotReady since ...: admission slot released"}
}

// releasedNotSupported is a NOTSUPPORTED (a node that goes down undrained is in maintenance all
// the same) for request id whose slot the coordinator released.
func releasedNotSupported(id string) *nodedrain.NodeDrainStatus {
	st := releasedStatus(id)
	st.Status, st.Message = nodedrain.StatusNotSupported, "NOTSUPPORTED, but the node has been NotReady since ...: admission slot released"
	return st
}

// A COMPLETE whose slot was released gives the node no slot: another node may be in maintenance
// in its place, so running the operation on it would put more nodes in maintenance than
// --max-concurrent-drains allows (S3). The agent does not run it: it withdraws the request and
// asks again with a new one, which waits for admission like any other (issue 23, defect 7).
func TestStepCompleteWithReleasedSlotDoesNotRun(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		want  []string
		run   string // the run on the new request's COMPLETE
	}{
		{name: "delivered while the reboot waits",
			steps: seq(deferredReboot, []step{now(EvBusStatus{Status: releasedStatus("r1")})}),
			want:  []string{"withdraw", "accepted", "publish r1", "withdraw"}, run: "run reboot r2 #1"},
		{name: "read back to confirm a COMPLETE",
			steps: seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")), now(EvStatusRead{Status: releasedStatus("r1")})}),
			want:  []string{"withdraw", "accepted", "publish r1", "read", "withdraw"}, run: "run reboot r2 #1"},
		{name: "delivered while a failed reboot command waits to run again",
			steps: seq(deferredReboot, []step{now(status(nodedrain.StatusComplete, "r1")), now(read(nodedrain.StatusComplete, "r1")),
				now(EvCommandDone{RequestID: "r1", Err: errors.New("exit 1")}), now(EvBusStatus{Status: releasedStatus("r1")})}),
			// (The operation's second run of its command, on the new request.)
			want: []string{"withdraw", "accepted", "publish r1", "read", "run reboot r1 #1", "command-failed #1", "withdraw"},
			run:  "run reboot r2 #2"},
		{name: "a NOTSUPPORTED whose slot was released (the node went NotReady before it ran)",
			steps: seq(deferredReboot, []step{now(EvBusStatus{Status: releasedNotSupported("r1")})}),
			want:  []string{"withdraw", "accepted", "publish r1", "withdraw"}, run: "run reboot r2 #1"},
		{name: "found after a restart",
			steps: seq(deferredReboot, []step{now(EvStart{BootID: "b1"}), now(EvBusStatus{Status: releasedStatus("r1")})}),
			want:  []string{"withdraw", "accepted", "publish r1", "publish r1", "withdraw"}, run: "run reboot r2 #1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, clock, acts := playFrom(t, fresh(), t0, testPolicy(), tt.steps)
			assert.Equal(t, tt.want, summaries(acts))
			assert.Equal(t, PhaseBackoff, m.State.Phase)
			assert.False(t, m.State.OnBus, "the released request is withdrawn")
			assert.Zero(t, m.State.DrainFailures, "not a failed drain: no drain backoff")
			assert.NotEmpty(t, warnings(acts), "said why")
			assert.Equal(t, clock, m.NextWake(), "asks again at once, not after a backoff")
			// It asks again at once, with a new request, and runs only on that one's COMPLETE.
			m, _, acts = playFrom(t, m, clock, testPolicy(), []step{now(EvTimer{RequestID: "r2"}),
				now(EvBusStatus{Status: releasedStatus("r1")}), now(status(nodedrain.StatusRequested, "r2")),
				now(status(nodedrain.StatusComplete, "r2")), now(read(nodedrain.StatusComplete, "r2"))})
			assert.Equal(t, []string{"publish r2", "read", tt.run}, summaries(acts))
			assert.Equal(t, PhaseRunning, m.State.Phase)
		})
	}
}

// A decommission's COMPLETE carries SlotReleased too (the Node object is deleted: the node
// holds no slot); it is the go-ahead of the decommission, not a stale holder's release.
func TestStepDecommissionCompleteWithReleasedSlotRuns(t *testing.T) {
	st := &nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: "r1", SlotReleased: true,
		Decommission: true}
	m, _, got := play(t, fresh(), seq(up, []step{now(EvTrigger{Operation: OpDecommission, Context: nodedrain.DecommissionContext, RequestID: "r1"}),
		now(pubOK("r1")), now(EvBusStatus{Status: st}), now(EvStatusRead{Status: st})}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run decommission r1 #1"}, got)
	assert.Equal(t, PhaseRunning, m.State.Phase)
}
