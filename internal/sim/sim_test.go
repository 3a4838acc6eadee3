package sim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
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
	events, outages, fenced := 0, 0, 0
	forgedRuns, forged, refused, repairs, copies := 0, 0, 0, 0, 0
	policy := map[string]int{}
	states := map[string]bool{}
	agentFaultRuns := map[Kind]int{}
	for _, seed := range list {
		r := Run(seed)
		for _, k := range shareKinds {
			if slices.ContainsFunc(r.Plan, func(f Fault) bool { return f.Kind == k.k }) {
				agentFaultRuns[k.k]++
			}
		}
		events += r.Events
		if r.Outages > 0 {
			outages++
		}
		fenced += r.Fenced
		if slices.ContainsFunc(r.Plan, func(f Fault) bool { return f.Kind == StatusForger }) {
			forgedRuns++
		}
		forged, refused, repairs, copies = forged+r.Forged, refused+r.Refused, repairs+r.Repairs, copies+r.CopiesTaken
		for k, v := range r.Policy {
			policy[k] += v
		}
		for k := range r.States {
			states[k] = true
		}
		if r.Violation != nil {
			t.Fatalf("%s", Shrink(r).Report())
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds in %s (%.0f seeds/s), %.0f events per seed, %d distinct states; %d runs with a leader in API-outage mode, %d fenced writes",
		len(list), el.Round(time.Millisecond), float64(len(list))/el.Seconds(), float64(events)/float64(len(list)), len(states), outages, fenced)
	t.Logf("maintenance policy: %v", policy)
	t.Logf("status forgers in %d runs (%.1f%%): %d forged writes, %d statuses refused by agents' guards, %d values repaired by coordinators; "+
		"%d server copies reached agent.Step through a failed checked read", forgedRuns, 100*float64(forgedRuns)/float64(len(list)), forged, refused, repairs, copies)
	var shares []string
	for _, k := range shareKinds {
		shares = append(shares, fmt.Sprintf("%s %.1f%%", k.k, 100*float64(agentFaultRuns[k.k])/float64(len(list))))
	}
	t.Logf("agent, pod, API-write, operator-bus and replicated-bus faults, share of runs drawing each: %s", strings.Join(shares, ", "))
}

// shareKinds are the fault kinds whose share of runs TestSimulation reports.
var shareKinds = slices.Concat(agentFaultKinds, evictorKinds, apiWriteKinds,
	[]weightedKind{{k: OperatorPutsRequest}, {k: OperatorReplaysRequest}, {k: FollowerLags}, {k: StreamElection}, {k: QuorumLoss},
		{k: TypedReboot}, {k: InformersBehind}})
