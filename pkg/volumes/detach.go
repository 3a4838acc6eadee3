package volumes

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Detach before COMPLETE: after eviction the gate waits until no volume is attached to the
// node any more, at most Config.DetachTimeout. A volume still attached when the node goes down
// is detached uncleanly: Longhorn then fails its replicas there and rebuilds them in full
// (longhorn/longhorn#1958, #1940). Cluster API waits the same way (nodeVolumeDetachTimeout).
// Volumes of pods the drain leaves on the node (DaemonSet and static pods) stay attached by
// design and are not waited for.

// indexByAttachedNode indexes storage.k8s.io VolumeAttachments by spec.nodeName and Longhorn
// Volumes by status.currentNodeID.
const indexByAttachedNode = "attachedNode"

func vaNode(obj any) ([]string, error) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.NodeName != "" {
		return []string{va.Spec.NodeName}, nil
	}
	return nil, nil
}

func longhornAttachedNode(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if n := nestedString(u.Object, "status", "currentNodeID"); n != "" && nestedString(u.Object, "status", "state") != "detached" {
		return []string{n}, nil
	}
	return nil, nil
}

// attachment is one volume still attached to a node.
type attachment struct {
	volume, pvcNS, pvcName, via string
}

// attachments lists the volumes attached to node that the drain should see detached: every
// VolumeAttachment naming the node, and every Longhorn volume attached there without one
// (attached by Longhorn itself or its UI), except those a pod that stays on the node uses.
func (g *Gate) attachments(node string) []attachment {
	var out []attachment
	seen := map[string]bool{}
	if g.vaIndex != nil {
		objs, _ := g.vaIndex.ByIndex(indexByAttachedNode, node)
		for _, obj := range objs {
			va, ok := obj.(*storagev1.VolumeAttachment)
			if !ok || (va.DeletionTimestamp != nil && !va.Status.Attached) {
				continue
			}
			a := attachment{via: "VolumeAttachment " + va.Name}
			if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
				a.volume = *pv
				seen[*pv] = true
				if p, err := g.pvs.Get(*pv); err == nil && p.Spec.ClaimRef != nil {
					a.pvcNS, a.pvcName = p.Spec.ClaimRef.Namespace, p.Spec.ClaimRef.Name
				}
			} else {
				a.volume = va.Name
			}
			if !g.keptOnNode(node, a) {
				out = append(out, a)
			}
		}
	}
	for _, v := range g.longhorn.attachedTo(node) {
		if seen[v.volume] {
			continue
		}
		v.via = "Longhorn volume attached here"
		if !g.keptOnNode(node, v) {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].volume < out[j].volume })
	return out
}

// keptOnNode reports whether a pod that the drain leaves on node (a DaemonSet's or a static
// pod) uses the attachment's claim: its volume stays attached by design.
func (g *Gate) keptOnNode(node string, a attachment) bool {
	if a.pvcName == "" {
		return false
	}
	objs, _ := g.podIndex.ByIndex(indexByClaim, a.pvcNS+"/"+a.pvcName)
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == node && stays(p) {
			return true
		}
	}
	return false
}

// stays reports whether a drain leaves pod where it is: a DaemonSet's pod, or a static pod.
func stays(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// checkDetached reports the volumes still attached to node after eviction, blocking until
// Config.DetachTimeout has passed since the gate first saw them (0: no limit); after that they
// are only reported, and an Event says the node goes down with them attached.
func (g *Gate) checkDetached(node string) ([]nodedrain.Blocker, bool) {
	att := g.attachments(node)
	g.detachMu.Lock()
	defer g.detachMu.Unlock()
	if len(att) == 0 {
		delete(g.detachSince, node)
		return nil, false
	}
	now := g.cfg.Now()
	since, ok := g.detachSince[node]
	if !ok {
		since, g.detachSince[node] = now, now
	}
	limit := g.cfg.DetachTimeout
	over := limit > 0 && now.Sub(since) >= limit
	out := make([]nodedrain.Blocker, 0, len(att))
	for _, a := range att {
		reason := fmt.Sprintf("still attached to this node (%s); waiting for it to detach", a.via)
		switch {
		case over:
			reason = fmt.Sprintf("not blocking: still attached to this node (%s) after --detach-timeout %s", a.via, limit)
		case limit > 0:
			reason += fmt.Sprintf(", at most %s", limit)
		}
		out = append(out, volumeBlocker("attached", a.volume, a.pvcNS, a.pvcName, reason, 0))
	}
	if over && g.reportOnce("detach-timeout/"+node, since.String()) {
		g.log.WithField("node", node).Warnf("%d volume(s) still attached after --detach-timeout %s; letting the node go down with them attached", len(att), limit)
		g.event(nodeRef(node), corev1.EventTypeWarning, "VolumesStillAttached",
			"%d volume(s) still attached after %s (--detach-timeout); the node may go down with them attached", len(att), limit)
	}
	return out, !over
}

// forgetDetach forgets when node's volumes were first seen attached (its drain is over).
func (g *Gate) forgetDetach(node string) {
	g.detachMu.Lock()
	delete(g.detachSince, node)
	g.detachMu.Unlock()
}

// attachedTo returns the Longhorn volumes attached to node (status.currentNodeID), from the
// cache.
func (l *Longhorn) attachedTo(node string) []attachment {
	if !l.Available() {
		return nil
	}
	objs, err := l.volumes.ByIndex(indexByAttachedNode, node)
	if err != nil {
		return nil
	}
	out := make([]attachment, 0, len(objs))
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			out = append(out, attachment{volume: u.GetName(),
				pvcNS:   nestedString(u.Object, "status", "kubernetesStatus", "namespace"),
				pvcName: nestedString(u.Object, "status", "kubernetesStatus", "pvcName")})
		}
	}
	return out
}

// detachTimeoutDefault is Config.DetachTimeout's default.
const detachTimeoutDefault = 5 * time.Minute
