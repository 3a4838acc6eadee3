package volumes

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The gate tells the coordinator when something a blocked check depends on changed
// (coordinator.GateWatcher), so that the check is asked again at once rather than on its timer.
// Only changes that may concern a blocked node count: its pods and VolumeAttachments, the
// Longhorn objects of the volumes that block it, and the rarer cluster-wide objects (PVs, PVCs,
// drainer Jobs, Longhorn Nodes and Settings). Node changes reach the coordinator through its own
// node informer. Churn elsewhere in the cluster wakes nobody.

// watchedNode is what a blocked node's last check named. A node stays watched until a check of
// it is not blocked, or its drain is released.
type watchedNode struct {
	volumes map[string]bool
}

// Changed implements coordinator.GateWatcher: it is ready after a change that may concern a
// node whose last check (Check, ReturnCheck) was blocked. Changes coalesce: one signal may stand
// for many.
func (g *Gate) Changed() <-chan struct{} { return g.changes }

func (g *Gate) changed() {
	select {
	case g.changes <- struct{}{}:
	default:
	}
}

// watch records whether node's check was blocked, and by which volumes.
func (g *Gate) watch(node string, blocked bool, blockers []nodedrain.Blocker) {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	if !blocked {
		delete(g.watched, node)
		return
	}
	w := watchedNode{volumes: map[string]bool{}}
	for _, b := range blockers {
		if b.Kind == nodedrain.BlockerVolume {
			w.volumes[b.Name] = true
		}
	}
	g.watched[node] = w
}

// concerns reports whether a change of an object on node, or of volume, may concern a watched
// node ("" matches nothing).
func (g *Gate) concerns(node, volume string) bool {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	for name, w := range g.watched {
		if (node != "" && name == node) || (volume != "" && w.volumes[volume]) {
			return true
		}
	}
	return false
}

// anyWatched reports whether some node's check is blocked: a change of a rarer cluster-wide
// object (PV, PVC, drainer Job, Longhorn Node or Setting) may then concern it.
func (g *Gate) anyWatched(any) bool {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	return len(g.watched) > 0
}

func (g *Gate) podConcerns(obj any) bool {
	p, ok := obj.(*corev1.Pod)
	return ok && g.concerns(p.Spec.NodeName, "")
}

func (g *Gate) attachmentConcerns(obj any) bool {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return false
	}
	pv := ""
	if va.Spec.Source.PersistentVolumeName != nil {
		pv = *va.Spec.Source.PersistentVolumeName
	}
	return g.concerns(va.Spec.NodeName, pv)
}

// reactTo signals a change of an informer's object when concerns says it may matter (for an
// update, the old or the new version).
func (g *Gate) reactTo(concerns func(any) bool) cache.ResourceEventHandlerFuncs {
	one := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if concerns(obj) {
			g.changed()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    one,
		UpdateFunc: func(old, cur any) { one(old); one(cur) },
		DeleteFunc: one,
	}
}

// longhornChanged signals a change of a Longhorn object that may concern a watched node: a
// replica or engine of a watched volume or on a watched node, such a volume or one attached
// there, any Longhorn Node or Setting.
func (g *Gate) longhornChanged(resource string, u *unstructured.Unstructured) {
	var node, volume string
	switch resource {
	case longhornReplicas.Resource, longhornEngines.Resource:
		node, volume = nestedString(u.Object, "spec", "nodeID"), nestedString(u.Object, "spec", "volumeName")
	case longhornVolumes.Resource:
		node, volume = nestedString(u.Object, "status", "currentNodeID"), u.GetName()
	default:
		if g.anyWatched(nil) {
			g.changed()
		}
		return
	}
	if g.concerns(node, volume) {
		g.changed()
	}
}
