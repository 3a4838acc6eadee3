package agent

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestParseOperationDecommission(t *testing.T) {
	for _, s := range []string{"decommission", " Decommission "} {
		op, err := ParseOperation(s)
		require.NoError(t, err, s)
		assert.Equal(t, OpDecommission, op)
	}
	_, err := ParseOperation("retire")
	assert.True(t, errors.Is(err, ErrUnknownOperation))
	assert.ErrorContains(t, err, "want reboot, shutdown, update or decommission")

	assert.Contains(t, Operations, OpDecommission)
	assert.True(t, OpDecommission.Valid())
	assert.Equal(t, nodedrain.RequesterDeviceOp, OpDecommission.Requester())
	assert.Equal(t, "a decommission", OpDecommission.withArticle())
	p := testPolicy()
	p.UpdateReboots = true
	assert.False(t, OpDecommission.goesDown(p), "a decommission ends when its command returns")
}

func TestRequestContext(t *testing.T) {
	tests := []struct {
		name  string
		op    Operation
		given string
		want  string
		err   string // "": accepted
	}{
		{name: "decommission alone", op: OpDecommission, want: "decommission"},
		{name: "decommission with the operator's context", op: OpDecommission, given: " disk failed ", want: "decommission disk failed"},
		{name: "decommission whose context declares it already", op: OpDecommission, given: "decommission disk failed",
			want: "decommission disk failed"},
		{name: "decommission whose context is the word", op: OpDecommission, given: "decommission", want: "decommission"},
		{name: "decommission whose context only looks like it", op: OpDecommission, given: "decommissioning rack 4",
			want: "decommission decommissioning rack 4"},
		{name: "decommission beyond the length limit", op: OpDecommission, given: strings.Repeat("x", nodedrain.MaxContextLen-5),
			err: "longer than the limit"},
		{name: "reboot alone", op: OpReboot, want: "reboot"},
		{name: "reboot with a context", op: OpReboot, given: "kernel 6.12, decommission later", want: "kernel 6.12, decommission later"},
		{name: "reboot whose context is a longer word", op: OpReboot, given: "decommissioning soon", want: "decommissioning soon"},
		{name: "reboot declaring a decommission", op: OpReboot, given: "decommission soon", err: "delete the Node object"},
		{name: "shutdown declaring a decommission", op: OpShutdown, given: " decommission ", err: "delete the Node object"},
		{name: "update declaring a decommission", op: OpUpdate, given: "decommission v2", err: "delete the Node object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := requestContext(tt.op, tt.given)
			if tt.err != "" {
				require.Error(t, err)
				assert.ErrorContains(t, err, tt.err)
				if tt.op != OpDecommission {
					assert.True(t, errors.Is(err, ErrDecommissionContext), "%v", err)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			// What the coordinator reads: a decommission for OpDecommission and nothing else.
			r := nodedrain.NodeDrainRequest{RequestedBy: tt.op.Requester(), Context: got}
			assert.Equal(t, tt.op == OpDecommission, nodedrain.DeclaresDecommission(r))
		})
	}
}

func TestStepRefusesAContextNotFittingTheOperation(t *testing.T) {
	for _, ev := range []EvTrigger{
		{Operation: OpReboot, Context: "decommission", RequestID: "r1"},
		{Operation: OpShutdown, Context: "decommission soon", RequestID: "r1"},
		{Operation: OpDecommission, Context: "retire", RequestID: "r1"},
	} {
		t.Run(string(ev.Operation)+" "+ev.Context, func(t *testing.T) {
			m, _, got := play(t, fresh(), seq(up, []step{now(ev)}))
			assert.Equal(t, []string{"withdraw", "refused"}, got, "nothing is published")
			assert.Equal(t, PhaseIdle, m.State.Phase)
		})
	}
}

func TestStepDecommission(t *testing.T) {
	p := testPolicy()
	p.UpdateReboots = true // says nothing about a decommission
	ev := EvTrigger{Operation: OpDecommission, Context: "decommission disk failed", RequestID: "r1"}
	m, _, acts := playFrom(t, fresh(), t0, p, seq(up, []step{now(ev), now(pubOK("r1")), now(status(nodedrain.StatusCordoned, "r1")),
		now(status(nodedrain.StatusComplete, "r1")), now(readDecommissioned("r1"))}))
	assert.Equal(t, []string{"withdraw", "accepted", "publish r1", "read", "run decommission r1 #1"}, summaries(acts))
	require.Equal(t, PhaseRunning, m.State.Phase)
	var published nodedrain.NodeDrainRequest
	for _, a := range acts {
		if pr, ok := a.(PublishRequest); ok {
			published = pr.Request
		}
	}
	assert.Equal(t, nodedrain.NodeDrainRequest{Node: "edge-1", RequestID: "r1", RequestedAt: t0, RequestedBy: nodedrain.RequesterDeviceOp,
		Context: "decommission disk failed", BootID: "b1"}, published)
	assert.True(t, nodedrain.DeclaresDecommission(published))

	t.Run("the command returns: the request is withdrawn at once, no boot ID awaited", func(t *testing.T) {
		m, acts := Step(m, EvCommandDone{RequestID: "r1"}, t0, p)
		assert.Equal(t, []string{"withdraw"}, summaries(acts))
		assert.Equal(t, []WithdrawRequest{{RequestID: "r1", Own: []string{"r1"}}}, withdrawals(acts))
		assert.Equal(t, PhaseIdle, m.State.Phase)
		assert.True(t, m.NextWake().IsZero(), "nothing left to wait for")

		// Retired: no other request on this boot (a reboot sentinel left from a kernel update
		// would ask for a Node object that no longer exists), but after a new boot, yes.
		_, acts = Step(m, EvTrigger{Operation: OpReboot, Context: "reboot", RequestID: "r2", Sentinel: "/var/run/reboot-required", SentinelModTime: 7}, t0, p)
		assert.Equal(t, []string{"refused"}, summaries(acts))
		assert.Contains(t, acts[0].(TriggerResult).Message, "this node was decommissioned")
		m, _ = Step(m, EvStart{BootID: "b2"}, t0, p)
		_, acts = Step(m, EvTrigger{Operation: OpReboot, Context: "reboot", RequestID: "r3"}, t0, p)
		assert.Contains(t, summaries(acts), "accepted", "a machine booted again takes requests")
	})
	t.Run("the command fails: it runs again after its backoff, the request stays", func(t *testing.T) {
		m, clock, acts := playFrom(t, m, t0, p, []step{now(EvCommandDone{RequestID: "r1", Err: errors.New("exit status 1")}),
			at(p.CommandRetryBackoff, EvTimer{}), now(readDecommissioned("r1"))})
		assert.Equal(t, []string{"command-failed #1", "read", "run decommission r1 #2"}, summaries(acts))
		assert.Equal(t, PhaseRunning, m.State.Phase)
		assert.True(t, m.State.OnBus)
		assert.Equal(t, t0.Add(p.CommandRetryBackoff), clock)
	})
}

func TestStepDecommissionRestart(t *testing.T) {
	running := seq(up, []step{now(sentinel(OpDecommission, "r1", 42)), now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")),
		now(readDecommissioned("r1"))})
	t.Run("the machine went down under the command and came back: withdraw, sentinel handled", func(t *testing.T) {
		m, got := restart(t, running, "b2", now(wdOK), now(EvBusSnapshot{}), now(sentinel(OpDecommission, "r2", 42)))
		assert.Equal(t, []string{"withdraw", "refused"}, got)
		assert.Equal(t, PhaseIdle, m.State.Phase)
		assert.Equal(t, int64(42), m.State.Handled[OpDecommission])
	})
	t.Run("the agent restarted while the command ran, same boot: it counts as failed and runs again", func(t *testing.T) {
		m, got := restart(t, running, "b1", now(pubOK("r1")), now(status(nodedrain.StatusComplete, "r1")), now(EvBusSnapshot{}),
			at(testPolicy().CommandRetryBackoff, EvTimer{}), now(readDecommissioned("r1")))
		assert.Equal(t, []string{"command-failed #1", "publish r1", "read", "run decommission r1 #2"}, got)
		assert.Equal(t, PhaseRunning, m.State.Phase)
	})
}

func TestStateRefusesAContextNotFittingTheOperation(t *testing.T) {
	for _, tt := range []struct{ op, context string }{{"reboot", "decommission soon"}, {"decommission", "retire"}} {
		t.Run(tt.op, func(t *testing.T) {
			s := NewStateStore(t.TempDir())
			content := `{"version":1,"state":{"phase":"deferred","operation":"` + tt.op + `","context":"` + tt.context +
				`","requestID":"r1","requestedAt":"2026-03-01T12:00:00Z","onBus":true}}`
			require.NoError(t, os.WriteFile(s.Path(), []byte(content), 0o600))
			_, err := s.Load()
			assert.True(t, errors.Is(err, ErrCorruptState), "%v", err)
		})
	}
}

// A decommission runs only on a COMPLETE that says the node was decommissioned: a NOTSUPPORTED,
// or an older coordinator's COMPLETE without the flag, does not wipe the machine undrained.
func TestStepDecommissionNeedsTheCoordinatorsWord(t *testing.T) {
	p := testPolicy()
	ev := EvTrigger{Operation: OpDecommission, Context: "decommission", RequestID: "r1"}
	for _, plain := range []nodedrain.DrainStatus{nodedrain.StatusComplete, nodedrain.StatusNotSupported} {
		t.Run(plain.String(), func(t *testing.T) {
			m, _, acts := playFrom(t, fresh(), t0, p, seq(up, []step{now(ev), now(pubOK("r1")), now(status(plain, "r1")), now(read(plain, "r1"))}))
			assert.NotContains(t, summaries(acts), "run decommission r1 #1")
			var warned bool
			for _, a := range acts {
				if r, ok := a.(Report); ok && strings.Contains(r.Message, "does not say the node was decommissioned") {
					warned = true
				}
			}
			assert.True(t, warned, "the agent says why: %v", summaries(acts))
			assert.NotEqual(t, PhaseRunning, m.State.Phase)
		})
	}
}

// readDecommissioned is the answer to a ReadStatus: a COMPLETE saying the node was decommissioned.
func readDecommissioned(id string) Event {
	return EvStatusRead{Status: &nodedrain.NodeDrainStatus{Node: "edge-1", Status: nodedrain.StatusComplete, RequestID: id, Decommission: true}}
}
