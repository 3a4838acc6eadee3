package coordinator

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Core holds the coordinator's decisions over every node's drain, without I/O: it feeds events
// to each node's pure state machine (nodedrain.Step), rebuilds drains after a restart
// (nodedrain.Resume), admits waiting drains (nodedrain.Admit), fires retry timers, applies the
// API-unreachable rule and decides which published statuses are news worth an Event. The Engine
// performs the actions it returns against Kubernetes and the bus; the whole-protocol
// simulation (internal/sim) drives the same Core against a model cluster and bus.
type Core struct {
	policy            nodedrain.Limits
	maxConcurrent     int
	drains            map[string]nodedrain.Drain
	wholeCluster      bool
	announced         map[string]nodedrain.DrainStatus // the status of each node's last Event
	seen              map[string]time.Time             // when admission last saw each node
	declaredConfirmed bool                             // see ConfirmDeclared
	absent            map[string]time.Time             // since when a COMPLETE node's Node object is missing
	frozenSince       time.Time                        // since when the node counts pause (viewFresh)
	idleAbsent        map[string]time.Time             // since when an idle drain's Node object is missing
	notReady          map[string]notReadySeen          // since when this process has seen each node NotReady (its own clock)
	vanished          map[string]time.Time             // since when a draining node's Node object is missing
	domains           map[string]string                // each node's last known failure domain
	withdrawn         map[string]time.Time             // when each node's request was last withdrawn (see agentsBack)
	staleAfter        time.Duration                    // see SetStaleHolderTimeout
	allowDecommission bool                             // see SetAllowDecommission
	apiDownSince      time.Time                        // see SetAPIUnreachable
	viewSettlesAt     time.Time                        // see APIAnswered
	relist            time.Duration                    // see SetInformerRelist
}

// AdmissionVerdict is what the maintenance policy says about the waiting drains (see
// nodedrain.AdmitInput): drains held in REQUESTED, and warnings published before admission.
type AdmissionVerdict struct {
	Holds, Warnings map[string]nodedrain.Hold
	// Peers is the volume gate's GatePeers, if it has one.
	Peers func(node string) []nodedrain.VolumePeers
}

// SetStaleHolderTimeout sets how long a COMPLETE node may be NotReady before its admission slot
// is released (a node that never comes back must not hold the slot forever); a node whose Node
// object is gone releases it after min(d, DeletedGrace). Zero: never.
func (c *Core) SetStaleHolderTimeout(d time.Duration) { c.staleAfter = d }

// SetAPIUnreachable says since when the Kubernetes API has not answered this coordinator (zero:
// it answers). Meanwhile no drain is admitted: it could be neither cordoned nor evicted, and the
// API-unreachable rule is for drains the API saw cordoned before it went away.
func (c *Core) SetAPIUnreachable(since time.Time) { c.apiDownSince = since }

// APIAnswered says the Kubernetes API answered this coordinator again at at, after it had not
// (or, at the start of a term, that it may have missed an outage). Its informers may take up to
// the relist bound (informerRelist) more to list again, after an outage of any length: a
// reflector's backoff grows over the failures of the last two minutes, not of this outage alone.
// An outage that begins before that finds their view older than itself (APIUnreachable). A blip
// of the probe costs the rule that much too: the safe side.
func (c *Core) APIAnswered(at time.Time) {
	if c.relist <= 0 {
		return
	}
	if settles := at.Add(c.relist + probeLateness); settles.After(c.viewSettlesAt) {
		c.viewSettlesAt = settles
	}
}

// SetInformerRelist sets Config.InformerRelist: zero keeps informerRelist, a negative value
// never waits.
func (c *Core) SetInformerRelist(d time.Duration) {
	if d != 0 {
		c.relist = d
	}
}

// TermBegins says a term of this Core begins at now in a process that started at started. The
// informers' caches are the process's: one that ran before its term (a standby taking over, or
// a leader starting a new term) may have missed an outage they are still listing again after,
// so the API-unreachable rule waits for them as after one (APIAnswered). A process that has
// just started listed them afresh.
func (c *Core) TermBegins(now, started time.Time) {
	if now.Sub(started) > probeLateness {
		c.APIAnswered(now)
	}
}

