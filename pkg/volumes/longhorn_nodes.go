package volumes

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What Longhorn's Nodes and Settings say about placing and serving replicas, read the way
// longhorn-manager reads them: its replica scheduler (scheduler/replica_scheduler.go:
// ListSchedulableNodes, the disk filter) for where a new replica can go, and its node
// controller's Ready condition for whether the replicas on a node serve their data.

// nodeFacts is what a Longhorn Node says.
type nodeFacts struct {
	zone string
	// unplaceable says why Longhorn's scheduler would not place a replica there; "" when it would.
	unplaceable string
	// down says why the node's replicas do not serve their data; "" when they do.
	down string
}

// condition returns the status ("True", "False", ...) and reason of a condition in a Longhorn
// status; status "" when absent.
func condition(status map[string]any, typ string) (string, string) {
	list, _ := status["conditions"].([]any)
	for _, c := range list {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			st, _ := m["status"].(string)
			reason, _ := m["reason"].(string)
			return st, reason
		}
	}
	return "", ""
}

func parseNode(u *unstructured.Unstructured) *nodeFacts {
	spec, _ := nestedMap(u.Object, "spec")
	status, _ := nestedMap(u.Object, "status")
	n := &nodeFacts{zone: nestedString(status, "zone")}
	ready, why := condition(status, "Ready")
	switch {
	case ready == "False" && why == "KubernetesNodePressure":
		// The node's instance manager still runs its replicas (Longhorn's drain check counts
		// them); nothing new is placed there.
		n.unplaceable = "Longhorn node not Ready (KubernetesNodePressure)"
	case ready == "False":
		n.down = "Longhorn node not Ready"
		if why != "" {
			n.down += " (" + why + ")"
		}
	case ready == "":
		// Longhorn writes the condition once its node controller ran; before that nothing is
		// placed there, and nothing says its replicas are not served.
		n.unplaceable = "Longhorn has not reported the node Ready"
	}
	schedulable, why := condition(status, "Schedulable")
	switch {
	case n.down != "":
		n.unplaceable = n.down
	case n.unplaceable != "":
	case u.GetDeletionTimestamp() != nil:
		n.unplaceable = "Longhorn node being deleted"
	case !nestedBool(spec, "allowScheduling", false):
		n.unplaceable = "Longhorn scheduling disabled"
	case nestedBool(spec, "evictionRequested", false):
		n.unplaceable = "Longhorn eviction requested"
	case schedulable != "True":
		n.unplaceable = "Longhorn node not Schedulable"
		if why != "" {
			n.unplaceable += " (" + why + ")"
		}
	default:
		n.unplaceable = diskProblem(spec, status)
	}
	return n
}

// diskProblem says why no disk of the node takes a new replica (allowScheduling on, no eviction
// requested, condition Schedulable True: what Longhorn's disk filter asks before the size
// checks); "" when one does.
func diskProblem(spec, status map[string]any) string {
	disks, _ := nestedMap(spec, "disks")
	if len(disks) == 0 {
		return "no Longhorn disk"
	}
	stats, _ := nestedMap(status, "diskStatus")
	names := make([]string, 0, len(disks))
	for name := range disks {
		names = append(names, name)
	}
	sort.Strings(names)
	var why []string
	for _, name := range names {
		d, _ := disks[name].(map[string]any)
		st, _ := stats[name].(map[string]any)
		sched, reason := condition(st, "Schedulable")
		switch {
		case !nestedBool(d, "allowScheduling", false):
			why = append(why, name+": scheduling disabled")
		case nestedBool(d, "evictionRequested", false):
			why = append(why, name+": eviction requested")
		case sched != "True":
			why = append(why, fmt.Sprintf("%s: not Schedulable %s", name, reason))
		default:
			return ""
		}
	}
	return "no Longhorn disk takes replicas (" + strings.TrimSpace(strings.Join(why, ", ")) + ")"
}

// StorageNodes returns what Longhorn says about each of its nodes, from the cache; nil when
// Longhorn serves no Nodes (every node is then taken to take replicas).
func (l *Longhorn) StorageNodes() map[string]StorageNode {
	if !l.Available() || l.nodes == nil {
		return nil
	}
	l.memoMu.Lock()
	defer l.memoMu.Unlock()
	out := map[string]StorageNode{}
	for _, obj := range l.nodes.List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		n := memo(l, u, parseNode)
		out[u.GetName()] = StorageNode{Unplaceable: n.unplaceable, Down: n.down, Zone: n.zone}
	}
	return out
}

// antiAffinity reads Longhorn's global anti-affinity settings from the cache; Longhorn's
// defaults where a setting is missing or unreadable.
func (l *Longhorn) antiAffinity() antiAffinity {
	aa := defaultAntiAffinity
	if l.settings == nil {
		return aa
	}
	read := func(name string, def bool) bool {
		obj, ok, err := l.settings.GetByKey(l.namespace + "/" + name)
		if err != nil || !ok {
			return def
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return def
		}
		switch nestedString(u.Object, "value") {
		case "true":
			return true
		case "false":
			return false
		}
		return def
	}
	aa.softNode = read("replica-soft-anti-affinity", aa.softNode)
	aa.softZone = read("replica-zone-soft-anti-affinity", aa.softZone)
	return aa
}
