package sim

import (
	"math/rand/v2"
	"time"
)

// Selector faults: the coordinator manages only the nodes matching --node-selector
// (nodedrain.NodeInfo.Unmanaged) while the whole cluster counts as capacity
// (--cluster-node-selector), and a node's labels change: it stops matching mid-drain, or
// matches only later.
const (
	// SelectorLeave: at At the node stops matching --node-selector; it matches again For later.
	SelectorLeave Kind = "node-leaves-selector"
	// SelectorLeaveForGood: at At the node stops matching --node-selector, for good.
	SelectorLeaveForGood Kind = "node-leaves-selector-for-good"
	// SelectorJoinLate: the node does not match --node-selector from the start (At is 0) until
	// For later.
	SelectorJoinLate Kind = "node-joins-selector-late"
	// Unmanaged: the node never matches --node-selector (a node of the cluster another team drains).
	Unmanaged Kind = "node-never-managed"
)

var selectorKinds = []weightedKind{{SelectorLeave, 4}, {SelectorLeaveForGood, 2}, {SelectorJoinLate, 2}, {Unmanaged, 1}}

// selectorFaults draws one or two selector faults for a run (cfg.Selector).
func selectorFaults(cfg Config, rng *rand.Rand, at func() time.Duration) Plan {
	var p Plan
	for range 1 + rng.IntN(2) {
		k := drawKind(selectorKinds, rng)
		f := Fault{At: at(), Kind: k, Target: rng.IntN(cfg.Nodes), For: time.Duration(5+rng.IntN(120)) * time.Second}
		switch k {
		case SelectorLeaveForGood:
			f.For = 0
		case SelectorJoinLate:
			f.At, f.For = 0, time.Duration(10+rng.IntN(int(cfg.Active/time.Second)))*time.Second
		case Unmanaged:
			f.At, f.For = 0, 0
		}
		p = append(p, f)
	}
	return p
}

// applySelectorFault makes a selector fault happen.
func (s *Sim) applySelectorFault(f Fault) {
	if s.unmanaged == nil {
		s.unmanaged = map[string]bool{}
	}
	n := s.agents[f.Target%len(s.agents)].node
	switch f.Kind {
	case SelectorLeave, SelectorLeaveForGood, SelectorJoinLate, Unmanaged:
		s.unmanaged[n.name] = true
		s.w.logf("%s stops matching --node-selector (its labels change): the coordinator does not manage it", n.name)
		if f.Kind == SelectorLeave || f.Kind == SelectorJoinLate {
			s.w.after(f.For, "selector matches again", func() {
				s.unmanaged[n.name] = false
				s.w.logf("%s matches --node-selector: the coordinator manages it", n.name)
			})
		}
	}
}