// probeLateness is how long this coordinator may take to see the API go (its probe's period and
// timeout): an outage it saw begin at t may have begun that much before.
const probeLateness = 5 * time.Second

// SetAllowDecommission says whether decommission requests may be admitted (Config.AllowDecommission).
func (c *Core) SetAllowDecommission(allow bool) { c.allowDecommission = allow }

// DecommissionOff is the hold of a decommission request on a coordinator that does not allow them.
const DecommissionOff = "waiting: decommission is off on this coordinator (--allow-decommission, with the RBAC of " +
	"deploy/components/decommission); withdraw the request, or turn it on"

// holdDecommissions adds to holds the decommissions waiting on a coordinator that does not allow them.
func (c *Core) holdDecommissions(holds map[string]nodedrain.Hold) map[string]nodedrain.Hold {
	if c.allowDecommission {
		return holds
	}
	for n, d := range c.drains {
		if d.AwaitsAdmission() && nodedrain.DeclaresDecommission(*d.Request) {
			holds = maps.Clone(holds)
			if holds == nil {
				holds = map[string]nodedrain.Hold{}
			}
			holds[n] = nodedrain.Hold{Reason: "decommission-off", Message: DecommissionOff}
		}
	}
	return holds
}

// DeletedGrace is how long a COMPLETE node's Node object may be missing before it counts as
// deleted for good (a node re-registering after its reboot is back within seconds).
const DeletedGrace = time.Minute

// ReleasedUnderShutdown begins the message of a COMPLETE whose node went down under a declared
// whole-cluster shutdown and released its slot.
const ReleasedUnderShutdown = "COMPLETE, and the node went down under the declared whole-cluster shutdown: admission slot released"

// NodeAction is an action for one node's drain. Release, when set instead of Action, asks the
// volume gate to undo the work it started for the node's drain, which is over.
type NodeAction struct {
	Node string
	// RequestID is the request the node's drain served when the action was decided.
	RequestID string
	Action    nodedrain.Action
	Release   bool
}

// CoreEvent tells the caller about a decision of the Core that is not a node's action.
type CoreEvent struct {
	// WholeCluster changed: every node has an open request (see nodedrain.Admit).
	WholeCluster, Changed bool
	// ConfirmDeclared: admission would act on a declared whole-cluster shutdown (release a down
	// node's slot, admit, answer NOTSUPPORTED) and waits for ConfirmDeclared.
	ConfirmDeclared bool
}

// ConfirmDeclared says the requests were read afresh from the bus and match the Core's view:
// the next Admit may act on a declared whole-cluster shutdown (once). A view from the watch
// alone may be old: a coordinator paused for seconds wakes with the request events of that
// time still queued, and Go's select may hand it a timer first; the declaration may have ended
// meanwhile, and a slot released under it is released for good (found by the simulation).
func (c *Core) ConfirmDeclared() { c.declaredConfirmed = true }

// NewCore returns a Core with no drains.
func NewCore(p nodedrain.Limits, maxConcurrent int) *Core {
	return &Core{policy: p, maxConcurrent: maxConcurrent, drains: map[string]nodedrain.Drain{},
		announced: map[string]nodedrain.DrainStatus{}, relist: informerRelist}
}

// Drain returns node's drain as the Core knows it.
func (c *Core) Drain(node string) (nodedrain.Drain, bool) {
	d, ok := c.drains[node]
	return d, ok
}

// Nodes returns the names of every node the Core has a drain for, sorted.
func (c *Core) Nodes() []string {
	return slices.Sorted(maps.Keys(c.drains))
}

// WholeCluster reports whether the last admission saw a whole-cluster shutdown.
func (c *Core) WholeCluster() bool { return c.wholeCluster }

// ResumeInput is what a starting coordinator reads from the bus and the cluster.
type ResumeInput struct {
	// Requests is the current request of each node (only nodes that have one).
	Requests map[string]*nodedrain.NodeDrainRequest
	// Statuses is the last status published for each node.
	Statuses map[string]nodedrain.NodeDrainStatus
	// CordonedByUs lists the nodes carrying edgedrain's cordon annotation (schedulable or not).
	CordonedByUs map[string]bool
	// Held lists the nodes the volume gate holds work for (GateHolder).
	Held []string
}

