package testenv

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Builders of Longhorn objects shaped like Longhorn's own (only the fields edgedrain's volume gate
// reads), and ApplyLonghorn, which creates or changes them the way Longhorn's controllers would:
// spec first, then status. Tests and the demo use them.

// LonghornHealthyAt is the healthyAt time the builders write.
var LonghornHealthyAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339)

var longhornGVR = map[string]schema.GroupVersionResource{
	"Volume":  {Group: "longhorn.io", Version: "v1beta2", Resource: "volumes"},
	"Replica": {Group: "longhorn.io", Version: "v1beta2", Resource: "replicas"},
	"Engine":  {Group: "longhorn.io", Version: "v1beta2", Resource: "engines"},
	"Node":    {Group: "longhorn.io", Version: "v1beta2", Resource: "nodes"},
	"Setting": {Group: "longhorn.io", Version: "v1beta2", Resource: "settings"},
}

// LonghornGVR returns the resource of a Longhorn object built here.
func LonghornGVR(u *unstructured.Unstructured) (schema.GroupVersionResource, error) {
	gvr, ok := longhornGVR[u.GetKind()]
	if !ok {
		return gvr, fmt.Errorf("not a Longhorn kind: %q", u.GetKind())
	}
	return gvr, nil
}

func longhornObject(kind, name string, spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	if status != nil {
		u.Object["status"] = status
	}
	u.SetAPIVersion("longhorn.io/v1beta2")
	u.SetKind(kind)
	u.SetNamespace(LonghornNamespace)
	u.SetName(name)
	return u
}

// LonghornVolume is a Longhorn Volume used by the PVC pvcNS/pvcName (none when pvcName is "").
func LonghornVolume(name string, replicas int64, state, pvcNS, pvcName string) *unstructured.Unstructured {
	status := map[string]any{"state": state, "robustness": "healthy"}
	if pvcName != "" {
		status["kubernetesStatus"] = map[string]any{"pvName": name, "pvcName": pvcName, "namespace": pvcNS}
	}
	return longhornObject("Volume", name, map[string]any{"numberOfReplicas": replicas, "size": "1073741824"}, status)
}

// ReplicaState is what Longhorn says about a replica: "healthy" (healthyAt set, running),
// "stopped" (healthyAt set, stopped), "failed" (failedAt set), "new" (never used, running),
// "rebuilding" (running, not yet healthy).
type ReplicaState string

// LonghornReplica is a Longhorn Replica of volume on node, reachable at ip:10000. An unknown
// state is treated as "new".
func LonghornReplica(name, volume, node string, st ReplicaState, ip string) *unstructured.Unstructured {
	spec := map[string]any{"volumeName": volume, "nodeID": node, "engineName": volume + "-e-0", "active": true,
		"desireState": "running", "healthyAt": "", "failedAt": "", "diskID": "disk-1"}
	status := map[string]any{"currentState": "running", "ip": ip, "storageIP": ip, "port": int64(10000), "started": true}
	switch st {
	case "healthy":
		spec["healthyAt"] = LonghornHealthyAt
	case "stopped":
		spec["healthyAt"], spec["desireState"], status["currentState"], status["started"] = LonghornHealthyAt, "stopped", "stopped", false
	case "failed":
		spec["healthyAt"], spec["failedAt"], status["currentState"] = LonghornHealthyAt, LonghornHealthyAt, "error"
	}
	return longhornObject("Replica", name, spec, status)
}

// Rebuild is one rebuild in an engine's status: the rebuilding replica's address (ip:port), its
// progress and its source addresses.
type Rebuild struct {
	To       string
	Progress int64
	From     []string
}

// LonghornEngine is a volume's Engine on node: replica name -> address, name -> mode (RW, WO,
// ERR), and the rebuilds under way.
func LonghornEngine(volume, node string, addrs, modes map[string]string, rebuilds ...Rebuild) *unstructured.Unstructured {
	toAny := func(m map[string]string) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	rs := map[string]any{}
	for _, r := range rebuilds {
		from := make([]any, 0, len(r.From))
		for _, f := range r.From {
			from = append(from, "tcp://"+f)
		}
		rs["tcp://"+r.To] = map[string]any{"isRebuilding": true, "progress": r.Progress, "state": "in_progress",
			"fromReplicaAddressList": from}
	}
	return longhornObject("Engine", volume+"-e-0", map[string]any{"volumeName": volume, "nodeID": node, "active": true,
		"desireState": "running", "replicaAddressMap": toAny(addrs)},
		map[string]any{"currentState": "running", "currentReplicaAddressMap": toAny(addrs), "replicaModeMap": toAny(modes),
			"rebuildStatus": rs})
}

