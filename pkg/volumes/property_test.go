package volumes

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The property: over random layouts of nodes and replicas, the gate never says "safe" for a
// volume while the drained node holds its last healthy replica or the only healthy source of a
// rebuild; and (under PolicyWait) it blocks on nothing else. The oracle below is written
// independently of the rules, straight from the definitions (DESIGN §5).

type layout struct {
	nodes  map[string]NodeState
	vol    Volume
	whole  bool
	policy Policy
}

func (l layout) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "whole=%v policy=%s detached=%v\n", l.whole, l.policy, l.vol.Detached)
	for n := range 5 {
		name := fmt.Sprintf("n%d", n)
		if st, ok := l.nodes[name]; ok {
			fmt.Fprintf(&b, "  node %s %+v\n", name, st)
		}
	}
	for _, r := range l.vol.Replicas {
		fmt.Fprintf(&b, "  replica %+v\n", r)
	}
	return b.String()
}

func randomLayout(rng *rand.Rand) layout {
	l := layout{nodes: map[string]NodeState{}, whole: rng.IntN(4) == 0, policy: Policy(rng.IntN(3))}
	n := 2 + rng.IntN(4)
	for i := range n {
		st := NodeState{Exists: rng.IntN(10) > 0, Ready: rng.IntN(4) > 0, Cordoned: rng.IntN(4) == 0, StorageDisabled: rng.IntN(6) == 0,
			Zone: []string{"", "z1", "z2"}[rng.IntN(3)]}
		if rng.IntN(8) == 0 {
			st.StorageDown = "Longhorn node not Ready"
		}
		if i == 0 {
			st = NodeState{Exists: true, Ready: true, Cordoned: true} // the drained node
		}
		l.nodes[fmt.Sprintf("n%d", i)] = st
	}
	l.vol = Volume{Name: "v", Source: "test", Detached: rng.IntN(5) == 0, DesiredReplicas: rng.IntN(4),
		SoftNodeAntiAffinity: rng.IntN(4) == 0, HardZoneAntiAffinity: rng.IntN(4) == 0}
	count := 1 + rng.IntN(4)
	for i := range count {
		r := Replica{Name: fmt.Sprintf("r%d", i), Node: fmt.Sprintf("n%d", rng.IntN(n+1))} // n+1: sometimes a node that does not exist
		switch rng.IntN(5) {
		case 0: // healthy, running
			r.Intact, r.Running = true, true
		case 1: // healthy, stopped
			r.Intact = true
		case 2: // failed or never used
			r.Running = rng.IntN(2) == 0
		case 3, 4: // rebuilding from some of the others
			r.Rebuilding, r.Running, r.Progress = true, true, rng.IntN(101)
			for j := range count {
				if j != i && rng.IntN(2) == 0 {
					r.Sources = append(r.Sources, fmt.Sprintf("r%d", j))
				}
			}
		}
		r.Inactive, r.Deleting, r.Evicting = rng.IntN(10) == 0, rng.IntN(10) == 0, rng.IntN(6) == 0
		l.vol.Replicas = append(l.vol.Replicas, r)
	}
	return l
}