// Resume rebuilds every node's drain from what the bus and the cluster say, and returns the
// actions that carry them on, node by node in name order.
func (c *Core) Resume(in ResumeInput, now time.Time) []NodeAction {
	c.drains, c.wholeCluster = map[string]nodedrain.Drain{}, false
	c.announced = map[string]nodedrain.DrainStatus{}
	statuses := make(map[string]nodedrain.NodeDrainStatus, len(in.Statuses))
	for n, st := range in.Statuses {
		statuses[n] = st
	}
	// A node carrying our cordon annotation is ours to uncordon even if its status was lost.
	for n := range in.CordonedByUs {
		st, ok := statuses[n]
		if !ok {
			st = nodedrain.NodeDrainStatus{Node: n, Status: nodedrain.StatusNotRequested}
		}
		st.CordonedByUs = true
		statuses[n] = st
	}
	names := map[string]bool{}
	for n := range in.Requests {
		names[n] = true
	}
	for n := range statuses {
		names[n] = true
	}
	for _, n := range in.Held {
		names[n] = true
	}
	var out []NodeAction
	for _, node := range slices.Sorted(maps.Keys(names)) {
		st, ok := statuses[node]
		if !ok {
			st = nodedrain.NodeDrainStatus{Node: node, Status: nodedrain.StatusNotRequested}
		}
		if _, published := in.Statuses[node]; published {
			// Its Event was sent when the status was published: not again after a restart.
			c.announced[node] = st.Status
		}
		d, actions := nodedrain.Resume(st, in.Requests[node], now, c.policy)
		c.drains[node] = d
		c.resumeWithdrawal(node, st, in.Requests[node], now)
		out = appendNode(out, node, d.Status.RequestID, actions)
		if (!d.Draining() && d.Status.Status != nodedrain.StatusComplete) || (d.Decommissioned() && d.Request == nil) {
			// Only a drain under way (or COMPLETE) holds work of the volume gate (an eviction
			// asked of the storage, drainer Jobs). Anything else was left by a drain that ended
			// while no coordinator ran, or whose release failed when the last one stopped:
			// Release is idempotent. A decommission whose request went meanwhile is over
			// too.
			out = append(out, NodeAction{Node: node, Release: true})
		}
	}
	return out
}

// Handle feeds one event to node's drain (nodedrain.Step, the pure machine) and returns the
// actions to take, with the bookkeeping that spans nodes.
func (c *Core) Handle(node string, ev nodedrain.Event, now time.Time) []NodeAction {
	d, ok := c.drains[node]
	if !ok {
		if r, isReq := ev.(nodedrain.EvRequest); !isReq || r.Request == nil {
			// Nothing to do for a node without a drain but take up its request: not the
			// withdrawal or a late result of a forgotten (decommissioned) node, which would
			// bring it back as a node of the cluster.
			return nil
		}
		d = nodedrain.Drain{Status: nodedrain.NodeDrainStatus{Node: node, Status: nodedrain.StatusNotRequested}}
	}
	prev := d.Request
	d, actions := nodedrain.Step(d, ev, now, c.policy)
	c.drains[node] = d
	out := appendNode(nil, node, d.Status.RequestID, actions)
	if slices.Contains(actions, nodedrain.Action(nodedrain.Forgotten{})) {
		delete(c.drains, node)
		delete(c.announced, node)
	}
	if prev != nil && (d.Request == nil || d.Request.RequestID != prev.RequestID) {
		out = append(out, NodeAction{Node: node, Release: true})
	}
	if prev != nil && d.Request == nil {
		c.noteWithdrawn(node, now)
	}
	return out
}

