package volumes

import (
	"fmt"
	"sort"
	"strings"
)

// Volume is what a Source knows about one replicated volume, in storage-neutral terms: the facts
// the Rules decide on.
type Volume struct {
	// Source names the storage system ("longhorn").
	Source string
	// Name is the volume's name in its storage system.
	Name string
	// PVCNamespace and PVCName name the claim using the volume, where known.
	PVCNamespace, PVCName string
	// DesiredReplicas is how many replicas the volume should have; zero: unknown.
	DesiredReplicas int
	// Detached is true when the volume is not attached anywhere: its storage system then stops
	// every replica, so a stopped intact replica is a copy like a running one.
	Detached bool
	// SoftNodeAntiAffinity is true when the storage system may place several replicas of the
	// volume on one node (Longhorn: replica-soft-anti-affinity, or the volume's own
	// spec.replicaSoftAntiAffinity); false: at most one replica a node, Longhorn's default.
	SoftNodeAntiAffinity bool
	// HardZoneAntiAffinity is true when the storage system places at most one replica of the
	// volume in a zone (Longhorn: replica-zone-soft-anti-affinity false, or the volume's
	// spec.replicaZoneSoftAntiAffinity "disabled"); Longhorn's default is soft.
	HardZoneAntiAffinity bool
	// Replicas are the volume's replicas on every node.
	Replicas []Replica
}

// Replica is one copy of a volume's data on one node.
type Replica struct {
	// Name identifies the replica within its volume.
	Name string
	// Node is the node holding the replica's data.
	Node string
	// Intact is true when the replica has held a complete copy and has not failed since
	// (Longhorn: spec.healthyAt set, spec.failedAt empty). A replica never used (neither set)
	// or failed is not intact and holds nothing the volume depends on.
	Intact bool
	// Running is true when the replica's process serves its data (Longhorn: status.currentState
	// running).
	Running bool
	// Inactive is true for a replica its volume does not serve from (Longhorn: spec.active
	// false, e.g. one created for a migration and not yet switched to): it is not a copy.
	Inactive bool
	// Deleting is true for a replica being deleted (Longhorn: metadata.deletionTimestamp set): it
	// is not a copy.
	Deleting bool
	// Evicting is true for a replica the storage system is moving to another node or disk
	// (Longhorn: spec.evictionRequested): its data is there until the move is done, so it still
	// counts as a copy, but not as one of the replacements PolicyEvict waits for.
	Evicting bool
	// Rebuilding is true while the replica is being rebuilt from other replicas (Longhorn: mode
	// WO in the engine's replicaModeMap, or an engine rebuildStatus entry that is rebuilding).
	Rebuilding bool
	// Progress is the rebuild's progress in percent (0..100) while Rebuilding.
	Progress int
	// Sources names the replicas a rebuilding replica copies from; nil: unknown, any intact
	// replica of the volume may be a source.
	Sources []string
}

// PVC returns "namespace/name" of the volume's claim, or "" when unknown.
func (v *Volume) PVC() string {
	if v.PVCName == "" {
		return ""
	}
	return v.PVCNamespace + "/" + v.PVCName
}

// replica returns the replica called name, or nil.
func (v *Volume) replica(name string) *Replica {
	for i := range v.Replicas {
		if v.Replicas[i].Name == name {
			return &v.Replicas[i]
		}
	}
	return nil
}

// NodeState is what the gate knows about one node when it decides whether a replica there is a
// usable copy.
type NodeState struct {
	// Exists is false for a node with no Kubernetes Node object.
	Exists bool
	// Ready is the Kubernetes Node's Ready condition.
	Ready bool
	// Cordoned is spec.unschedulable: the node is itself being drained or kept out of service.
	Cordoned bool
	// StorageDisabled is true when the storage system will not place new replicas there
	// (Longhorn: scheduling disabled, eviction requested, the node not Ready or not Schedulable,
	// no disk that takes replicas; see Longhorn.StorageNodes); StorageWhy says why. Replicas
	// already there still hold their data and count as copies.
	StorageDisabled bool
	StorageWhy      string
	// StorageDown says why replicas there do not serve their data now (Longhorn: its Node is not
	// Ready); "" when they do.
	StorageDown string
	// Zone is the node's zone in the storage system (Longhorn: status.zone); "" is a zone too.
	Zone string
}

