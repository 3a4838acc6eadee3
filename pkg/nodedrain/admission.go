package nodedrain

import (
	"fmt"
	"sort"
	"strings"
)

// NodeInfo is admission's view of one node of the cluster.
type NodeInfo struct {
	Name string
	// Ready is the node's Ready condition; Schedulable is !spec.unschedulable.
	Ready, Schedulable bool
}

// Admission is what Admit decided for the drains waiting in REQUESTED.
type Admission struct {
	// Admit lists the nodes whose drain may start now, oldest request first.
	Admit []string
	// NotSupported maps nodes that cannot be drained (nowhere to move workloads) to the reason.
	NotSupported map[string]string
	// Queued maps nodes that must wait to a message naming the nodes ahead.
	Queued map[string]string
	// WholeCluster is true when every node of the cluster has an open request: a planned
	// whole-cluster shutdown (or update), handled so that it cannot deadlock (see Admit).
	WholeCluster bool
}

// holdsSlot reports whether a drain counts against the concurrency limit: while it runs, and
// after COMPLETE until the node is back and its agent withdraws the request (its node is down or
// under maintenance). In a whole-cluster shutdown a COMPLETE node that is no longer Ready has gone
// down as planned and frees its slot, so the next node can drain.
func holdsSlot(d Drain, ready, wholeCluster bool) bool {
	if d.Active() {
		return true
	}
	return d.Status.Status == StatusComplete && d.Request != nil && !(wholeCluster && !ready)
}

// Admit decides which REQUESTED drains start, oldest request first, so that at most
// maxConcurrent nodes are in maintenance at once. A drain admitted on a node that has no other
// Ready, schedulable node to move workloads to is NOTSUPPORTED instead (a single-node cluster, or
// the last node of a whole-cluster shutdown), which lets its agent proceed.
func Admit(drains map[string]Drain, nodes []NodeInfo, maxConcurrent int) Admission {
	a := Admission{NotSupported: map[string]string{}, Queued: map[string]string{}}
	known := make(map[string]NodeInfo, len(nodes))
	for _, n := range nodes {
		known[n.Name] = n
	}
	a.WholeCluster = len(nodes) > 1
	for _, n := range nodes {
		d, ok := drains[n.Name]
		if !ok || d.Request == nil || !(d.Status.Status.InProgress() || d.Status.Status == StatusComplete) {
			a.WholeCluster = false
			break
		}
	}
	var holders, waiting []string
	for name, d := range drains {
		if holdsSlot(d, known[name].Ready, a.WholeCluster) {
			holders = append(holders, name)
		}
		if d.Status.Status == StatusRequested && d.Request != nil {
			waiting = append(waiting, name)
		}
	}
	sort.Strings(holders)
	sort.Slice(waiting, func(i, j int) bool {
		ri, rj := drains[waiting[i]].Request, drains[waiting[j]].Request
		if !ri.RequestedAt.Equal(rj.RequestedAt) {
			return ri.RequestedAt.Before(rj.RequestedAt)
		}
		return waiting[i] < waiting[j]
	})
	busy := func(name string) bool { return drains[name].Active() || drains[name].Status.Status == StatusComplete }
	var ahead []string
	for _, name := range waiting {
		if _, ok := known[name]; !ok {
			a.Queued[name] = fmt.Sprintf("waiting: node %s is not (yet) in the cluster", name)
			continue
		}
		if len(holders) >= maxConcurrent {
			a.Queued[name] = queuedMessage(holders, ahead, maxConcurrent)
			ahead = append(ahead, name)
			continue
		}
		other := false
		for _, n := range nodes {
			if n.Name != name && n.Ready && n.Schedulable && !busy(n.Name) {
				other = true
				break
			}
		}
		if !other {
			reason := "no other Ready, schedulable node to move workloads to: drains are not possible here, proceed"
			if a.WholeCluster {
				reason = "whole-cluster shutdown: this is the last node up, nothing left to drain to; proceed"
			}
			a.NotSupported[name] = reason
			continue
		}
		a.Admit = append(a.Admit, name)
		holders = append(holders, name)
	}
	return a
}

func queuedMessage(holders, ahead []string, max int) string {
	msg := fmt.Sprintf("waiting: %s in maintenance (max-concurrent-drains %d)", strings.Join(holders, ", "), max)
	if len(ahead) > 0 {
		msg += fmt.Sprintf("; queued behind %s", strings.Join(ahead, ", "))
	}
	return msg
}