// Admit admits waiting drains given the cluster's nodes, answers NOTSUPPORTED where no node can
// take the workloads, and refreshes every queued drain's message.
func (c *Core) Admit(nodes []nodedrain.NodeInfo, pol AdmissionVerdict, now time.Time) ([]NodeAction, CoreEvent) {
	if c.seen == nil {
		c.seen = map[string]time.Time{}
	}
	// Its own nodes for what it does to them; the whole cluster for where workloads can go.
	all, nodes := nodes, managedOnly(nodes)
	// A node that stopped matching --node-selector is still there: a COMPLETE one keeps its
	// slot until it is back (not released as a Node gone), a drain under way ends its own way.
	var out []NodeAction
	if c.viewFresh(now) {
		out = c.releaseStale(all, now)
		out = append(out, c.endVanished(all, now)...)
		out = append(out, c.forgetAbsent(all, now)...)
	}
	if c.domains == nil {
		c.domains = map[string]string{}
	}
	for _, n := range nodes {
		c.seen[n.Name] = now
		c.domains[n.Name] = n.Domain
	}
	recent := map[string]bool{}
	for n, at := range c.seen {
		if now.Sub(at) < seenFor {
			recent[n] = true
		}
	}
	if !c.apiDownSince.IsZero() {
		return append(out, c.holdForAPI(now)...), CoreEvent{WholeCluster: c.wholeCluster}
	}
	// (On a node that left --node-selector too: the cordon is edgedrain's, and no one else undoes it.)
	out = append(out, c.strandedCordons(all, now)...)
	if pol.Peers != nil && !c.wholeCluster {
		out = append(out, c.giveWay(pol.Peers, now)...)
	}
	pol.Holds = c.holdDecommissions(pol.Holds)
	unsure := now.Before(c.viewSettlesAt)
	adm := nodedrain.AdmitWith(nodedrain.AdmitInput{Drains: c.drains, Nodes: all, MaxConcurrent: c.maxConcurrent,
		Seen: recent, Back: c.agentsBack(now), Holds: pol.Holds, Warnings: pol.Warnings, Domains: c.domains, Peers: pol.Peers,
		ReadyUnsure: unsure})
	if adm.WholeCluster && !c.declaredConfirmed &&
		(len(adm.Admit) > 0 || len(adm.NotSupported) > 0 || len(c.declaredReleasable(nodes, unsure)) > 0) {
		return out, CoreEvent{WholeCluster: c.wholeCluster, ConfirmDeclared: true}
	}
	c.declaredConfirmed = false
	ev := CoreEvent{WholeCluster: adm.WholeCluster, Changed: adm.WholeCluster != c.wholeCluster}
	c.wholeCluster = adm.WholeCluster
	out = append(out, c.releaseDeclared(all, unsure, now)...) // (an unmanaged node is there: its readiness counts)
	for _, n := range adm.Admit {
		if w, ok := pol.Warnings[n]; ok {
			// The pre-flight prediction is published with REQUESTED (--preflight=warn).
			out = append(out, c.Handle(n, nodedrain.EvQueued{Message: w.Message, Blockers: w.Blockers}, now)...)
		}
		out = append(out, c.Handle(n, nodedrain.EvAdmit{}, now)...)
	}
	for _, n := range slices.Sorted(maps.Keys(adm.Held)) {
		h := adm.Held[n]
		out = append(out, c.Handle(n, nodedrain.EvQueued{Message: h.Message, Blockers: h.Blockers}, now)...)
	}
	for _, n := range slices.Sorted(maps.Keys(adm.NotSupported)) {
		out = append(out, c.Handle(n, nodedrain.EvNotSupported{Reason: adm.NotSupported[n]}, now)...)
	}
	for _, n := range slices.Sorted(maps.Keys(adm.Queued)) {
		out = append(out, c.Handle(n, nodedrain.EvQueued{Message: adm.Queued[n]}, now)...)
	}
	return out, ev
}

// giveWay takes back to REQUESTED the drains that wait for copies held by drains admitted
// before them (nodedrain.GiveWay), so that two drains never wait for each other's copy for
// good. (In a declared whole-cluster shutdown every node goes down anyway.)
func (c *Core) giveWay(peers func(string) []nodedrain.VolumePeers, now time.Time) []NodeAction {
	gw := nodedrain.GiveWay(c.drains, peers)
	var out []NodeAction
	for _, n := range slices.Sorted(maps.Keys(gw)) {
		out = append(out, c.Handle(n, nodedrain.EvGiveWay{Reason: gw[n]}, now)...)
	}
	return out
}

