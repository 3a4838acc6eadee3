package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Pods that land on a cordoned node (the model as unkind as reality). The
// coordinator's evictor is kubectl's (k8s.io/kubectl/pkg/drain): one list of the node's pods per
// attempt (DaemonSet and mirror pods skipped), the eviction of exactly those, success when those
// UIDs are gone. A pod that lands after the list is not that attempt's: the cordon keeps the
// scheduler from choosing the node, not every pod from landing there.
const (
	// PodPinned: once the target node is cordoned (within operatorWindow), a Job's pod created
	// with spec.nodeName set (bypassing the scheduler) lands on it, 0 to 30 s later.
	PodPinned Kind = "pod-created-with-nodename"
	// BindRace: once the target node is cordoned, a pod the scheduler bound to it on what its cache
	// showed just before the cordon lands on it, 0 to 1.5 s later.
	BindRace Kind = "scheduler-bind-races-the-cordon"
	// DaemonSetPods: a DaemonSet is created: a pod on every node, cordoned ones included (they
	// tolerate node.kubernetes.io/unschedulable), made again as each node boots. The drain skips
	// them, and a drained node may hold them (DESIGN S2: no evictable pod left).
	DaemonSetPods Kind = "daemonset-rollout"
)

// Who made a pod (pod.kind), besides a ReplicaSet.
const (
	podJob    = "job"
	podDaemon = "daemonset"
)

// evictorKinds are the kinds random plans draw with Config.UnkindPods.
var evictorKinds = []weightedKind{{PodPinned, 3}, {BindRace, 3}, {DaemonSetPods, 1}}

// evictorFaults draws this file's faults for a random plan (Config.UnkindPods).
func evictorFaults(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	for range 1 + rng.IntN(3) {
		k := drawKind(evictorKinds, rng)
		p = append(p, Fault{At: time.Duration(rng.Int64N(int64(cfg.Active))), Kind: k, Target: rng.IntN(cfg.Nodes)})
	}
	return p
}

// applyEvictorFault makes one of this file's faults happen.
func (s *Sim) applyEvictorFault(f Fault) {
	cl := s.cluster
	n := cl.nodes[cl.order[f.Target%len(cl.order)]]
	switch f.Kind {
	case DaemonSetPods:
		if cl.daemonSet {
			return
		}
		s.w.logf("a DaemonSet is created: its pods tolerate the cordon")
		cl.daemonSet = true
		for _, name := range cl.order {
			cl.daemonPod(cl.nodes[name])
		}
	case PodPinned, BindRace:
		uid := n.uid
		s.when(operatorWindow, func() bool { return n.exists && n.uid == uid && n.unschedulable }, func() {
			d, how := betweenR(s.urng, 0, 30*time.Second), "a pod created with spec.nodeName "+n.name+" (bypassing the scheduler)"
			if f.Kind == BindRace {
				d, how = betweenR(s.urng, 0, 1500*time.Millisecond), "a pod the scheduler bound to "+n.name+" just before its cordon"
			}
			s.w.after(d, "pod lands on a cordoned node", func() {
				if !n.exists || n.uid != uid || !n.up {
					return
				}
				cl.podSeq++
				p := &pod{name: fmt.Sprintf("job-%d", cl.podSeq), node: n.name, kind: podJob, landedAt: s.w.now}
				cl.pods[p.name] = p
				s.w.logf("%s lands on it: %s (cordoned %v)", how, p.name, n.unschedulable)
				s.w.after(betweenR(s.urng, 500*time.Millisecond, 3*time.Second), "pod ready", func() {
					if q, ok := cl.pods[p.name]; ok && !q.deleting && n.up {
						q.ready = true
					}
				})
			})
		})
	}
}

// daemonPod makes the DaemonSet's pod on n, if there is a DaemonSet and n has none: it lands
// whether n is cordoned or not.
func (c *cluster) daemonPod(n *node) {
	if !c.daemonSet || !n.exists || !n.up {
		return
	}
	for _, p := range c.allPodsOn(n.name) {
		if p.kind == podDaemon {
			return
		}
	}
	c.podSeq++
	p := &pod{name: fmt.Sprintf("ds-%s-%d", n.name, c.podSeq), node: n.name, kind: podDaemon, landedAt: c.w.now, ready: true}
	c.pods[p.name] = p
}
