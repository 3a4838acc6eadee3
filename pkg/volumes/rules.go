package volumes

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Verdict is what one Rule says about one volume.
type Verdict int

// The verdicts, in the order of their weight.
const (
	// Continue means no objection: the next rule decides.
	Continue Verdict = iota
	// Skip means the volume does not concern the node: no later rule runs, nothing is reported.
	Skip
	// Warn reports the volume with its reason without blocking; the next rule runs.
	Warn
	// Block means the volume is not safe: it is reported with its reason, no later rule runs.
	Block
)

var verdictNames = [...]string{"continue", "skip", "warn", "block"}

// String returns the verdict's name.
func (v Verdict) String() string {
	if v >= 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is a Rule's verdict on a volume with its reason and, where meaningful, a progress
// in percent (a rebuild's).
type Decision struct {
	Verdict  Verdict
	Reason   string
	Progress int
}

// Rule is one small, ordered filter of the gate: it looks at one volume in a View and says
// whether the volume blocks the node, and why. Rules run in order until one skips or blocks.
type Rule struct {
	// Name identifies the rule in logs ("last-copy").
	Name string
	// Apply decides about v. It must not keep or modify v or w.
	Apply func(v *Volume, w *View) Decision
}

// DefaultRules returns the gate's rules in order: holds-data, last-copy, rebuild-source and
// evict-replacement. Callers may append their own.
func DefaultRules() []Rule {
	return []Rule{
		{Name: "holds-data", Apply: holdsData},
		{Name: "last-copy", Apply: lastCopy},
		{Name: "rebuild-source", Apply: rebuildSource},
		{Name: "evict-replacement", Apply: evictReplacement},
	}
}

// holdsData skips volumes with no intact replica on the node: a replica never used, failed or
// still being rebuilt there holds nothing the volume depends on.
func holdsData(v *Volume, w *View) Decision {
	for _, r := range v.Replicas {
		if r.Node == w.Node && r.Intact {
			return Decision{}
		}
	}
	return Decision{Verdict: Skip, Reason: "no healthy replica on this node"}
}

// lastCopy blocks while the node's replica is the volume's last healthy copy: no intact
// replica runs on another ready, schedulable node (in a whole-cluster shutdown: no intact
// replica on any other node). With no other node up to rebuild on in a whole-cluster shutdown,
// waiting cannot help and would deadlock the shutdown: the volume is then only reported
// (its data stays on this node, which is going down like every other).
func lastCopy(v *Volume, w *View) Decision {
	if len(w.copies(v)) > 0 {
		return Decision{}
	}
	parts := []string{"last healthy replica"}
	rebuild, progress := w.rebuilds(v)
	if rebuild != "" {
		parts = append(parts, rebuild)
	}
	var unusable []string
	for i := range v.Replicas {
		r := &v.Replicas[i]
		if r.Node == w.Node || !r.Intact {
			continue
		}
		_, why := w.counts(v, r)
		unusable = append(unusable, fmt.Sprintf("%s (%s)", r.Node, why))
	}
	if len(unusable) > 0 {
		sort.Strings(unusable)
		parts = append(parts, "other healthy replicas unusable: "+strings.Join(unusable, ", "))
	}
	if w.WholeCluster && w.otherUsableNodes() == 0 {
		parts = append(parts, "no other node is up in this whole-cluster shutdown: its data stays on this node")
		return Decision{Verdict: Warn, Reason: strings.Join(parts, "; "), Progress: progress}
	}
	return Decision{Verdict: Block, Reason: strings.Join(parts, "; "), Progress: progress}
}

// rebuildSource blocks while a replica on another node is being rebuilt with this node's
// replicas as its only healthy sources: taking them away would fail the rebuild. A rebuild on a
// node that is down in a whole-cluster shutdown is stopped, not waited for.
func rebuildSource(v *Volume, w *View) Decision {
	var blocking []string
	progress := 100
	for i := range v.Replicas {
		target := &v.Replicas[i]
		if !target.Rebuilding || target.Node == w.Node {
			continue
		}
		if w.WholeCluster && !w.Nodes[target.Node].Ready {
			continue
		}
		here, elsewhere := false, false
		for _, src := range rebuildSources(v, target) {
			switch {
			case src.Node == w.Node && src.Intact:
				here = true
			default:
				if ok, _ := w.counts(v, src); ok {
					elsewhere = true
				}
			}
		}
		if here && !elsewhere {
			blocking = append(blocking, fmt.Sprintf("%s %d%%", target.Node, clampPercent(target.Progress)))
			progress = min(progress, clampPercent(target.Progress))
		}
	}
	if len(blocking) == 0 {
		return Decision{}
	}
	sort.Strings(blocking)
	return Decision{Verdict: Block, Progress: progress,
		Reason: "only healthy rebuild source for the replica rebuilding on " + strings.Join(blocking, ", ")}
}

// rebuildSources returns the replicas target copies from: the ones it names, or every other
// intact replica when it names none it can be matched to.
func rebuildSources(v *Volume, target *Replica) []*Replica {
	var out []*Replica
	for _, name := range target.Sources {
		if r := v.replica(name); r != nil && r != target {
			out = append(out, r)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range v.Replicas {
		if r := &v.Replicas[i]; r != target && r.Intact {
			out = append(out, r)
		}
	}
	return out
}

// evictReplacement, under PolicyEvict, blocks until the volume has its full count of healthy
// replicas on other nodes, not counting replicas being evicted themselves: the node's replicas
// have been replaced, not only copied once. The full count is what the volume wants, cut to what
// the storage system can place on the other nodes (see placement): a replacement it cannot place
// is not waited for, and the volume is reported instead ("can place N of M"). It does nothing in
// a whole-cluster shutdown, where there is nowhere to move to.
func evictReplacement(v *Volume, w *View) Decision {
	if w.Policy != PolicyEvict || w.WholeCluster {
		return Decision{}
	}
	want := v.DesiredReplicas
	if want <= 0 {
		for _, r := range v.Replicas {
			if r.Intact {
				want++
			}
		}
	}
	have, room, why := w.placement(v)
	target := min(want, room)
	short := ""
	if target < want {
		short = fmt.Sprintf("Longhorn can place %d of %d replicas on other nodes (%s)", target, want, why)
	}
	if have >= target {
		if short != "" {
			return Decision{Verdict: Warn, Reason: fmt.Sprintf("%d healthy on other nodes; %s", have, short)}
		}
		return Decision{}
	}
	reason := fmt.Sprintf("evicting replicas from this node: %d of %d healthy on other nodes", have, target)
	if short != "" {
		reason += "; " + short
	}
	rebuild, progress := w.rebuilds(v)
	if rebuild != "" {
		reason += "; " + rebuild
	} else {
		reason += "; waiting for a replacement to start (if Longhorn cannot place it, its volume's condition Scheduled says why)"
	}
	return Decision{Verdict: Block, Reason: reason, Progress: progress}
}

// placement says how many of v's replicas count as replacements on other nodes (copies not being
// evicted), how many the storage system could hold there, and why not more. It follows
// Longhorn's replica scheduler (scheduler/replica_scheduler.go in longhorn-manager): with hard
// node anti-affinity (the default) one replica a node, with hard zone anti-affinity one a zone,
// on nodes that hold a replica already or where a new one can be placed.
func (w *View) placement(v *Volume) (have, room int, why string) {
	homes := map[string]bool{} // nodes holding a replacement
	for _, r := range w.copies(v) {
		if !r.Evicting {
			homes[r.Node] = true
			have++
		}
	}
	var refused []string
	open := map[string]bool{} // nodes that hold one or could take one
	anyPlaceable := false
	for name := range w.Nodes {
		if name == w.Node {
			continue
		}
		if ok, no := w.placeable(name); ok {
			open[name], anyPlaceable = true, true
		} else if homes[name] {
			open[name] = true
		} else if w.Nodes[name].Exists {
			refused = append(refused, name+": "+no)
		}
	}
	sort.Strings(refused)
	why = strings.Join(refused, ", ")
	if why == "" {
		why = "no other node takes new replicas"
	}
	switch {
	case v.HardZoneAntiAffinity:
		// One replica a zone, whatever node anti-affinity says (Longhorn then only looks at
		// unused zones).
		zones := map[string]bool{}
		haveZones := map[string]bool{}
		for name := range open {
			zones[w.Nodes[name].Zone] = true
		}
		for name := range homes {
			haveZones[w.Nodes[name].Zone] = true
		}
		return len(haveZones), len(zones), why + "; one replica a zone"
	case v.SoftNodeAntiAffinity:
		// Several replicas a node: any node that takes one takes them all.
		if anyPlaceable {
			return have, math.MaxInt, why
		}
		return have, have, why
	}
	return len(homes), len(open), why
}
