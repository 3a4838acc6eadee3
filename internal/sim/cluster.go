package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// The model cluster: nodes, pods of ReplicaSets guarded by PodDisruptionBudgets, Longhorn
// volumes with replicas, the Lease, and an API server whose writes take time and whose replies
// may be lost.

var (
	errConflict = errors.New("the object has been modified; please apply your changes to the latest version (simulated conflict)")
	errNotFound = errors.New("nodes not found (simulated)")
	errPDB      = errors.New("Cannot evict pod as it would violate the pod's disruption budget (simulated)")
)

// errUnreachable is a transport error, as client-go returns when the API server cannot be reached.
func errUnreachable(op string) error {
	return &url.Error{Op: op, URL: "https://127.0.0.1:6443", Err: errors.New("connection refused (simulated API outage)")}
}

type node struct {
	name string
	// exists: a Node object is registered; up: the machine runs; ready: its kubelet reports Ready.
	exists, up, ready bool
	unschedulable     bool
	// annotation is edgedrain's cordon record (the request ID), "" when absent; keep is the
	// keep-cordoned annotation an operator set (its reason), "" when absent.
	annotation, keep string
	// cordonBy is who last set unschedulable, as the Node's managedFields record the field's
	// owner: cordonByEdgedrain or cordonByOperator ("" while schedulable: an uncordon takes the
	// field from every owner). kubectl uncordon leaves edgedrain's annotation behind: the
	// cordon is edgedrain's only while it carries that annotation and edgedrain set it.
	cordonBy string
	// uncordonedAt is when an operator last uncordoned the node.
	uncordonedAt time.Time
	// uid names the Node object: every registration makes a new one.
	uid int
	// changedAt is when the Node object last went or came (deleted, or registered again).
	changedAt time.Time
	rv        int
	bootID    int
	bootAt    time.Time // when the machine last booted
	// downUndrained records pods lost when the machine went down.
	// evictionRequested is the Longhorn node's eviction request made by the gate (work the gate
	// holds for the node's drain).
	evictionRequested bool
	// retired: the machine was powered off for good by a decommission command; deleted: a
	// coordinator deleted the Node object for a decommission (it never registers again);
	// gone: someone else deleted it (kubectl delete node), and its kubelet registers it again
	// when it next starts (operators.go).
	retired, deleted, gone bool
	// overridden: the decommission command ran on an override file, not on the coordinator's
	// COMPLETE.
	overridden bool
}

type pod struct {
	name, node, group string
	deleting          bool
	ready             bool
	// kind is who made the pod: "" a ReplicaSet (replaced when it goes), podJob a Job's pod
	// (evictable, not replaced), podDaemon a DaemonSet's (tolerates the cordon; the drain skips
	// it, as kubectl's IgnoreAllDaemonSets). landedAt is when it was bound to its node.
	kind     string
	landedAt time.Time
}

type group struct {
	name         string
	replicas     int
	minAvailable int
	// blocked counts faults that make the budget allow no disruption.
	blocked int
}

type replica struct {
	name                        string
	node                        string
	intact, running, rebuilding bool
	progress                    int
}

type volume struct {
	name     string
	desired  int
	replicas []*replica
	nextID   int
	// droppedFrom is when the last replica on each node was dropped: a check that saw it there
	// is judged with it (S2), though the volume no longer lists it.
	droppedFrom map[string]time.Time
}

type lease struct {
	holder  string
	renewAt time.Time
}

type cluster struct {
	w      *world
	nodes  map[string]*node
	order  []string
	pods   map[string]*pod
	groups []*group
	vols   []*volume
	apiUp  bool
	// apiUpAt is when the API came back last; frozen is the volume facts when it went down
	// (what the gate's caches hold during the outage). apiDownSeen is when it went down as a
	// probe sees it: an earlier outage's start if it was back for less than probePeriod since.
	apiUpAt, apiDownSeen time.Time
	// unsafeAt is, per node, when something made it less safe behind edgedrain's back: a copy of
	// data on it lost (its machine down, a replica failed, its kubelet gone, its Node deleted) or
	// an operator's uncordon of it.
	unsafeAt map[string]time.Time
	frozen   []volumes.Volume
	frozenN  map[string]volumes.NodeState
	lease    lease
	podSeq   int
	uidSeq   int
	// daemonSet: a DaemonSet runs a pod on every node (evictor.go); lateUntil and lostUntil end
	// the faults of apiwrites.go; urng draws what those two files do, a stream of its own, so
	// that runs without them keep their schedules.
	daemonSet            bool
	lateUntil, lostUntil time.Time
	urng                 *rand.Rand
}