// holdForAPI keeps every drain waiting for admission in REQUESTED while the API is unreachable,
// saying so: admission decides nothing on the informers' frozen view (not NOTSUPPORTED either).
func (c *Core) holdForAPI(now time.Time) []NodeAction {
	msg := fmt.Sprintf("waiting: the Kubernetes API has not answered since %s; no drain is admitted until it does",
		c.apiDownSince.UTC().Format(time.RFC3339))
	var out []NodeAction
	for _, node := range c.Nodes() {
		if c.drains[node].AwaitsAdmission() {
			out = append(out, c.Handle(node, nodedrain.EvQueued{Message: msg}, now)...)
		}
	}
	return out
}

// forgetAbsent forgets the idle drain (NOTREQUESTED, no request) of a node out of the cluster:
// its Node object missing, and unseen by admission, for seenFor. Its status leaves the bus; a
// node that registers again and asks starts afresh.
func (c *Core) forgetAbsent(cluster []nodedrain.NodeInfo, now time.Time) []NodeAction {
	if c.idleAbsent == nil {
		c.idleAbsent = map[string]time.Time{}
	}
	if len(cluster) == 0 {
		return nil // no evidence: a failed list looks so
	}
	present := nodeNames(cluster)
	var out []NodeAction
	for _, node := range c.Nodes() {
		d := c.drains[node]
		if present[node] || !d.Idle() {
			delete(c.idleAbsent, node)
			continue
		}
		since, ok := c.idleAbsent[node]
		if !ok {
			c.idleAbsent[node] = now
			continue
		}
		if now.Sub(since) >= seenFor && now.Sub(c.seen[node]) >= seenFor {
			delete(c.idleAbsent, node)
			out = append(out, c.Handle(node, nodedrain.EvForgetIdle{}, now)...)
		}
	}
	return out
}

// agentsBack lists the nodes whose request was withdrawn within backFor: an agent ran there
// then, most likely one back from its operation (it withdraws once its node is back), whose
// Node may still show NotReady. A whole-cluster shutdown does not count such a node as down
// (admission): after a reboot its kubelet can report Ready well after the agent ran (a network
// plugin still starting; a hostNetwork agent does not wait for it). Taken for down, the node,
// which had lost the shutdown's sentinel with its reboot (/var/run), let the declaration pass:
// the last two nodes went down at once with one slot (invariant S3, found by the simulation).
func (c *Core) agentsBack(now time.Time) map[string]bool {
	back := map[string]bool{}
	for n, at := range c.withdrawn {
		if now.Sub(at) < backFor {
			back[n] = true
		} else {
			delete(c.withdrawn, n)
		}
	}
	return back
}

// resumeWithdrawal carries over agentsBack's sign across a takeover or restart: a request
// withdrawn lately (its status says so, written within backFor) or while no coordinator ran (a
// drain under way whose request is gone) counts as withdrawn now. Otherwise a new leader took a
// node back from its reboot, NotReady still, for down under a declared whole-cluster shutdown.
// (From now, not from the status's time: that was written on another replica's clock.)
func (c *Core) resumeWithdrawal(node string, st nodedrain.NodeDrainStatus, req *nodedrain.NodeDrainRequest, now time.Time) {
	if req != nil || st.RequestID == "" {
		return
	}
	idle := st.Status == nodedrain.StatusNotRequested
	if idle && now.Sub(st.UpdatedAt) >= backFor {
		return
	}
	c.noteWithdrawn(node, now)
}

// noteWithdrawn records that node's request was withdrawn at now (agentsBack).
func (c *Core) noteWithdrawn(node string, now time.Time) {
	if c.withdrawn == nil {
		c.withdrawn = map[string]time.Time{}
	}
	c.withdrawn[node] = now
}

// backFor is how long a withdrawal counts as a sign of an agent running on its node (a kubelet
// reports Ready within about a minute of its start; a node that really went down again meanwhile
// only delays a declared whole-cluster shutdown by this much).
const backFor = 2 * time.Minute