// oracle says whether the drained node n0 holds the volume's last healthy replica, or the only
// healthy source of a rebuild, and whether that may be let through (a whole-cluster shutdown
// with no other node up, where waiting cannot help).
func oracle(l layout) (lastCopy, onlySource, exempt bool) {
	const drained = "n0"
	// goodCopy: a replica elsewhere whose data survives n0 going down.
	goodCopy := func(r Replica) bool {
		if r.Node == drained || !r.Intact || r.Inactive || r.Deleting {
			return false
		}
		st := l.nodes[r.Node]
		if l.whole {
			return st.Exists
		}
		// Where Longhorn places no new replicas (StorageDisabled) the ones there still count.
		return (r.Running || l.vol.Detached) && nodeUp(st)
	}
	here := false
	for _, r := range l.vol.Replicas {
		if r.Node == drained && r.Intact {
			here = true
		}
	}
	if !here {
		return false, false, false
	}
	lastCopy = true
	for _, r := range l.vol.Replicas {
		if goodCopy(r) {
			lastCopy = false
		}
	}
	for _, t := range l.vol.Replicas {
		if !t.Rebuilding || t.Node == drained || (l.whole && !l.nodes[t.Node].Ready) {
			continue
		}
		var sources []Replica
		for _, name := range t.Sources {
			for _, r := range l.vol.Replicas {
				if r.Name == name && r.Name != t.Name {
					sources = append(sources, r)
				}
			}
		}
		if len(sources) == 0 {
			for _, r := range l.vol.Replicas {
				if r.Name != t.Name && r.Intact {
					sources = append(sources, r)
				}
			}
		}
		fromHere, fromElsewhere := false, false
		for _, s := range sources {
			fromHere = fromHere || (s.Node == drained && s.Intact)
			fromElsewhere = fromElsewhere || goodCopy(s)
		}
		if fromHere && !fromElsewhere {
			onlySource = true
		}
	}
	up := 0
	for name, st := range l.nodes {
		if name != drained && nodeUp(st) {
			up++
		}
	}
	exempt = l.whole && up == 0 && !onlySource
	return lastCopy, onlySource, exempt
}

// onlyOnDisabled: the drained node holds data and every other usable copy is on a node where
// Longhorn places no new replicas (the case that blocked forever before issue 12).
func onlyOnDisabled(l layout) bool {
	n := 0
	for _, r := range l.vol.Replicas {
		st := l.nodes[r.Node]
		if r.Node != "n0" && r.Intact && !r.Inactive && !r.Deleting && (r.Running || l.vol.Detached) && nodeUp(st) {
			if !st.StorageDisabled {
				return false
			}
			n++
		}
	}
	return n > 0
}

// nodeUp: a node whose replicas serve their data.
func nodeUp(st NodeState) bool {
	return st.Exists && st.Ready && !st.Cordoned && st.StorageDown == ""
}

func TestPropertyNeverSafeWithLastCopyOrOnlySource(t *testing.T) {
	iterations := 50000
	if testing.Short() {
		iterations = 10000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for i := range iterations {
		l := randomLayout(rng)
		findings := Evaluate([]Volume{l.vol}, &View{Node: "n0", WholeCluster: l.whole, Policy: l.policy, Nodes: l.nodes}, DefaultRules())
		blocks := Blocks(findings)
		lastCopy, onlySource, exempt := oracle(l)
		mustBlock := (lastCopy || onlySource) && !exempt
		switch {
		case mustBlock && !blocks:
			t.Fatalf("iteration %d: safe although the node holds the last healthy replica (%v) or the only rebuild source (%v):\n%s%v",
				i, lastCopy, onlySource, l, findings)
		case (lastCopy || onlySource) && len(findings) == 0:
			t.Fatalf("iteration %d: not reported:\n%s", i, l)
		case !mustBlock && blocks && l.policy == PolicyWait:
			t.Fatalf("iteration %d: blocks with neither the last copy nor the only source here:\n%s%v", i, l, findings)
		}
		if !lastCopy && onlyOnDisabled(l) {
			seen["copies only where Longhorn places nothing"]++
		}
		switch {
		case exempt && lastCopy:
			seen["exempt"]++
		case lastCopy:
			seen["last copy"]++
		case onlySource:
			seen["only source"]++
		case blocks:
			seen["evict"]++
		default:
			seen["safe"]++
		}
	}
	// The generator must reach every case, or the property says little.
	for _, c := range []string{"exempt", "last copy", "only source", "evict", "safe", "copies only where Longhorn places nothing"} {
		if seen[c] == 0 {
			t.Errorf("no layout reached %q: %v", c, seen)
		}
	}
	t.Logf("cases: %v", seen)
}

// Under PolicyAllow the rules still report what is not safe (Check then answers safe anyway).
func TestPropertyReportedUnderAllow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		l := randomLayout(rng)
		l.policy = PolicyAllow
		findings := Evaluate([]Volume{l.vol}, &View{Node: "n0", WholeCluster: l.whole, Policy: l.policy, Nodes: l.nodes}, DefaultRules())
		lastCopy, onlySource, _ := oracle(l)
		if (lastCopy || onlySource) && len(findings) == 0 {
			t.Fatalf("iteration %d: not reported under allow:\n%s", i, l)
		}
	}
}

