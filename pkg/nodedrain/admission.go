package nodedrain

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// NodeInfo is admission's view of one node of the cluster.
type NodeInfo struct {
	Name string
	// Ready is the node's Ready condition; Schedulable is !spec.unschedulable.
	Ready, Schedulable bool
	// NotReadySince is when the node's Ready condition last turned false (zero: Ready, or
	// unknown).
	NotReadySince time.Time
	// Priority orders waiting drains: higher first (the policy's requester and node-label
	// priorities); equal priorities go oldest request first.
	Priority int
	// Domain is the node's failure domain (e.g. its zone); two nodes of the same non-empty
	// domain are never in maintenance at once.
	Domain string
	// Unmanaged: the coordinator does not manage the node (--node-selector): it drains nothing
	// there, but the node is one of the cluster's, where workloads can move to.
	Unmanaged bool
	// CordonRecord: the node carries edgedrain's cordon record (coordinator.CordonAnnotation).
	CordonRecord bool
	// CordonOurs: the node is cordoned by edgedrain alone (its record, and no one else set
	// unschedulable since) and no operator asked to keep it cordoned: edgedrain makes it
	// schedulable again once no drain of it holds a slot.
	CordonOurs bool
	// ResourceVersion is the resourceVersion of the Node object these facts were read from
	// (empty: not known).
	ResourceVersion string
	// Other is another writer's maintenance of the node, as its lifecycle conditions show it
	// (nil: none). Its drain waits; a maintenance in progress takes one of the slots.
	Other *OtherMaintenance
}

// OtherMaintenance is a node lifecycle condition (MaintenancePlanned or MaintenanceInProgress,
// status True) that another writer — an admin, another tool — set on a node. Kubernetes defines
// no owner of these conditions, so edgedrain does not take such a node for maintenance: two
// actors would each think the node theirs (one rebooting it while the other evicts, or each
// letting another node go down beside it).
type OtherMaintenance struct {
	// Condition is the condition's type; InProgress is true for MaintenanceInProgress.
	Condition  string
	InProgress bool
	Reason     string
	Message    string
}

// waitMessage says why a drain waits for o.
func (o OtherMaintenance) waitMessage() string {
	msg := fmt.Sprintf("waiting: the node's %s condition was set by another writer (reason %s", o.Condition, o.Reason)
	if o.Message != "" {
		msg += fmt.Sprintf(": %q", o.Message)
	}
	return msg + "); edgedrain does not take a node another has in maintenance until it is cleared"
}

// Hold keeps a waiting drain in REQUESTED for a reason of the maintenance policy (a closed
// window, blockers, a pre-flight prediction), published as its message and blockers.
type Hold struct {
	// Reason is a short label for metrics: "window", "blockers", "preflight", "checking",
	// "policy-invalid".
	Reason   string
	Message  string
	Blockers []Blocker
}

// AdmitInput is what admission decides from.
type AdmitInput struct {
	Drains        map[string]Drain
	Nodes         []NodeInfo
	MaxConcurrent int
	// Seen lists the nodes the coordinator has seen recently (see AdmitSeen).
	Seen map[string]bool
	// Back lists the nodes whose agent was heard from lately (it withdrew a request): one runs
	// there, even if its Node does not show Ready yet, so a whole-cluster shutdown needs its
	// request too.
	Back map[string]bool
	// Holds keeps these waiting drains in REQUESTED; they do not block the drains behind them.
	Holds map[string]Hold
	// Warnings is published with REQUESTED before a drain is admitted (--preflight=warn).
	Warnings map[string]Hold
	// Domains is the last known failure domain of nodes whose Node object is missing now (a
	// node in maintenance re-registering keeps its domain).
	Domains map[string]string
	// Peers, when set, lists a node's volumes with the other nodes holding their copies (the
	// volume gate's, under the wait policy): a drain is not admitted while every other copy of
	// one of its volumes is on nodes in maintenance.
	Peers func(node string) []VolumePeers
	// ReadyUnsure says the nodes' readiness may be older than the drains' statuses (the
	// informers may still be listing again after an API outage): a node shown NotReady may be
	// up. It then counts as up wherever a NotReady node would free something under a declared
	// whole-cluster shutdown (its slot, its part in the declaration, the last node up's
	// NOTSUPPORTED): a node still up taken for down would let the last node go undrained beside it.
	ReadyUnsure bool
}

