package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The API-unreachable rule asks the node informer's last view too: a node seen schedulable,
// missing, or as another Node object than the one cordoned does not go COMPLETE by it.
func TestAPIUnreachableAsksTheNodeInformer(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	safe := func(string, bool) (GateResult, error) { return GateResult{Safe: true}, nil }
	for name, c := range map[string]struct {
		found, cordoned bool
		uid             string
		complete        bool
	}{
		"cordoned, same object": {true, true, "u1", true}, "cordoned, UID unknown": {true, true, "", true},
		"uncordoned": {true, false, "u1", false}, "missing": {false, false, "", false}, "replaced": {true, true, "u2", false},
	} {
		t.Run(name, func(t *testing.T) {
			core := NewCore(nodedrain.DefaultPolicy(), 1)
			r := &nodedrain.NodeDrainRequest{Node: "n1", RequestID: "r1", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"}
			core.Step("n1", nodedrain.EvRequest{Request: r}, now)
			core.Step("n1", nodedrain.EvAdmit{}, now)
			core.Step("n1", nodedrain.EvResult{Op: nodedrain.OpCordon, RequestID: "r1", ByUs: true, UID: "u1"}, now)
			view := func(string) (bool, bool, string) { return c.found, c.cordoned, c.uid }
			core.APIUnreachable(time.Hour, safe, view, now)
			d, ok := core.Drain("n1")
			require.True(t, ok)
			assert.Equal(t, c.complete, d.Status.Status == nodedrain.StatusComplete, "status %s: %s", d.Status.Status, d.Status.Message)
		})
	}
}