// View is the situation a Rule decides in: the node being drained, the drain's options and
// the state of every node.
type View struct {
	// Node is the node asked about.
	Node string
	// WholeCluster is true during a planned whole-cluster shutdown: replicas on nodes already
	// down for it are stopped, not lost.
	WholeCluster bool
	// Policy is the gate's policy (PolicyEvict enables the replacement rule).
	Policy Policy
	// Nodes holds the state of every node the gate knows, by name.
	Nodes map[string]NodeState
}

// usable reports whether node can serve as the home of a copy of the data now, with the
// reason when it cannot. Like Longhorn's own drain check (ListVolumePDBProtectedHealthyReplicasRO
// in longhorn-manager's datastore), a node where the storage system places no new replicas
// (scheduling disabled, eviction requested) still serves the replicas it has; unlike it, a
// node whose Longhorn Node is not Ready for any reason does not (Longhorn excludes only the
// reasons that stop the node's instance manager, through the manager's state).
func (w *View) usable(node string) (bool, string) {
	if node == w.Node {
		return false, "the node being drained"
	}
	st, ok := w.Nodes[node]
	switch {
	case !ok || !st.Exists:
		return false, "no such node"
	case !st.Ready:
		return false, "not ready"
	case st.Cordoned:
		return false, "cordoned"
	case st.StorageDown != "":
		return false, st.StorageDown
	}
	return true, ""
}

// placeable reports whether the storage system would place a new replica on node now, with the
// reason when it would not.
func (w *View) placeable(node string) (bool, string) {
	if ok, why := w.usable(node); !ok {
		return false, why
	}
	if st := w.Nodes[node]; st.StorageDisabled {
		if st.StorageWhy != "" {
			return false, st.StorageWhy
		}
		return false, "storage scheduling disabled"
	}
	return true, ""
}

// counts reports whether r is a copy of v's data that survives the drained node going down,
// with the reason when it is not. Normally that is an intact replica (Longhorn: healthyAt set,
// failedAt empty), active and not being deleted, running (or stopped because the volume is
// detached), on another usable node. In a whole-cluster shutdown every
// intact replica on another node counts, whatever its node's state: those nodes went (or will
// go) down for the same planned shutdown and their replicas are stopped with their data, not
// lost.
func (w *View) counts(v *Volume, r *Replica) (bool, string) {
	switch {
	case r.Node == w.Node:
		return false, "on this node"
	case r.Deleting:
		return false, "being deleted"
	case r.Inactive:
		return false, "inactive"
	case !r.Intact && r.Rebuilding:
		return false, "rebuilding"
	case !r.Intact:
		return false, "not healthy"
	case w.WholeCluster:
		if !w.Nodes[r.Node].Exists {
			return false, "no such node"
		}
		return true, ""
	}
	if ok, why := w.usable(r.Node); !ok {
		return false, why
	}
	if !r.Running && !v.Detached {
		return false, "not running"
	}
	return true, ""
}

// copies returns the replicas of v that count as copies elsewhere.
func (w *View) copies(v *Volume) []*Replica {
	var out []*Replica
	for i := range v.Replicas {
		if ok, _ := w.counts(v, &v.Replicas[i]); ok {
			out = append(out, &v.Replicas[i])
		}
	}
	return out
}

// otherUsableNodes counts the usable nodes other than the drained one.
func (w *View) otherUsableNodes() int {
	n := 0
	for name := range w.Nodes {
		if ok, _ := w.usable(name); ok {
			n++
		}
	}
	return n
}

// rebuilds describes the rebuilds of v under way on other nodes ("rebuilding on node-b 45%")
// and returns their highest progress.
func (w *View) rebuilds(v *Volume) (string, int) {
	var parts []string
	best := 0
	for _, r := range v.Replicas {
		if !r.Rebuilding || r.Node == w.Node {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d%%", r.Node, r.Progress))
		best = max(best, r.Progress)
	}
	if len(parts) == 0 {
		return "", 0
	}
	sort.Strings(parts)
	return "rebuilding on " + strings.Join(parts, ", "), clampPercent(best)
}

func clampPercent(p int) int { return min(max(p, 0), 100) }
