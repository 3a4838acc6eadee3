package sim

import (
	"testing"
)

func TestSeedsExplore(t *testing.T) {
	fails := map[string]int{}
	for seed := uint64(1); seed <= 3000; seed++ {
		r := Run(seed)
		if r.Violation != nil {
			fails[r.Violation.Invariant]++
			if fails[r.Violation.Invariant] <= 2 {
				t.Logf("%s\n", Shrink(r).Report())
			}
		}
	}
	t.Logf("violations by invariant: %v", fails)
}
