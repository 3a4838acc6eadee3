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
			core := cordonedCore(now)
			view := func(string) (bool, bool, string) { return c.found, c.cordoned, c.uid }
			core.APIUnreachable(time.Hour, safe, view, now)
			d, ok := core.Drain("n1")
			require.True(t, ok)
			assert.Equal(t, c.complete, d.Status.Status == nodedrain.StatusComplete, "status %s: %s", d.Status.Status, d.Status.Message)
		})
	}
}

// An outage that began soon after an earlier one ended finds the informers perhaps still
// listing again: their last view may be older than the outage, and the rule does not decide on
// it. One that began once they had had time to list again does.
func TestAPIUnreachableRuleWaitsForCachesThatMayBeBehind(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	safe := func(string, bool) (GateResult, error) { return GateResult{Safe: true}, nil }
	cordoned := func(string) (bool, bool, string) { return true, true, "u1" }
	for name, c := range map[string]struct {
		answeredBefore time.Duration // how long before this outage the API answered again (0: it never went)
		complete       bool
	}{
		"no earlier outage": {0, true}, "soon after one": {10 * time.Second, false},
		"just inside the settling time": {lastViewSettles - time.Second, false}, "once settled": {lastViewSettles, true},
	} {
		t.Run(name, func(t *testing.T) {
			core := cordonedCore(now)
			down := now.Add(5 * time.Minute)
			if c.answeredBefore > 0 {
				core.APIAnswered(down.Add(-c.answeredBefore))
			}
			core.SetAPIUnreachable(down)
			core.APIUnreachable(time.Hour, safe, cordoned, down.Add(time.Hour))
			d, ok := core.Drain("n1")
			require.True(t, ok)
			assert.Equal(t, c.complete, d.Status.Status == nodedrain.StatusComplete, "status %s: %s", d.Status.Status, d.Status.Message)
			if !c.complete {
				assert.Contains(t, d.Status.Message, "soon after an earlier outage")
			}
		})
	}
}

// cordonedCore is a Core whose drain of n1 (request r1) has cordoned Node object u1 at now.
func cordonedCore(now time.Time) *Core {
	core := NewCore(nodedrain.DefaultPolicy(), 1)
	r := &nodedrain.NodeDrainRequest{Node: "n1", RequestID: "r1", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"}
	core.Step("n1", nodedrain.EvRequest{Request: r}, now)
	core.Step("n1", nodedrain.EvAdmit{}, now)
	core.Step("n1", nodedrain.EvResult{Op: nodedrain.OpCordon, RequestID: "r1", ByUs: true, UID: "u1"}, now)
	return core
}