// Admission is what Admit decided for the drains waiting in REQUESTED.
type Admission struct {
	// Admit lists the nodes whose drain may start now, oldest request first.
	Admit []string
	// NotSupported maps nodes that cannot be drained (nowhere to move workloads) to the reason.
	NotSupported map[string]string
	// Queued maps nodes that must wait to a message naming the nodes ahead.
	Queued map[string]string
	// WholeCluster is true when every node of the cluster has an open request that declares a
	// planned whole-cluster shutdown (DeclaresClusterShutdown), handled so that it cannot
	// deadlock (see Admit).
	WholeCluster bool
	// Held maps waiting drains held by the maintenance policy to their hold.
	Held map[string]Hold
}

// holdsSlot is the one rule for whether a drain counts against the concurrency limit (Draining
// and NodeDrainStatus.HoldsSlot each answer part of it): while it runs (or the bus shows it
// running: BusHolds), and after COMPLETE (or NOTSUPPORTED: its node goes down too, undrained)
// until the node is back and its agent withdraws the request (its node is down or under
// maintenance). In a whole-cluster shutdown a COMPLETE node that is no longer Ready has gone
// down as planned and frees its slot, so the next node can drain.
//
// A node back from its operation holds its slot until it is healthy again (the return gate); a
// COMPLETE node that never came back releases it (SlotReleased).
func holdsSlot(d Drain, ready, wholeCluster bool) bool {
	if d.Draining() || d.BusHolds || d.Returning() {
		return true
	}
	return d.Cleared() && !d.Status.SlotReleased && !(wholeCluster && !ready)
}

// Admit decides which REQUESTED drains start, oldest request first, so that at most
// maxConcurrent nodes are in maintenance at once. A node with no other node to move workloads
// to is NOTSUPPORTED (a single-node cluster, or the last node up in a declared whole-cluster
// shutdown), which lets its agent proceed; in a larger cluster where no other node can take the
// workloads right now, the drain waits.
func Admit(drains map[string]Drain, nodes []NodeInfo, maxConcurrent int) Admission {
	return AdmitSeen(drains, nodes, maxConcurrent, nil)
}

// AdmitSeen is Admit for a coordinator that remembers the nodes it has seen: a node seen before
// belongs to the cluster even while its Node object is missing (deleted and registering again),
// so a two-node cluster does not pass for a single-node one in that moment.
func AdmitSeen(drains map[string]Drain, nodes []NodeInfo, maxConcurrent int, seen map[string]bool) Admission {
	return AdmitWith(AdmitInput{Drains: drains, Nodes: nodes, MaxConcurrent: maxConcurrent, Seen: seen})
}