// Who set a node's spec.unschedulable last (node.cordonBy).
const (
	cordonByEdgedrain = "edgedrain"
	cordonByOperator  = "operator"
)

// ours reports whether n's cordon is the one edgedrain made (coordinator's cordonIsOurs: its
// annotation is there and edgedrain alone set unschedulable).
func (n *node) ours() bool {
	return n.exists && n.unschedulable && n.annotation != "" && n.cordonBy == cordonByEdgedrain
}

// newUID gives a Node object registering now its UID.
func (c *cluster) newUID(n *node) {
	c.uidSeq++
	n.uid, n.changedAt = c.uidSeq, c.w.now
}

func newCluster(w *world, n int) *cluster {
	c := &cluster{w: w, nodes: map[string]*node{}, pods: map[string]*pod{}, apiUp: true}
	for i := range n {
		name := fmt.Sprintf("node-%d.edge", i)
		c.nodes[name] = &node{name: name, exists: true, up: true, ready: true, bootID: 1, bootAt: epoch.Add(-time.Hour)}
		c.newUID(c.nodes[name])
		c.order = append(c.order, name)
	}
	return c
}

// apiOp performs an API request that takes time: apply runs at the server if it is reachable,
// reply runs at the client. Some replies are lost: the write happened, the client sees a
// timeout (a transport error).
func (c *cluster) apiOp(what string, lossy bool, apply func() error, reply func(error)) {
	w := c.w
	if !c.apiUp {
		w.after(w.between(0, 3*time.Second), "api error", func() { reply(errUnreachable(what)) })
		return
	}
	if lossy && c.unkindWrite(what, apply, reply) { // (writes are the lossy requests)
		return
	}
	w.after(w.between(time.Millisecond, 30*time.Millisecond), "api request "+what, func() {
		if !c.apiUp {
			w.after(w.between(0, 3*time.Second), "api error", func() { reply(errUnreachable(what)) })
			return
		}
		err := apply()
		lost := lossy && w.chance(0.05)
		w.after(w.between(time.Millisecond, 30*time.Millisecond), "api reply "+what, func() {
			if lost {
				reply(errUnreachable(what))
				return
			}
			reply(err)
		})
	})
}

// schedulable nodes that can take pods.
func (c *cluster) canHost(n *node) bool { return n.exists && n.up && n.ready && !n.unschedulable }

// place creates a replacement pod for g on the least loaded node that can host it, or leaves
// it pending (placed later by reschedule).
func (c *cluster) place(g *group) {
	c.podSeq++
	p := &pod{name: fmt.Sprintf("%s-%d", g.name, c.podSeq), group: g.name}
	c.pods[p.name] = p
	c.schedule(p)
}

func (c *cluster) schedule(p *pod) {
	best := ""
	load := map[string]int{}
	for _, q := range c.pods {
		if q.kind != podDaemon {
			load[q.node]++
		}
	}
	for _, name := range c.order {
		n := c.nodes[name]
		if c.canHost(n) && (best == "" || load[name] < load[best]) {
			best = name
		}
	}
	if best == "" {
		return
	}
	p.node, p.landedAt = best, c.w.now
	c.w.after(c.w.between(500*time.Millisecond, 3*time.Second), "pod ready", func() {
		if q, ok := c.pods[p.name]; ok && q.node == best && !q.deleting && c.nodes[best].up {
			q.ready = true
		}
	})
}

// reschedule places pending pods.
func (c *cluster) reschedule() {
	for _, name := range slices.Sorted(maps.Keys(c.pods)) {
		if p := c.pods[name]; p.node == "" {
			c.schedule(p)
		}
	}
}

// evict asks to evict p: refused when its PodDisruptionBudget allows no disruption; else it
// terminates after its grace period and its ReplicaSet creates a replacement.
func (c *cluster) evict(p *pod) error {
	if p.kind == podJob { // (no PodDisruptionBudget, no replacement)
		p.deleting, p.ready = true, false
		c.w.after(c.w.between(200*time.Millisecond, 4*time.Second), "pod gone", func() { delete(c.pods, p.name) })
		return nil
	}
	g := c.group(p.group)
	healthy := 0
	for _, q := range c.pods {
		if q.group == g.name && q.ready && !q.deleting {
			healthy++
		}
	}
	min := g.minAvailable
	if g.blocked > 0 {
		min = g.replicas
	}
	if p.ready && healthy-1 < min {
		return fmt.Errorf("evict %s: %w", p.name, errPDB)
	}
	p.deleting, p.ready = true, false
	c.place(g)
	c.w.after(c.w.between(200*time.Millisecond, 4*time.Second), "pod gone", func() { delete(c.pods, p.name) })
	return nil
}

