package volumes

import (
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Index names of the Kubernetes caches.
const (
	indexByHostname = "hostname" // PersistentVolumes by the hostnames their node affinity requires
	indexByClaim    = "claim"    // pods by "namespace/claim" of the PVCs they mount
)

// localVolume is a PersistentVolume bound to the node by node affinity, with its bound claim.
type localVolume struct {
	pv  *corev1.PersistentVolume
	pvc *corev1.PersistentVolumeClaim
}

// pvHostnames indexes a PV by the kubernetes.io/hostname values its required node affinity
// allows (operator In): a local or hostPath-like volume whose data lives on that node.
func pvHostnames(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil, nil
	}
	var out []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn {
				out = append(out, e.Values...)
			}
		}
	}
	return out, nil
}

// podClaims indexes a pod by the claims it mounts ("namespace/claim").
func podClaims(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out, nil
}

// localVolumes returns the bound PVs whose data lives on node, from the caches.
func (g *Gate) localVolumes(node string) []localVolume {
	hostnames := []string{node}
	if n, err := g.nodes.Get(node); err == nil {
		if h := n.Labels[corev1.LabelHostname]; h != "" && h != node {
			hostnames = append(hostnames, h)
		}
	}
	seen := map[string]bool{}
	var out []localVolume
	for _, h := range hostnames {
		objs, _ := g.pvIndex.ByIndex(indexByHostname, h)
		for _, obj := range objs {
			pv, ok := obj.(*corev1.PersistentVolume)
			if !ok || seen[pv.Name] || pv.Spec.ClaimRef == nil {
				continue
			}
			seen[pv.Name] = true
			pvc, err := g.pvcs.PersistentVolumeClaims(pv.Spec.ClaimRef.Namespace).Get(pv.Spec.ClaimRef.Name)
			if err != nil || pvc.Spec.VolumeName != pv.Name || (pv.Spec.ClaimRef.UID != "" && pv.Spec.ClaimRef.UID != pvc.UID) {
				continue // not (or no longer) bound to this claim
			}
			out = append(out, localVolume{pv: pv, pvc: pvc})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pv.Name < out[j].pv.Name })
	return out
}

// pvNode returns the node holding a PVC's data when its PV is pinned to exactly one node by
// hostname, else "" (a network volume, or an unbound claim).
func (g *Gate) pvNode(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.VolumeName == "" {
		return ""
	}
	pv, err := g.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return ""
	}
	hosts, _ := pvHostnames(pv)
	if len(hosts) != 1 {
		return ""
	}
	// The value is a hostname label; find the node carrying it (usually the node's name).
	if nodes, err := g.nodes.List(labels.SelectorFromSet(labels.Set{corev1.LabelHostname: hosts[0]})); err == nil && len(nodes) == 1 {
		return nodes[0].Name
	}
	return hosts[0]
}

// templateSource is where a PVC's drainer template was found.
type templateSource struct {
	raw   string
	where string                  // "PVC ns/name" or "StatefulSet ns/name", for messages
	sts   *appsv1.StatefulSet     // the owning StatefulSet, when there is one
	ord   int                     // the PVC's ordinal in sts
	ref   *corev1.ObjectReference // what to record Events about a bad template on
}

// templateFor finds pvc's drainer template: its own annotation first, then its StatefulSet's.
func (g *Gate) templateFor(pvc *corev1.PersistentVolumeClaim) (templateSource, bool) {
	sts, ord := g.statefulSetOf(pvc)
	if raw, ok := pvc.Annotations[DrainerTemplateAnnotation]; ok {
		return templateSource{raw: raw, where: "PVC " + pvc.Namespace + "/" + pvc.Name, sts: sts, ord: ord,
			ref: pvcRef(pvc)}, true
	}
	if sts == nil {
		return templateSource{}, false
	}
	raw, ok := sts.Annotations[DrainerTemplateAnnotation]
	if !ok {
		return templateSource{}, false
	}
	return templateSource{raw: raw, where: "StatefulSet " + sts.Namespace + "/" + sts.Name, sts: sts, ord: ord,
		ref: stsRef(sts)}, true
}

// statefulSetOf returns the StatefulSet whose volumeClaimTemplates made pvc
// (<template>-<statefulset>-<ordinal>) and the ordinal, or nil.
func (g *Gate) statefulSetOf(pvc *corev1.PersistentVolumeClaim) (*appsv1.StatefulSet, int) {
	list, err := g.sts.StatefulSets(pvc.Namespace).List(labels.Everything())
	if err != nil {
		return nil, -1
	}
	for _, sts := range list {
		if ord, ok := claimOrdinal(sts, pvc.Name); ok {
			return sts, ord
		}
	}
	return nil, -1
}

// claimOrdinal returns the ordinal of claim among sts's claims, if sts made it.
func claimOrdinal(sts *appsv1.StatefulSet, claim string) (int, bool) {
	for _, t := range sts.Spec.VolumeClaimTemplates {
		prefix := t.Name + "-" + sts.Name + "-"
		rest, ok := strings.CutPrefix(claim, prefix)
		if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
			continue
		}
		if ord, err := strconv.Atoi(rest); err == nil && ord >= 0 {
			return ord, true
		}
	}
	return 0, false
}

// ordinalLive reports whether ord is the ordinal of a pod sts asks for, one of
// [spec.ordinals.start, start+spec.replicas) (start 0 when unset; replicas 1 when unset, as the
// API server defaults it): a claim with it is in use, or will be again once its pod is back, not
// an orphan. Every comparison of a claim's ordinal with the StatefulSet's size goes through it.
func ordinalLive(sts *appsv1.StatefulSet, ord int) bool {
	start, replicas := 0, 1
	if sts.Spec.Ordinals != nil {
		start = int(sts.Spec.Ordinals.Start)
	}
	if sts.Spec.Replicas != nil {
		replicas = int(*sts.Spec.Replicas)
	}
	return ord >= start && ord < start+replicas
}

// mountedBy returns a pod, other than a drainer's, that is scheduled and not finished and mounts
// pvc: the claim is in use.
func (g *Gate) mountedBy(pvc *corev1.PersistentVolumeClaim) *corev1.Pod {
	objs, _ := g.podIndex.ByIndex(indexByClaim, pvc.Namespace+"/"+pvc.Name)
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Labels[DrainerLabel] == "true" || pod.Spec.NodeName == "" {
			continue
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		return pod
	}
	return nil
}

func pvcRef(pvc *corev1.PersistentVolumeClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace,
		Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
}

func stsRef(sts *appsv1.StatefulSet) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: sts.Namespace,
		Name: sts.Name, UID: sts.UID, ResourceVersion: sts.ResourceVersion}
}