// AdmitWith is AdmitSeen with the maintenance policy: waiting drains go by priority, then
// oldest request first; a held drain stays REQUESTED without blocking those behind it; a drain
// whose failure domain already has a node in maintenance waits for it.
func AdmitWith(in AdmitInput) Admission {
	drains, nodes, maxConcurrent, seen := in.Drains, in.Nodes, in.MaxConcurrent, in.Seen
	a := Admission{NotSupported: map[string]string{}, Queued: map[string]string{}, Held: map[string]Hold{}}
	known := make(map[string]NodeInfo, len(nodes))
	for _, n := range nodes {
		known[n.Name] = n
	}
	// A whole-cluster shutdown is declared, never inferred: every node asking at once is the
	// normal kernel-update day, and each node must still be drained in turn.
	// A node already down (NotReady) with no request need not declare it: no agent runs there
	// (unless one was heard from lately: in.Back).
	up := func(n NodeInfo) bool { return n.Ready || in.ReadyUnsure }
	a.WholeCluster = len(nodes) > 1
	declaring := 0
	for _, n := range nodes {
		d, ok := drains[n.Name]
		if (!ok || d.Request == nil) && !up(n) && !in.Back[n.Name] {
			continue
		}
		// Taken up: under way, COMPLETE, or answered NOTSUPPORTED as the last node up (the
		// declaration must outlast that answer, or the nodes that went down would hold their
		// slots again while the one just admitted drains: S3).
		if !ok || d.Request == nil || !DeclaresClusterShutdown(*d.Request) || d.Status.RequestID != d.Request.RequestID ||
			!(d.Status.Status.InProgress() || d.Status.Status == StatusComplete || d.Status.Status == StatusNotSupported) {
			a.WholeCluster = false
			break
		}
		if d.Status.Status == StatusComplete && d.Status.SlotReleased && up(n) {
			// Back from the shutdown (its slot released as it went down, its Node Ready again): it
			// declares nothing more, whatever keeps its request on the bus (a withdrawal not seen
			// yet, a replay of the request by a bus identity that may write requests).
			a.WholeCluster = false
			break
		}
		declaring++
	}
	a.WholeCluster = a.WholeCluster && declaring > 0
	// Every request must declare it, including those of nodes whose Node object is missing right
	// now (deleted and registering again while down for an ordinary reboot).
	for _, d := range drains {
		// (A decommissioned node's request, left until withdrawn, is of no node of the cluster;
		// once its COMPLETE is on the bus: a COMPLETE decided but not published may yet go back
		// to CORDONED, the node still in the cluster: R2.)
		if d.Request != nil && !DeclaresClusterShutdown(*d.Request) && !(d.Decommissioned() && !d.BusHolds) {
			a.WholeCluster = false
		}
	}
	var holders, waiting []string
	for name, d := range drains {
		if holdsSlot(d, up(known[name]), a.WholeCluster) {
			holders = append(holders, name)
		}
		if d.AwaitsAdmission() {
			waiting = append(waiting, name)
		}
	}
	var others []string // nodes in another writer's maintenance, named in the waits they cause
	for _, n := range nodes {
		// Another's maintenance in progress is a node in maintenance like ours: it counts
		// against the limit, its failure domain and its volumes' copies.
		if n.Other != nil && n.Other.InProgress && !holdsSlot(drains[n.Name], up(n), a.WholeCluster) {
			holders = append(holders, n.Name)
			others = append(others, n.Name)
		}
	}
	sort.Strings(others)
	sort.Strings(holders)
	sort.Slice(waiting, func(i, j int) bool {
		if pi, pj := known[waiting[i]].Priority, known[waiting[j]].Priority; pi != pj {
			return pi > pj
		}
		ri, rj := drains[waiting[i]].Request, drains[waiting[j]].Request
		if !ri.RequestedAt.Equal(rj.RequestedAt) {
			return ri.RequestedAt.Before(rj.RequestedAt)
		}
		return waiting[i] < waiting[j]
	})
	admitted := map[string]bool{} // admitted earlier in this pass: as busy as a running drain
	busy := func(name string) bool {
		return admitted[name] || drains[name].Draining() || drains[name].Status.Status == StatusComplete ||
			drains[name].Status.Status == StatusNotSupported
	}
	var ahead []string
	for _, name := range waiting {
		if n, ok := known[name]; !ok {
			a.Queued[name] = fmt.Sprintf("waiting: node %s is not (yet) in the cluster", name)
			continue
		} else if n.Unmanaged {
			a.Queued[name] = fmt.Sprintf("waiting: node %s is not (yet) one this coordinator manages (--node-selector)", name)
			continue
		}
		if h, held := in.Holds[name]; held {
			a.Held[name] = h
			continue
		}
		if o := known[name].Other; o != nil {
			a.Queued[name] = o.waitMessage()
			continue
		}
		if len(holders) >= maxConcurrent {
			a.Queued[name] = queuedMessage(holders, ahead, maxConcurrent)
			if len(others) > 0 {
				// A stale condition of another tool would hold every drain: say whose it is.
				a.Queued[name] += fmt.Sprintf(" (in another writer's maintenance by its MaintenanceInProgress condition: %s)",
					nameSome(others, namedHolders))
			}
			ahead = append(ahead, name)
			continue
		}
		if dom := known[name].Domain; dom != "" {
			if same := sameDomain(holders, known, in.Domains, dom); len(same) > 0 {
				a.Queued[name] = fmt.Sprintf("waiting: %s of the same failure domain %q in maintenance", strings.Join(same, ", "), dom)
				continue
			}
		}
		if in.Peers != nil && len(holders) > 0 {
			inMaint := make(map[string]bool, len(holders))
			for _, h := range holders {
				inMaint[h] = true
			}
			if why := peerConflict(in.Peers(name), inMaint); why != "" {
				a.Queued[name] = why
				ahead = append(ahead, name)
				continue
			}
		}
		other, maybeOther := false, false
		var lifting []string // up, cordoned by edgedrain, in no maintenance: its cordon is being lifted
		for _, n := range nodes {
			switch {
			case n.Name == name || busy(n.Name):
			case n.Schedulable:
				other = other || n.Ready
				maybeOther = maybeOther || up(n)
			case n.CordonOurs && up(n) && drains[n.Name].RetryOp != OpUncordon:
				// (An uncordon that failed and waits to be tried again may never be lifted: a
				// webhook or RBAC refusing it would hold the node asking for good.)
				lifting = append(lifting, n.Name)
			}
		}
		switch {
		case other:
		case DeclaresDecommission(*drains[name].Request):
			// Never NOTSUPPORTED: that lets the agent proceed undrained, and a decommissioned
			// node's data does not come back.
			a.Queued[name] = "waiting: no other Ready, schedulable node can take the workloads now; a decommission waits for one"
			ahead = append(ahead, name)
			continue
		case len(nodes) == 1 && !otherKnown(drains, seen, name):
			a.NotSupported[name] = "single-node cluster: no other node to move workloads to, drains are not possible here; proceed"
			holders = append(holders, name) // (a NOTSUPPORTED node is in maintenance: it takes a slot)
			continue
		case a.WholeCluster && maybeOther:
			// The last node up only by a view that may be old: a node it shows down may be up
			// and able to take the workloads. Wait until the view is sure.
			a.Queued[name] = "waiting: declared whole-cluster shutdown, but the nodes' readiness may be older than an API outage; " +
				"checking again once the informers have listed again"
			ahead = append(ahead, name)
			continue
		case a.WholeCluster && len(lifting) > 0:
			// Not the last node up: a node whose drain ended (or waits for admission again)
			// keeps edgedrain's cordon only until it is lifted, and can take the workloads then.
			a.Queued[name] = fmt.Sprintf("waiting: declared whole-cluster shutdown, but %s is up and edgedrain is lifting its cordon: "+
				"this node is drained to it then", strings.Join(lifting, ", "))
			ahead = append(ahead, name)
			continue
		case a.WholeCluster:
			a.NotSupported[name] = "declared whole-cluster shutdown: this is the last node up, nothing left to drain to; proceed"
			// It takes a slot, as a drain admitted in this pass does: a node down (by power loss)
			// whose request was still waiting was admitted in the same pass, two nodes in
			// maintenance with one slot (simulation, S3).
			holders = append(holders, name)
			continue
		default:
			// Other nodes exist but none can take the workloads now (down, cordoned, in
			// maintenance): wait for one rather than let this node go down undrained.
			a.Queued[name] = "waiting: no other Ready, schedulable node can take the workloads now"
			ahead = append(ahead, name)
			continue
		}
		a.Admit = append(a.Admit, name)
		admitted[name] = true
		holders = append(holders, name)
	}
	return a
}