func (c *cluster) group(name string) *group {
	for _, g := range c.groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

// podsOn returns the evictable pods on node: every pod there but a DaemonSet's, which kubectl's
// drain (IgnoreAllDaemonSets) leaves, and which a drained node may hold (DESIGN S2).
func (c *cluster) podsOn(node string) []*pod {
	var out []*pod
	for _, p := range c.allPodsOn(node) {
		if p.kind != podDaemon {
			out = append(out, p)
		}
	}
	return out
}

// allPodsOn returns every pod bound to node.
func (c *cluster) allPodsOn(node string) []*pod {
	var out []*pod
	for _, name := range slices.Sorted(maps.Keys(c.pods)) {
		if p := c.pods[name]; p.node == node {
			out = append(out, p)
		}
	}
	return out
}

// replace makes a ReplicaSet's replacement for p, gone without an eviction.
func (c *cluster) replace(p *pod) {
	if !p.deleting && p.kind == "" {
		c.place(c.group(p.group))
	}
}

// machineDown takes a node's machine down: its pods die (their ReplicaSets replace them), its
// replicas stop.
func (c *cluster) machineDown(n *node) {
	n.up, n.ready = false, false
	c.markUnsafe(n.name)
	for _, p := range c.allPodsOn(n.name) {
		delete(c.pods, p.name)
		c.replace(p)
	}
	c.replicasStop(n)
}

// replicasStop stops n's replicas (its machine, or Longhorn's instance manager there, stopped).
func (c *cluster) replicasStop(n *node) {
	for _, v := range c.vols {
		for _, r := range v.replicas {
			if r.node == n.name {
				r.running = false
				if r.rebuilding {
					r.rebuilding, r.intact = false, false
				}
			}
		}
	}
}

// machineUp brings a node back with a new boot ID; its intact replicas run again.
func (c *cluster) machineUp(n *node) {
	n.up, n.bootID, n.bootAt = true, n.bootID+1, c.w.now
	switch {
	case n.deleted:
		// Its Node object was deleted for a decommission whose command did not retire the
		// machine: the kubelet registers it again as it starts, a new object (scenario
		// decommissioned-machine-booting-again-is-decommissioned-again).
		c.w.logf("%s's kubelet registers its Node object again (its agent's pod is made again)", n.name)
		n.exists, n.deleted, n.unschedulable, n.annotation, n.keep, n.cordonBy = true, false, false, "", "", ""
		c.newUID(n)
		n.rv++
	case n.gone:
		c.registerAgain(n, "as its kubelet starts") // (operators.go)
	}
	c.w.after(c.w.between(500*time.Millisecond, 3*time.Second), "kubelet ready", func() {
		if n.up && n.exists {
			n.ready = true
			n.rv++
			c.daemonPod(n)
			c.reschedule()
		}
	})
	for _, v := range c.vols {
		for _, r := range v.replicas {
			if r.node == n.name && r.intact {
				r.running = true
			}
		}
	}
}

// facts returns the volumes as the gate's Longhorn source reports them, and the node states.
func (c *cluster) facts() ([]volumes.Volume, map[string]volumes.NodeState) {
	if !c.apiUp {
		return c.frozen, c.frozenN
	}
	return c.liveFacts()
}

func (c *cluster) liveFacts() ([]volumes.Volume, map[string]volumes.NodeState) {
	var vols []volumes.Volume
	for _, v := range c.vols {
		fv := volumes.Volume{Source: "longhorn", Name: v.name, PVCNamespace: "default", PVCName: "pvc-" + v.name, DesiredReplicas: v.desired}
		for _, r := range v.replicas {
			fv.Replicas = append(fv.Replicas, volumes.Replica{Name: r.name, Node: r.node, Intact: r.intact, Running: r.running,
				Rebuilding: r.rebuilding, Progress: r.progress})
		}
		vols = append(vols, fv)
	}
	states := map[string]volumes.NodeState{}
	for name, n := range c.nodes {
		states[name] = volumes.NodeState{Exists: n.exists, Ready: n.ready, Cordoned: n.unschedulable, StorageDisabled: n.evictionRequested}
	}
	return vols, states
}

// operatorUncordon is kubectl uncordon (which leaves edgedrain's annotation, and takes the field
// from every owner); what says so.
func (c *cluster) operatorUncordon(n *node, what string) {
	c.w.logf(what, n.name)
	n.unschedulable, n.cordonBy, n.uncordonedAt = false, "", c.w.now
	c.markUnsafe(n.name)
	n.rv++
	c.reschedule()
}

// setAPI takes the API server down or up.
func (c *cluster) setAPI(up bool) {
	if up == c.apiUp {
		return
	}
	if !up {
		c.frozen, c.frozenN = c.liveFacts()
		if c.w.now.Sub(c.apiUpAt) >= probePeriod || c.apiDownSeen.IsZero() {
			c.apiDownSeen = c.w.now
		}
	} else {
		c.apiUpAt = c.w.now
	}
	c.apiUp = up
}

// probePeriod is how often the coordinator asks whether the API answers (Engine.probeAPI): an
// API back for less than that between two outages may go unseen, and the outages be measured as
// one.
const probePeriod = 2 * time.Second

// longhorn moves the replicas on: rebuilds a replacement for every volume short of copies (a
// failed replica, one stranded on a node down too long, one on a node whose eviction the gate
// requested), and discards replicas made redundant.
func (c *cluster) longhorn() {
	for _, v := range c.vols {
		good := 0
		for _, r := range v.replicas {
			// (Intact replicas stop on a machine that runs only when its Node's pods were
			// garbage-collected: Longhorn's instance manager with them.)
			if r.intact && r.running && !c.nodes[r.node].evictionRequested && c.nodes[r.node].up {
				good++
			}
			if r.rebuilding {
				good++
			}
		}
		if good < v.desired {
			c.rebuild(v)
		}
		// Discard failed replicas, and evicted ones once there are enough others.
		keep := v.replicas[:0]
		healthyElsewhere := 0
		for _, r := range v.replicas {
			if r.intact && r.running && !c.nodes[r.node].evictionRequested {
				healthyElsewhere++
			}
		}
		for _, r := range v.replicas {
			drop := !r.intact && !r.rebuilding
			if c.nodes[r.node].evictionRequested && r.intact && healthyElsewhere >= v.desired {
				drop = true
			}
			if !drop {
				keep = append(keep, r)
				continue
			}
			if v.droppedFrom == nil {
				v.droppedFrom = map[string]time.Time{}
			}
			v.droppedFrom[r.node] = c.w.now
		}
		v.replicas = keep
	}
}

// rebuild starts a new replica of v on a usable node that holds none.
func (c *cluster) rebuild(v *volume) {
	has := map[string]bool{}
	var source *replica
	for _, r := range v.replicas {
		has[r.node] = true
		if r.intact && r.running {
			source = r
		}
	}
	if source == nil {
		return // no running copy to rebuild from
	}
	for _, name := range c.order {
		n := c.nodes[name]
		if has[name] || !n.exists || !n.up || !n.ready || n.evictionRequested {
			continue
		}
		v.nextID++
		r := &replica{name: fmt.Sprintf("%s-r%d", v.name, v.nextID), node: name, running: true, rebuilding: true}
		v.replicas = append(v.replicas, r)
		steps := 1 + c.w.rng.IntN(4)
		var tick func()
		tick = func() {
			if !r.rebuilding {
				return
			}
			if !source.running || !source.intact {
				r.rebuilding = false // the rebuild failed with its source
				return
			}
			r.progress += 100 / steps
			if r.progress >= 100 {
				r.progress, r.rebuilding, r.intact = 100, false, true
				return
			}
			c.w.after(c.w.between(time.Second, 4*time.Second), "rebuild progress", tick)
		}
		c.w.after(c.w.between(time.Second, 4*time.Second), "rebuild progress", tick)
		return
	}
}

// markUnsafe records that something just made node name less safe behind edgedrain's back.
func (c *cluster) markUnsafe(name string) {
	if c.unsafeAt == nil {
		c.unsafeAt = map[string]time.Time{}
	}
	c.unsafeAt[name] = c.w.now
}

// unsafeSince reports whether node name was made less safe within freshness of decided (or
// after it): a check made before then could not see it.
func (c *cluster) unsafeSince(name string, decided time.Time) bool {
	at, ok := c.unsafeAt[name]
	return ok && decided.Sub(at) < freshness
}
