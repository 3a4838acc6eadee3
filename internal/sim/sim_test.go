package sim

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/volumes"
)

var (
	seeds  = flag.Int("sim.seeds", 1500, "how many seeds TestSimulation runs from -sim.base")
	base   = flag.Uint64("sim.base", 1, "the first seed TestSimulation runs")
	random = flag.Int("sim.random", 3, "how many random seeds TestSimulation runs besides (printed)")
)

// TestSimulation runs the whole protocol for many seeds and fails with the shrunk story of the
// first violation. `make sim SEEDS=N` runs more.
func TestSimulation(t *testing.T) {
	n := *seeds
	if testing.Short() {
		n = min(n, 200)
	}
	list := make([]uint64, 0, n+*random)
	for i := range n {
		list = append(list, *base+uint64(i))
	}
	for range *random {
		s := rand.Uint64()
		t.Logf("random seed %d (replay: make sim SEEDS=1 BASE=%d)", s, s)
		list = append(list, s)
	}
	start := time.Now()
	events := 0
	states := map[string]bool{}
	for _, seed := range list {
		r := Run(seed)
		events += r.Events
		for k := range r.States {
			states[k] = true
		}
		if r.Violation != nil {
			t.Fatalf("%s", Shrink(r).Report())
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds in %s (%.0f seeds/s), %.0f events per seed, %d distinct states", len(list), el.Round(time.Millisecond),
		float64(len(list))/el.Seconds(), float64(events)/float64(len(list)), len(states))
}

// three is the cluster of most regressions: 3 nodes, one coordinator, max-concurrent 1.
func three(vols int, policy volumes.Policy) Config {
	cfg := ConfigFor(1)
	cfg.Nodes, cfg.Coordinators, cfg.MaxConcurrent, cfg.Volumes, cfg.Groups, cfg.VolumePolicy = 3, 1, 1, vols, 1, policy
	cfg.CommandFailure, cfg.Active = 0, 3*time.Minute
	return cfg
}

// Each regression holds the plan of a violation the simulation found before its fix (the
// closing note of issue 9 has the stories); it must run clean now.
func TestRegressions(t *testing.T) {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	cases := []struct {
		name string
		seed uint64
		cfg  Config
		plan Plan
	}{
		{"kernel-update day is not a whole-cluster shutdown (S3, seed 2)", 2, three(2, volumes.PolicyWait),
			Plan{{At: sec(76.7), Kind: KernelDay}}},
		{"resume releases the gate's eviction request of a drain withdrawn meanwhile (L1, seed 55)", 55, three(1, volumes.PolicyEvict),
			Plan{{At: sec(13.7), Kind: Reboot, Target: 1}, {At: sec(44.3), Kind: CoordCrash, Target: 2, For: 38 * time.Second}}},
		{"a restarted coordinator does not repeat an Event (E1, seed 64)", 64, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Coordinators = 2
			return c
		}(), Plan{{At: sec(148), Kind: Update}, {At: sec(92.4), Kind: AgentCrash, Target: 2, For: 15 * time.Second},
			{At: sec(86), Kind: CoordCrash, Target: 2, For: 24 * time.Second}, {At: sec(155.8), Kind: APIOutage, For: 111 * time.Second}}},
		{"a paused ex-leader does not publish after a takeover (S1, seed 234)", 234, func() Config {
			c := three(0, volumes.PolicyWait)
			c.Nodes, c.Coordinators, c.MaxConcurrent, c.Groups, c.Active = 4, 2, 2, 2, 5*time.Minute
			return c
		}(), Plan{{At: sec(100.1), Kind: Reboot, Target: 2}, {At: sec(263.6), Kind: Reboot, Target: 3},
			{At: sec(292.2), Kind: CoordFreeze, Target: 2, For: 40 * time.Second}, {At: sec(10.6), Kind: CoordCrash, Target: 3, For: 31 * time.Second}}},
		{"an operation withdrawn while no coordinator ran is asked for again (L1, seed 76)", 76, func() Config {
			c := three(1, volumes.PolicyWait)
			c.Coordinators, c.Active = 2, 5*time.Minute
			return c
		}(), Plan{{At: sec(138.9), Kind: Update, Target: 2}, {At: sec(108.6), Kind: APIOutage, Target: 2, For: 189 * time.Second},
			{At: sec(176.2), Kind: Withdraw, Target: 2, For: 31 * time.Second}}},
		{"a replayed COMPLETE after edgedrainctl withdraw is not run", 11, three(1, volumes.PolicyWait),
			Plan{{At: sec(1), Kind: Reboot, Target: 0}, {At: sec(2), Kind: WatchLag, Target: 0, For: 60 * time.Second},
				{At: sec(2), Kind: AgentCut, Target: 0, For: 40 * time.Second}, {At: sec(30), Kind: Withdraw, Target: 0}}},
		{"a NOTSUPPORTED naming no request does not clear a deferred operation", 12, three(1, volumes.PolicyWait),
			Plan{{At: sec(1), Kind: Reboot, Target: 0}, {At: sec(1), Kind: APIOutage, For: 60 * time.Second},
				{At: sec(20), Kind: ForgedStatus, Target: 0}}},
		{"two agents with one node name do not withdraw each other's requests", 13, three(1, volumes.PolicyWait),
			Plan{{At: sec(1), Kind: AgentDuplicated, Target: 0}, {At: sec(2), Kind: Reboot, Target: 0}}},
		{"a declared whole-cluster shutdown ends without deadlock", 14, three(2, volumes.PolicyWait),
			Plan{{At: sec(5), Kind: ClusterShutdown}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := RunPlan(c.seed, c.cfg, c.plan)
			require.Nil(t, r.Violation, "%s", r.Report())
		})
	}
}