// LonghornNode is a Longhorn Node as Longhorn's node controller keeps it: Ready and Schedulable,
// with one default disk that takes replicas; allowScheduling is the node's spec.allowScheduling.
func LonghornNode(name string, allowScheduling bool) *unstructured.Unstructured {
	cond := func(typ string) map[string]any {
		return map[string]any{"type": typ, "status": "True", "reason": "", "message": "",
			"lastProbeTime": "", "lastTransitionTime": LonghornHealthyAt}
	}
	disk := "default-disk-" + name
	return longhornObject("Node", name,
		map[string]any{"name": name, "allowScheduling": allowScheduling, "evictionRequested": false, "tags": []any{},
			"disks": map[string]any{disk: map[string]any{"path": "/var/lib/longhorn/", "diskType": "filesystem",
				"allowScheduling": true, "evictionRequested": false, "storageReserved": int64(32 << 30), "tags": []any{}}}},
		map[string]any{"conditions": []any{cond("Ready"), cond("Schedulable")}, "zone": "", "region": "",
			"diskStatus": map[string]any{disk: map[string]any{"conditions": []any{cond("Ready"), cond("Schedulable")},
				"diskUUID": "disk-1", "diskName": disk, "diskPath": "/var/lib/longhorn/", "diskType": "filesystem",
				"storageAvailable": int64(100 << 30), "storageMaximum": int64(128 << 30), "storageScheduled": int64(0)}}})
}

// LonghornSetting is a Longhorn Setting (a top-level value, no spec), e.g.
// replica-soft-anti-affinity "true".
func LonghornSetting(name, value string) *unstructured.Unstructured {
	u := longhornObject("Setting", name, nil, map[string]any{"applied": true})
	delete(u.Object, "spec")
	u.Object["value"] = value
	return u
}

// ApplyLonghorn creates each object, or replaces it when it exists (keeping its annotations),
// then writes its status, as Longhorn's controllers would — as the release whose CRDs the
// cluster has writes it (see asInstalled). It returns the objects it created.
func ApplyLonghorn(ctx context.Context, dyn dynamic.Interface, objs ...*unstructured.Unstructured) (created []*unstructured.Unstructured, err error) {
	for _, obj := range objs {
		gvr, err := LonghornGVR(obj)
		if err != nil {
			return created, err
		}
		if obj, err = asInstalled(ctx, dyn, obj); err != nil {
			return created, err
		}
		res := dyn.Resource(gvr).Namespace(obj.GetNamespace())
		status := obj.Object["status"]
		cur, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if cur, err = res.Create(ctx, obj.DeepCopy(), metav1.CreateOptions{}); err != nil {
				return created, fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
			created = append(created, obj)
		case err == nil:
			next := obj.DeepCopy()
			next.SetResourceVersion(cur.GetResourceVersion())
			next.SetAnnotations(cur.GetAnnotations())
			if cur, err = res.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
				return created, fmt.Errorf("update %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
		default:
			return created, fmt.Errorf("get %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if status != nil {
			cur.Object["status"] = status
			if _, err = res.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return created, fmt.Errorf("update status of %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return created, nil
}

// asInstalled is obj as the Longhorn release whose CRDs the cluster serves writes it. The
// builders write an engine's rebuild sources as a list (fromReplicaAddressList, Longhorn 1.10 and
// later, which leave the deprecated fromReplicaAddress empty); a release without the list
// (Longhorn 1.7) rebuilds from one source, named in fromReplicaAddress.
func asInstalled(ctx context.Context, dyn dynamic.Interface, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if obj.GetKind() != "Engine" {
		return obj, nil
	}
	list, err := engineHasSourceList(ctx, dyn)
	if err != nil || list {
		return obj, err
	}
	obj = obj.DeepCopy()
	rebuilds, _, _ := unstructured.NestedMap(obj.Object, "status", "rebuildStatus")
	for addr, r := range rebuilds {
		m, _ := r.(map[string]any)
		from, _ := m["fromReplicaAddressList"].([]any)
		if len(from) > 1 {
			return nil, fmt.Errorf("engine %s: a rebuild of %s from %d sources, which this Longhorn release cannot show (one source)", obj.GetName(), addr, len(from))
		}
		delete(m, "fromReplicaAddressList")
		if len(from) == 1 {
			m["fromReplicaAddress"] = from[0]
		}
	}
	if rebuilds != nil {
		if err := unstructured.SetNestedMap(obj.Object, rebuilds, "status", "rebuildStatus"); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// sourceLists remembers, per cluster (dynamic client), whether its Engine CRD has
// fromReplicaAddressList.
var sourceLists sync.Map

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func engineHasSourceList(ctx context.Context, dyn dynamic.Interface) (bool, error) {
	if v, ok := sourceLists.Load(dyn); ok {
		return v.(bool), nil
	}
	crd, err := dyn.Resource(crdGVR).Get(ctx, "engines.longhorn.io", metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read the Engine CRD: %w", err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	has := false
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if vm["name"] != "v1beta2" {
			continue
		}
		_, has, _ = unstructured.NestedMap(vm, "schema", "openAPIV3Schema", "properties", "status", "properties",
			"rebuildStatus", "additionalProperties", "properties", "fromReplicaAddressList")
	}
	sourceLists.Store(dyn, has)
	return has, nil
}
