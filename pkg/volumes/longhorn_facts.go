package volumes

import (
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// This file turns Longhorn's objects into Volume facts. Fields read (longhorn.io/v1beta2, as
// longhorn-manager's k8s/pkg/apis/longhorn/v1beta2 types name them):
//
//	Volume   spec.{numberOfReplicas,replicaSoftAntiAffinity,replicaZoneSoftAntiAffinity},
//	         status.state, status.kubernetesStatus.{pvcName,namespace}
//	Replica  metadata.deletionTimestamp, spec.{volumeName,nodeID,healthyAt,failedAt,active,
//	         evictionRequested}, status.{currentState,storageIP|ip,port}
//	Node     spec.{allowScheduling,evictionRequested,disks[].{allowScheduling,evictionRequested}},
//	         status.{conditions[Ready,Schedulable],diskStatus[].conditions[Schedulable],zone}
//	Setting  value of replica-soft-anti-affinity, replica-zone-soft-anti-affinity
//	Engine   spec.replicaAddressMap, status.currentReplicaAddressMap,
//	         status.replicaModeMap (RW, WO = rebuilding, ERR),
//	         status.rebuildStatus[address].{isRebuilding,progress,fromReplicaAddress(List)}
//
// rebuildStatus is keyed by the rebuilding replica's address ("tcp://10.0.0.5:10000"); the
// engine's address maps and the replicas' own IP and port tie addresses to replica names. A key
// that is a replica's name is accepted too.
//
// Each cached object is parsed once: informers replace an object on every change and never
// modify it, so its parsed facts are kept by pointer (see Longhorn.parsed).

// longhornModeRebuilding is the replica mode of a replica being rebuilt in replicaModeMap.
const longhornModeRebuilding = "WO"

// volumeFacts is what a Longhorn Volume says.
type volumeFacts struct {
	desired        int
	detached       bool
	pvcNS, pvcName string
	// nodeAA and zoneAA are the volume's own anti-affinity ("enabled": soft, "disabled": hard,
	// "ignored" or "": the global setting).
	nodeAA, zoneAA string
}

// replicaFacts is what a Longhorn Replica says.
type replicaFacts struct {
	name, volume, node, addr     string
	intact, running              bool
	inactive, deleting, evicting bool
}

// engineFacts is what a Longhorn Engine says about its volume's replicas.
type engineFacts struct {
	modes   map[string]string        // replica name -> mode
	addrs   map[string]string        // address (no scheme) -> replica name
	rebuild map[string]*rebuildFacts // rebuildStatus key as Longhorn wrote it -> rebuild
}

type rebuildFacts struct {
	rebuilding bool
	progress   int
	from       []string // source addresses, or names
}

func parseVolume(u *unstructured.Unstructured) *volumeFacts {
	v := &volumeFacts{
		detached: nestedString(u.Object, "status", "state") == "detached",
		pvcName:  nestedString(u.Object, "status", "kubernetesStatus", "pvcName"),
		pvcNS:    nestedString(u.Object, "status", "kubernetesStatus", "namespace"),
		nodeAA:   nestedString(u.Object, "spec", "replicaSoftAntiAffinity"),
		zoneAA:   nestedString(u.Object, "spec", "replicaZoneSoftAntiAffinity"),
	}
	if n, ok, _ := unstructured.NestedInt64(u.Object, "spec", "numberOfReplicas"); ok {
		v.desired = int(n)
	}
	return v
}

func parseReplica(u *unstructured.Unstructured) *replicaFacts {
	spec, _ := nestedMap(u.Object, "spec")
	status, _ := nestedMap(u.Object, "status")
	r := &replicaFacts{
		name:    u.GetName(),
		volume:  nestedString(spec, "volumeName"),
		node:    nestedString(spec, "nodeID"),
		intact:  nestedString(spec, "healthyAt") != "" && nestedString(spec, "failedAt") == "",
		running: nestedString(status, "currentState") == "running",
		// Longhorn always writes spec.active; an object without it is taken as active.
		inactive: !nestedBool(spec, "active", true),
		deleting: u.GetDeletionTimestamp() != nil,
		evicting: nestedBool(spec, "evictionRequested", false),
	}
	ip := nestedString(status, "storageIP")
	if ip == "" {
		ip = nestedString(status, "ip")
	}
	if port, ok, _ := unstructured.NestedInt64(status, "port"); ok && ip != "" && port != 0 {
		r.addr = ip + ":" + strconv.FormatInt(port, 10)
	}
	return r
}

func parseEngine(u *unstructured.Unstructured) *engineFacts {
	e := &engineFacts{modes: stringMap(u.Object, "status", "replicaModeMap"), addrs: map[string]string{}, rebuild: map[string]*rebuildFacts{}}
	for _, path := range [][]string{{"spec", "replicaAddressMap"}, {"status", "currentReplicaAddressMap"}} {
		for name, addr := range stringMap(u.Object, path...) {
			e.addrs[normalAddress(addr)] = name
		}
	}
	status, _ := nestedMap(u.Object, "status", "rebuildStatus")
	for key, val := range status {
		m, ok := val.(map[string]any)
		if !ok {
			continue
		}
		st := &rebuildFacts{}
		st.rebuilding, _, _ = unstructured.NestedBool(m, "isRebuilding")
		if p, ok, _ := unstructured.NestedInt64(m, "progress"); ok {
			st.progress = int(p)
		}
		if list, ok := m["fromReplicaAddressList"].([]any); ok {
			for _, a := range list {
				if s, ok := a.(string); ok && s != "" {
					st.from = append(st.from, s)
				}
			}
		}
		if one := nestedString(m, "fromReplicaAddress"); one != "" {
			st.from = append(st.from, one)
		}
		e.rebuild[key] = st
	}
	return e
}

// antiAffinity is Longhorn's global replica anti-affinity (Settings replica-soft-anti-affinity,
// default false: hard; replica-zone-soft-anti-affinity, default true: soft).
type antiAffinity struct{ softNode, softZone bool }

var defaultAntiAffinity = antiAffinity{softNode: false, softZone: true}

// soft resolves a volume's own anti-affinity field against the global setting.
func soft(volume string, global bool) bool {
	switch volume {
	case "enabled":
		return true
	case "disabled":
		return false
	}
	return global
}

// buildVolume assembles the facts of volume name from its Volume (nil when not cached), its
// Replicas and its Engines (usually one; two during a live migration).
func buildVolume(name string, vol *volumeFacts, reps []*replicaFacts, engs []*engineFacts, aa antiAffinity) Volume {
	v := Volume{Source: "longhorn", Name: name, Replicas: make([]Replica, len(reps)),
		SoftNodeAntiAffinity: aa.softNode, HardZoneAntiAffinity: !aa.softZone}
	if vol != nil {
		v.DesiredReplicas, v.Detached, v.PVCNamespace, v.PVCName = vol.desired, vol.detached, vol.pvcNS, vol.pvcName
		v.SoftNodeAntiAffinity, v.HardZoneAntiAffinity = soft(vol.nodeAA, aa.softNode), !soft(vol.zoneAA, aa.softZone)
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].name < reps[j].name })
	for i, rf := range reps {
		r := Replica{Name: rf.name, Node: rf.node, Intact: rf.intact, Running: rf.running,
			Inactive: rf.inactive, Deleting: rf.deleting, Evicting: rf.evicting}
		for _, e := range engs {
			r.Rebuilding = r.Rebuilding || e.modes[r.Name] == longhornModeRebuilding
		}
		if st := rebuildOf(rf, reps, engs); st != nil && (r.Rebuilding || st.rebuilding) {
			r.Rebuilding, r.Progress, r.Sources = true, clampPercent(st.progress), sourceNames(st.from, reps, engs)
		}
		v.Replicas[i] = r
	}
	return v
}

