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
			core := cordonedCore(now, nil)
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
// it. That lasts a reflector's longest relist wait (a minute) and the probe's lateness, whatever
// the earlier outage's length (a backoff grows over two minutes of failures); a term begun in a
// process that ran before it (a standby taking over) counts as after one, a new process's not.
func TestAPIUnreachableRuleWaitsForCachesThatMayBeBehind(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	safe := func(string, bool) (GateResult, error) { return GateResult{Safe: true}, nil }
	cordoned := func(string) (bool, bool, string) { return true, true, "u1" }
	down := now.Add(5 * time.Minute) // when this outage began
	answered := func(before time.Duration) func(*Core) {
		return func(c *Core) { c.APIAnswered(down.Add(-before)) }
	}
	for name, c := range map[string]struct {
		earlier  func(*Core)
		complete bool
	}{
		"no earlier outage":                  {nil, true},
		"10 s after one":                     {answered(10 * time.Second), false},
		"64 s after one":                     {answered(64 * time.Second), false},
		"65 s after one":                     {answered(65 * time.Second), true},
		"10 s into a standby's term":         {func(c *Core) { c.TermBegins(down.Add(-10*time.Second), down.Add(-time.Hour)) }, false},
		"a standby's term begun long before": {func(c *Core) { c.TermBegins(down.Add(-2*time.Minute), down.Add(-time.Hour)) }, true},
		"10 s into a new process's term":     {func(c *Core) { c.TermBegins(down.Add(-10*time.Second), down.Add(-11*time.Second)) }, true},
	} {
		t.Run(name, func(t *testing.T) {
			core := cordonedCore(now, c.earlier)
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

// cordonedCore is a Core whose drain of n1 (request r1) has cordoned Node object u1 at now,
// after setup (nil: none) ran on the new Core.
func cordonedCore(now time.Time, setup func(*Core)) *Core {
	core := NewCore(nodedrain.DefaultLimits(), 1)
	if setup != nil {
		setup(core)
	}
	r := &nodedrain.NodeDrainRequest{Node: "n1", RequestID: "r1", RequestedAt: now, RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"}
	core.Handle("n1", nodedrain.EvRequest{Request: r}, now)
	core.Handle("n1", nodedrain.EvAdmit{}, now)
	core.Handle("n1", nodedrain.EvResult{Op: nodedrain.OpCordon, RequestID: "r1", ByUs: true, UID: "u1"}, now)
	return core
}