// sameDomain lists the holders whose failure domain is dom (a holder whose Node object is
// missing by its last known domain; one whose domain is not known at all — a coordinator that
// restarted while its Node object was gone — counts as in every domain).
func sameDomain(holders []string, known map[string]NodeInfo, last map[string]string, dom string) []string {
	var out []string
	for _, h := range holders {
		d, ok := known[h]
		lastDom, seen := last[h]
		if (ok && d.Domain == dom) || (!ok && (!seen || lastDom == dom)) {
			out = append(out, h)
		}
	}
	return out
}

// queuedMessage says why a drain waits for a slot. Only the drains near the head of the queue
// (namedAhead or fewer ahead) name the nodes in maintenance and those ahead; the rest say the
// same thing however the queue moves. Naming everyone made each waiting status change at every
// admission (a fleet of N nodes published N statuses per drain) and cost O(N²) per pass (52 ms
// at 1000 nodes).
func queuedMessage(holders, ahead []string, max int) string {
	if len(ahead) > namedAhead {
		return fmt.Sprintf("waiting: max-concurrent-drains %d reached; queued behind %d or more earlier drains", max, namedAhead+1)
	}
	msg := fmt.Sprintf("waiting: %s in maintenance (max-concurrent-drains %d)", nameSome(holders, namedHolders), max)
	if len(ahead) > 0 {
		msg += fmt.Sprintf("; queued behind %s", strings.Join(ahead, ", "))
	}
	return msg
}