// seenFor is how long a node that admission saw still counts as a member of the cluster after
// its Node object went away (a re-registration takes seconds; a cluster that really shrank to
// one node lets its last node proceed after this long).
const seenFor = 10 * time.Minute

// Timers fires every retry (and return-gate deadline) that is due at now.
func (c *Core) Timers(now time.Time) []NodeAction {
	var out []NodeAction
	for _, node := range c.Nodes() {
		if at := c.due(c.drains[node]); !at.IsZero() && !now.Before(at) {
			out = append(out, c.Handle(node, nodedrain.EvTimer{}, now)...)
		}
	}
	return out
}

// Changed tells every drain it matters to that something a gate check depends on changed
// (nodedrain.EvChanged): a blocked gate is asked again soon instead of at its next recheck. It
// reports whether any drain cared.
func (c *Core) Changed(now time.Time) ([]NodeAction, bool) {
	var out []NodeAction
	cared := false
	for _, node := range c.Nodes() {
		if c.drains[node].ReactsToChange() {
			cared = true
			out = append(out, c.Handle(node, nodedrain.EvChanged{}, now)...)
		}
	}
	return out, cared
}

// NextTimer returns the earliest retry time (or return-gate deadline) of any drain; zero when
// none is set.
func (c *Core) NextTimer() time.Time {
	var next time.Time
	for _, d := range c.drains {
		if at := c.due(d); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// due is the earliest time a timer of d fires; zero: none.
func (c *Core) due(d nodedrain.Drain) time.Time {
	at := d.ReturnDeadline(c.policy)
	if d.RetryOp != nodedrain.OpNone && (at.IsZero() || d.RetryAt.Before(at)) {
		at = d.RetryAt
	}
	return at
}

// releaseStale releases the admission slot of COMPLETE nodes that never came back: NotReady
// for the stale-holder timeout, or their Node object gone for DeletedGrace (DESIGN §9).
func (c *Core) releaseStale(nodes []nodedrain.NodeInfo, now time.Time) []NodeAction {
	if c.staleAfter <= 0 || c.wholeCluster {
		return nil
	}
	if c.absent == nil {
		c.absent = map[string]time.Time{}
	}
	if c.notReady == nil {
		c.notReady = map[string]notReadySeen{}
	}
	known := make(map[string]nodedrain.NodeInfo, len(nodes))
	for _, n := range nodes {
		known[n.Name] = n
		// NotReady is timed on this process's clock, from when it first saw it: the condition's
		// NotReadySince was written on another machine's clock (the node lifecycle controller's,
		// or the kubelet's), and a coordinator whose clock is ahead of it would release early.
		// A NotReadySince that changed is a new NotReady spell (the node was Ready in between,
		// unseen between two passes): it is timed anew.
		if seen, ok := c.notReady[n.Name]; !n.Ready && (!ok || !seen.cond.Equal(n.NotReadySince)) {
			c.notReady[n.Name] = notReadySeen{at: now, cond: n.NotReadySince}
		} else if n.Ready {
			delete(c.notReady, n.Name)
		}
	}
	for name := range c.notReady {
		if _, ok := known[name]; !ok {
			delete(c.notReady, name)
		}
	}
	var out []NodeAction
	for _, node := range c.Nodes() {
		d := c.drains[node]
		if !d.Cleared() || d.Status.SlotReleased {
			delete(c.absent, node)
			continue
		}
		reason := ""
		if n, ok := known[node]; ok {
			delete(c.absent, node)
			// Counted from the COMPLETE at the earliest: a node already NotReady when its drain
			// completed (a hung kubelet; a reboot may be the cure) goes down for it only now. (A
			// COMPLETE resumed from another replica carries that replica's clock: counting from
			// this process's first sight of the node NotReady too, which came after it, keeps a
			// replica whose clock is ahead from releasing early.)
			since := c.notReady[node].at
			if since.Before(d.Status.UpdatedAt) {
				since = d.Status.UpdatedAt
			}
			if !n.Ready && !n.NotReadySince.IsZero() && now.Sub(since) >= c.staleAfter {
				reason = fmt.Sprintf("%[1]s, but the node has been NotReady since %[2]s (and %[1]s for longer than the stale-holder timeout %[3]s): "+
					"admission slot released; the node is uncordoned when it is back and its agent withdraws",
					d.Status.Status, n.NotReadySince.UTC().Format(time.RFC3339), c.staleAfter)
			}
		} else if since, seen := c.absent[node]; !seen {
			c.absent[node] = now
		} else if gone := now.Sub(since); gone >= min(c.staleAfter, DeletedGrace) {
			reason = fmt.Sprintf("%s, but the Node object has been gone for %s: admission slot released",
				d.Status.Status, gone.Round(time.Second))
		}
		if reason != "" {
			out = append(out, c.Handle(node, nodedrain.EvReleaseSlot{Reason: reason}, now)...)
		}
	}
	return out
}

// releaseDeclared releases, for good, the slot of each COMPLETE node that went down under a
// declared whole-cluster shutdown. Admission frees such a slot while the declaration holds; the
// declaration ends as soon as one node is Ready without a request (the last one withdrew, one
// came back), and its slot would be held again while a drain admitted under the declaration
// runs: more nodes in maintenance than the limit (invariant S3). Released and
// published, it stays released, as a stale holder's. A node whose Node object is missing counts
// as down, as admission counts it (its slot free under the declaration): released too, so that
// the bus never shows it holding a slot admission gave to another node (found by the
// simulation: kubectl delete node on a node COMPLETE for the shutdown, not down yet).
func (c *Core) releaseDeclared(nodes []nodedrain.NodeInfo, unsure bool, now time.Time) []NodeAction {
	if !c.wholeCluster {
		return nil
	}
	var out []NodeAction
	for _, node := range c.declaredReleasable(nodes, unsure) {
		out = append(out, c.Handle(node, nodedrain.EvReleaseSlot{
			Reason: ReleasedUnderShutdown + "; the node is uncordoned when it is back and its agent withdraws"}, now)...)
	}
	return out
}

// declaredReleasable lists the nodes releaseDeclared releases under a declaration: cleared for a
// declaring request, down (or their Node object missing), their slot not released yet. None
// while the view of the nodes may be older than their COMPLETE (unsure: the informers may still
// be listing again after an outage): a node up again before the outage ended would look down.
func (c *Core) declaredReleasable(nodes []nodedrain.NodeInfo, unsure bool) []string {
	if unsure {
		return nil
	}
	ready := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		ready[n.Name] = n.Ready
	}
	var out []string
	for _, node := range c.Nodes() {
		d := c.drains[node]
		if ready[node] || !d.Cleared() || d.Status.SlotReleased || !nodedrain.DeclaresClusterShutdown(*d.Request) {
			continue
		}
		out = append(out, node)
	}
	return out
}

// GateView answers the volume gate's last known view of a node during an API outage:
// afterEviction says the check is the one before COMPLETE.
type GateView func(node string, afterEviction bool) (GateResult, error)

// CordonView answers the node informer's last view of a node during an API outage: whether its
// Node object was there, cordoned, and its UID ("": not known).
type CordonView func(node string) (found, cordoned bool, uid string)

// APIUnreachable applies DESIGN §3's rule once the Kubernetes API has been unreachable for
// down: every drain under way whose volumes the gate's last view calls safe, and whose node the
// node informer's last view (cordon, nil: not known) shows still cordoned, the same Node object,
// goes to COMPLETE; the others say why they do not. None does if the outage began while the
// informers may still have been listing again after an earlier one (APIAnswered): their view may
// then be older than this outage, and miss a copy lost in between.
func (c *Core) APIUnreachable(down time.Duration, view GateView, cordon CordonView, now time.Time) []NodeAction {
	var out []NodeAction
	behind := !c.apiDownSince.IsZero() && c.apiDownSince.Before(c.viewSettlesAt)
	for _, node := range c.Nodes() {
		d := c.drains[node]
		if !d.Draining() {
			continue
		}
		after := d.Waiting >= nodedrain.OpFinalGate || d.RetryOp == nodedrain.OpFinalGate
		r, err := view(node, after)
		safe := r.Safe && err == nil
		if err != nil {
			safe, r.Blockers = d.GateSafe, d.Status.Blockers
		}
		ev := nodedrain.EvAPIUnreachable{For: down, Safe: safe, Blockers: r.Blockers, ViewBehind: behind}
		if cordon != nil {
			found, cordoned, uid := cordon(node)
			ev.Uncordoned = !found || !cordoned || (uid != "" && d.NodeUID != "" && uid != d.NodeUID)
		}
		out = append(out, c.Handle(node, ev, now)...)
	}
	return out
}

// Announce records that st was published and reports whether it is a transition worth an
// Event (the node's status changed since its last Event), not a progress update.
func (c *Core) Announce(st nodedrain.NodeDrainStatus) bool {
	if prev, ok := c.announced[st.Node]; ok && prev == st.Status {
		return false
	}
	c.announced[st.Node] = st.Status
	return true
}

func appendNode(out []NodeAction, node, requestID string, actions []nodedrain.Action) []NodeAction {
	for _, a := range actions {
		out = append(out, NodeAction{Node: node, RequestID: requestID, Action: a})
	}
	return out
}

// notReadySeen is when this process first saw a node NotReady (its own clock), and the node's
// NotReadySince then.
type notReadySeen struct{ at, cond time.Time }

// viewFresh reports whether the counts that act on a Node's absence or NotReady condition may
// run (a COMPLETE holder's slot released as stale, a drain ended as its Node gone, an idle
// node's status forgotten): not while this coordinator cannot reach the API, whose informers'
// view is frozen then (a Node gone or NotReady in it may be back, registered again, Ready,
// unseen). The counts pause rather than start over, so that an API that flaps (a slow /readyz
// now and then) does not keep a dead node's slot for good; once the API answers they resume
// after relistAfter more, the time a reflector backing off may take to list again. Called once
// per admission pass, before the counts.
func (c *Core) viewFresh(now time.Time) bool {
	if !c.apiDownSince.IsZero() {
		if c.frozenSince.IsZero() {
			c.frozenSince = c.apiDownSince
		}
		return false
	}
	if c.frozenSince.IsZero() {
		return true
	}
	went, resume := c.frozenSince, now.Add(relistAfter(now.Sub(c.frozenSince)))
	// A count that began at at counts again from resume as far along as it was when the API went.
	// One that had not begun yet (still in the relist wait of an earlier outage) had nothing to
	// pause: it begins at resume, or later.
	resumed := func(at time.Time) time.Time {
		if at.After(went) {
			return latest(at, resume)
		}
		return at.Add(resume.Sub(went))
	}
	c.frozenSince = time.Time{}
	for n, seen := range c.notReady {
		seen.at = resumed(seen.at)
		c.notReady[n] = seen
	}
	for _, since := range []map[string]time.Time{c.absent, c.vanished, c.idleAbsent} {
		for n, at := range since {
			since[n] = resumed(at)
		}
	}
	return true
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// relistAfter is how long after the API answers again, having been unreachable for frozen, an
// informer's view may still be the old one: client-go's reflector, failing, waits from 0.8 s
// doubling, each wait jittered up to twice its length, so about as long again as it has been
// failing, and at most informerRelist. Not informerRelist after every spell: a /readyz that
// times out once a minute would then hold back the counts for good.
func relistAfter(frozen time.Duration) time.Duration {
	return min(informerRelist, 2*frozen)
}

// informerRelist bounds how long after the API answers again an informer's view may still be
// the old one: client-go's reflector backs off up to 30 s, jittered up to twice that.
const informerRelist = time.Minute

// managedOnly is nodes without those the coordinator does not manage.
func managedOnly(nodes []nodedrain.NodeInfo) []nodedrain.NodeInfo {
	out := nodes[:0:0]
	for _, n := range nodes {
		if !n.Unmanaged {
			out = append(out, n)
		}
	}
	return out
}

// nodeNames is the set of the names of nodes.
func nodeNames(nodes []nodedrain.NodeInfo) map[string]bool {
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		out[n.Name] = true
	}
	return out
}