// evictOracle says whether PolicyEvict should still wait for replacements of the drained node's
// replicas: fewer healthy, active replicas not being evicted are on other usable nodes than the
// volume wants, and Longhorn could place one more (a node that takes replicas and, with hard
// node anti-affinity, holds none of this volume's replacements yet; with hard zone
// anti-affinity, in a zone that holds none). Written from Longhorn's scheduler rules, not from
// the gate's code.
func evictOracle(l layout) bool {
	const drained = "n0"
	want := l.vol.DesiredReplicas
	if want <= 0 {
		for _, r := range l.vol.Replicas {
			if r.Intact {
				want++
			}
		}
	}
	replacements, nodes, zones := 0, map[string]bool{}, map[string]bool{}
	for _, r := range l.vol.Replicas {
		st, ok := l.nodes[r.Node]
		if r.Node == drained || !ok || !r.Intact || r.Inactive || r.Deleting || r.Evicting || !nodeUp(st) || !(r.Running || l.vol.Detached) {
			continue
		}
		replacements++
		nodes[r.Node], zones[st.Zone] = true, true
	}
	for name, st := range l.nodes {
		if name == drained || !nodeUp(st) || st.StorageDisabled {
			continue
		}
		// Longhorn's scheduler: with hard zone anti-affinity only a zone without a replica takes
		// one, whatever node anti-affinity says; else with soft node anti-affinity any node does.
		switch {
		case l.vol.HardZoneAntiAffinity:
			if !zones[st.Zone] && len(zones) < want {
				return true
			}
		case l.vol.SoftNodeAntiAffinity:
			if replacements < want {
				return true
			}
		default:
			if !nodes[name] && len(nodes) < want {
				return true
			}
		}
	}
	return false
}

// Under PolicyEvict the gate waits for a replacement exactly when Longhorn could place one: it
// never waits for a copy that cannot be placed (it would wait forever), and never lets the node
// go while a replacement can still be made. Healthy copies on nodes where Longhorn places
// nothing new still count.
func TestPropertyEvictWaitsOnlyForPlaceableCopies(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[string]int{}
	for i := range 50000 {
		l := randomLayout(rng)
		l.policy, l.whole = PolicyEvict, false
		lastCopy, onlySource, _ := oracle(l)
		if lastCopy || onlySource {
			continue
		}
		here := false
		for _, r := range l.vol.Replicas {
			here = here || (r.Node == "n0" && r.Intact)
		}
		if !here {
			continue
		}
		findings := Evaluate([]Volume{l.vol}, &View{Node: "n0", Policy: l.policy, Nodes: l.nodes}, DefaultRules())
		blocks, wait := Blocks(findings), evictOracle(l)
		if blocks != wait {
			t.Fatalf("iteration %d: gate blocks=%v, but Longhorn could place a replacement=%v:\n%s%v", i, blocks, wait, l, findings)
		}
		switch {
		case wait:
			seen["waits"]++
		case len(findings) > 0:
			seen["cannot place all: reported"]++
		default:
			seen["replaced"]++
		}
		if l.vol.SoftNodeAntiAffinity {
			seen["soft node"]++
		}
		if l.vol.HardZoneAntiAffinity {
			seen["hard zone"]++
		}
	}
	for _, c := range []string{"waits", "cannot place all: reported", "replaced", "soft node", "hard zone"} {
		if seen[c] == 0 {
			t.Errorf("no layout reached %q: %v", c, seen)
		}
	}
	t.Logf("cases: %v", seen)
}