// How many drains ahead a queued drain names, and how many nodes in maintenance.
const (
	namedAhead   = 3
	namedHolders = 5
)

// nameSome joins names, the first n of them if there are more, with how many more.
func nameSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// ClusterShutdownContext is the request context that declares a planned whole-cluster shutdown
// ("cluster-shutdown", optionally followed by a reason): when every node's request declares
// it, nodes already down for it free their admission slot and the last node up may go down
// without a drain. Nothing else — not every node asking at once — is taken for one.
const ClusterShutdownContext = "cluster-shutdown"

// DeclaresClusterShutdown reports whether r declares a planned whole-cluster shutdown: a
// DEVICEOP request whose context is ClusterShutdownContext or starts with it and a space.
func DeclaresClusterShutdown(r NodeDrainRequest) bool {
	return r.RequestedBy == RequesterDeviceOp &&
		(r.Context == ClusterShutdownContext || strings.HasPrefix(r.Context, ClusterShutdownContext+" "))
}

// DecommissionContext is the request context that asks for the node to be decommissioned:
// drained for good ("decommission", optionally followed by a reason). The coordinator evicts
// its Longhorn replicas whatever the volume policy, handles its node-local volumes by their
// DecommissionAnnotation, deletes its Node object, then publishes COMPLETE; once the request is
// withdrawn (or DecommissionLinger after COMPLETE) it removes the node's keys from the bus.
const DecommissionContext = "decommission"

// DeclaresDecommission reports whether r asks for a decommission: a DEVICEOP request whose
// context is DecommissionContext or starts with it and a space.
func DeclaresDecommission(r NodeDrainRequest) bool {
	return r.RequestedBy == RequesterDeviceOp &&
		(r.Context == DecommissionContext || strings.HasPrefix(r.Context, DecommissionContext+" "))
}

// otherKnown reports whether edgedrain knows a node other than name (it has a request or a
// published status, or the coordinator has seen its Node object): such a node belongs to the cluster even while its Node object is missing
// (deleted and registering again), so the cluster is not a single-node one. A cluster that
// really shrank to one node keeps the old nodes' statuses and waits: the override file, or
// removing the stale status, lets it proceed.
func otherKnown(drains map[string]Drain, seen map[string]bool, name string) bool {
	for n := range drains {
		if n != name {
			return true
		}
	}
	for n := range seen {
		if n != name {
			return true
		}
	}
	return false
}