// rebuildOf returns the rebuild entry of replica r: keyed by its name, or by its address.
func rebuildOf(r *replicaFacts, reps []*replicaFacts, engs []*engineFacts) *rebuildFacts {
	for _, e := range engs {
		if st, ok := e.rebuild[r.name]; ok {
			return st
		}
		for key, st := range e.rebuild {
			if addressOf(normalAddress(key), reps, engs) == r.name {
				return st
			}
		}
	}
	return nil
}

// addressOf returns the name of the replica at addr (no scheme), or "".
func addressOf(addr string, reps []*replicaFacts, engs []*engineFacts) string {
	for _, e := range engs {
		if name, ok := e.addrs[addr]; ok {
			return name
		}
	}
	for _, r := range reps {
		if r.addr == addr {
			return r.name
		}
	}
	return ""
}

// sourceNames maps source addresses to replica names, dropping the ones no replica has; an
// entry that is a replica's name is kept as it is.
func sourceNames(from []string, reps []*replicaFacts, engs []*engineFacts) []string {
	var out []string
	for _, a := range from {
		if name := addressOf(normalAddress(a), reps, engs); name != "" {
			out = append(out, name)
		} else if !strings.Contains(a, ":") {
			out = append(out, a)
		}
	}
	return out
}

// normalAddress strips the scheme of a replica address ("tcp://10.0.0.5:10000" -> "10.0.0.5:10000").
func normalAddress(a string) string {
	if i := strings.Index(a, "://"); i >= 0 {
		return a[i+3:]
	}
	return a
}

// nestedString reads a string field without copying; "" when absent or not a string.
func nestedString(obj map[string]any, fields ...string) string {
	v, ok, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	if !ok {
		return ""
	}
	s, _ := v.(string)
	return s
}

// nestedBool reads a bool field; def when absent or not a bool.
func nestedBool(obj map[string]any, field string, def bool) bool {
	if b, ok := obj[field].(bool); ok {
		return b
	}
	return def
}

// nestedMap reads a map field without copying.
func nestedMap(obj map[string]any, fields ...string) (map[string]any, bool) {
	v, ok, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

// specString reads spec.<field> of a cached unstructured object.
func specString(obj any, field string) string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	return nestedString(u.Object, "spec", field)
}

// stringMap reads a map of strings, ignoring values of another type.
func stringMap(obj map[string]any, fields ...string) map[string]string {
	m, _ := nestedMap(obj, fields...)
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}
