package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// start performs one operation of a drain, as the executor does, and posts its result.
func (c *coord) start(node, rid string, st nodedrain.Start) {
	inc, gen := c.inc, c.opGen[node]
	post := func(ev nodedrain.EvResult) {
		ev.Op, ev.RequestID = st.Op, rid
		if ev.Err != nil {
			var uerr *url.Error // as the executor: only a transport error means unreachable,
			// or the lease guard's refusal (the API was not reached)
			ev.Unreachable = errors.As(ev.Err, &uerr) || errors.Is(ev.Err, coordinator.ErrLeaseLapsed)
		}
		c.later(0, "op result", inc, func() {
			c.act(c.core.Handle(node, ev, c.now()))
			c.afterEvents()
		})
	}
	s := c.s
	cl := s.cluster
	switch st.Op {
	case nodedrain.OpCordon:
		// As nodeOps.cordonOnce: a cordon already there is edgedrain's only if it is the one
		// edgedrain made (node.ours); another one is left, and a record of edgedrain's left on
		// it from before goes (a write as the cordon's). The answer names the Node object read.
		var rv, uid int
		var unsched, ours, stale bool
		c.apiOp("get node", false, func() error {
			n, ok := cl.nodes[node]
			if !ok || !n.exists {
				return fmt.Errorf("get node %s: %w", node, errNotFound)
			}
			rv, uid, unsched, ours, stale = n.rv, n.uid, n.unschedulable, n.ours(), n.annotation != ""
			return nil
		}, c.onReply(inc, func(err error) {
			done := func(err error, byUs bool) {
				if err == nil {
					s.cordonFound(rid, uid)
				}
				post(nodedrain.EvResult{Err: err, ByUs: byUs, UID: nodeUID(uid)})
			}
			switch {
			case err != nil:
				post(nodedrain.EvResult{Err: err})
			case unsched && (ours || !stale):
				done(nil, ours)
			case unsched: // someone else's cordon under edgedrain's record: the record goes
				c.writeNode(node, "remove edgedrain's cordon record", rv, errNotFound, func() {
					n := cl.nodes[node]
					n.annotation, n.keep = "", ""
					s.w.logf("%s removes its stale cordon record from %s (the cordon is someone else's)", c.name, node)
				}, func(err error) { done(err, false) })
			case !c.stillLeading(): // as nodeOps.cordon: no write once the Lease lapsed
				post(nodedrain.EvResult{Err: coordinator.ErrLeaseLapsed})
			default:
				s.countCordon(rid) // an attempt that reaches the API (an unanswered one is no attempt)
				c.writeNode(node, "cordon", rv, errNotFound, func() {
					n := cl.nodes[node]
					n.unschedulable, n.annotation, n.cordonBy = true, rid, cordonByEdgedrain
					s.w.logf("%s cordons %s for request %s", c.name, node, rid)
				}, func(err error) {
					if err == nil && s.loseCordonReply(node) {
						err = errUnreachable("cordon")
					}
					done(err, err == nil)
				})
			}
		}))
	case nodedrain.OpUncordon:
		// As nodeOps.uncordonOnce: only edgedrain's own cordon is removed, and not if an
		// operator asked to keep it (it is theirs from then on); edgedrain's record, and the
		// keep mark, go in the same write.
		var rv int
		var found, recorded, ours, cordoned bool
		var keep string
		c.apiOp("get node", false, func() error {
			n, ok := cl.nodes[node]
			if ok && n.exists {
				found, rv, recorded, ours, cordoned, keep = true, n.rv, n.annotation != "", n.ours(), n.unschedulable, n.keep
			}
			return nil
		}, c.onReply(inc, func(err error) {
			if err != nil || !recorded {
				post(nodedrain.EvResult{Err: err, ResourceVersion: rvString(rv, err == nil && found)})
				return
			}
			kept := ""
			switch {
			case ours && keep != "":
				kept = "an operator asked to keep it cordoned (" + keep + ")"
			case !ours && cordoned:
				kept = "its cordon is someone else's"
			}
			uncordon := ours && keep == ""
			written := 0
			c.writeNode(node, "uncordon", rv, nil, func() {
				n := cl.nodes[node]
				written = n.rv + 1 // (writeNode counts the write after this)
				if uncordon && n.unschedulable {
					s.checkUncordon(c, n)
					n.unschedulable, n.cordonBy = false, ""
					s.w.logf("%s uncordons %s", c.name, node)
					cl.reschedule()
				} else {
					s.w.logf("%s removes its cordon record from %s and leaves it cordoned: %s", c.name, node, kept)
				}
				if ours && keep != "" {
					s.handedOver(n)
				}
				n.annotation, n.keep = "", ""
			}, func(err error) {
				post(nodedrain.EvResult{Err: err, Kept: kept, ResourceVersion: rvString(written, err == nil)})
			})
		}))
	case nodedrain.OpCheckCordon:
		// As nodeOps.cordonedOrGone and the executor: Foreign is a cordon not edgedrain's own,
		// Missing a Node not found (a decommission's counts as cordoned), UID the object read.
		var cordoned, foreign, missing bool
		var uid int
		var pods []nodedrain.Blocker
		at := c.now() // (as the executor: before the reads)
		c.apiOp("get node", false, func() error {
			n, ok := cl.nodes[node]
			if !ok || !n.exists {
				if st.Decommission {
					cordoned = true
				} else {
					missing = true
				}
				return nil
			}
			cordoned, foreign, uid = n.unschedulable, n.unschedulable && !n.ours(), n.uid
			if cordoned { // and the pods an eviction would take (evictor.left)
				for _, p := range cl.podsOn(node) {
					pods = append(pods, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: "default", Name: p.name, Reason: "on the node"})
				}
			}
			s.cordonChecked(rid)
			return nil
		}, func(err error) {
			post(nodedrain.EvResult{Err: err, Cordoned: cordoned, Foreign: foreign, Missing: missing, Pods: pods, UID: nodeUID(uid),
				At: at})
		})
	case nodedrain.OpDeleteNode:
		// As the executor: not sent on checks a pause has made old.
		if age := c.now().Sub(st.CheckedAt); !st.CheckedAt.IsZero() && age > nodedrain.MaxCheckAge {
			s.w.logf("%s does not delete the Node object of %s: its checks are %s old", c.name, node, age.Round(time.Millisecond))
			post(nodedrain.EvResult{Err: fmt.Errorf("%w (%s old)", nodedrain.ErrChecksStale, age.Round(time.Second))})
			return
		}
		c.deleteNode(node, rid, st.UID, inc, post)
	case nodedrain.OpForget:
		served := rid // (Engine.forgetNow: nothing served, no request of its own to remove)
		if d, ok := c.core.Drain(node); ok && d.Request == nil {
			served = ""
		}
		c.forget(node, served, post)
	case nodedrain.OpGate, nodedrain.OpFinalGate:
		whole := c.core.WholeCluster()
		opts := coordinator.GateOptions{WholeCluster: whole, Decommission: st.Decommission}
		var policy []nodedrain.Blocker
		if st.Op == nodedrain.OpFinalGate {
			policy = s.maint.blockersOn(node) // the executor's finalBlockers, asked first
		}
		at := c.now() // (as the executor: after the policy, before the reads)
		deadline := s.w.now.Add(volumes.MaxConfirmTime)
		finish := func(r coordinator.GateResult) {
			if r.Safe && len(policy) > 0 {
				r = coordinator.GateResult{Blockers: policy}
			}
			post(nodedrain.EvResult{Safe: r.Safe, Blockers: r.Blockers, At: at})
		}
		s.w.after(s.w.between(time.Millisecond, 10*time.Millisecond), "gate check", func() {
			r := c.gateFor(node, opts)
			// As Gate.Check: no eviction is asked under a cancelled context. The executor cancels
			// the node's operations before it releases the gate's work (a withdrawal), and Check
			// and Release hold the node's lock: a check that comes after the release asks nothing,
			// one that came before is undone by it. (A run that ended, or crashed, asks nothing either.)
			if s.volumePolicy(opts) == volumes.PolicyEvict && !whole && c.apiUp() {
				if n := cl.nodes[node]; n != nil && !n.evictionRequested && s.hasReplicas(node) {
					if c.alive && inc == c.inc && gen == c.opGen[node] {
						n.evictionRequested = true
						s.w.logf("%s: the volume gate asks Longhorn to evict the replicas of %s", c.name, node)
					} else if c.alive {
						s.w.logf("%s: the volume gate's check of %s runs under a cancelled context: it asks Longhorn for no eviction", c.name, node)
					}
				}
			}
			if r.Safe && st.Op == nodedrain.OpFinalGate && s.volumePolicy(opts) != volumes.PolicyAllow {
				// As Gate.Check (confirm.go): a safe answer before COMPLETE is decided again on a
				// read of the API, not on the informers, which may be behind it, and must come
				// within volumes.MaxConfirmTime of the check's start.
				c.readFresh(inc, deadline, func(vols []volumes.Volume, nodes map[string]volumes.NodeState, err error) {
					if err != nil {
						post(nodedrain.EvResult{Err: err, At: at})
						return
					}
					if fresh := s.gateOn(vols, nodes, node, opts); !fresh.Safe {
						s.w.logf("%s: the volume gate's caches said the volumes of %s are safe, a read from the API says not: the drain waits", c.name, node)
						r = fresh
					} else {
						r.Blockers = fresh.Blockers
					}
					finish(r)
				})
				return
			}
			finish(r)
		})
	case nodedrain.OpReturnGate:
		s.w.after(s.w.between(time.Millisecond, 50*time.Millisecond), "return check", func() {
			if !c.apiUp() { // the pods are listed from the API
				post(nodedrain.EvResult{Err: errUnreachable("list pods")})
				return
			}
			b := s.returnBlockers(node)
			post(nodedrain.EvResult{Safe: len(b) == 0, Blockers: b})
		})
	case nodedrain.OpEvict:
		deadline := s.w.now.Add(s.cfg.Policy.DrainAttemptTimeout)
		counted := false
		var listed map[string]bool
		var round func()
		round = func() {
			if !c.alive || inc != c.inc || gen != c.opGen[node] {
				post(nodedrain.EvResult{Err: context.Canceled})
				return
			}
			if !c.apiUp() {
				post(nodedrain.EvResult{Err: errUnreachable("evict")})
				return
			}
			if c.paused() { // paused: the next round comes after, in order with what else waited
				c.hold("eviction round", round)
				return
			}
			if !c.stillLeading() { // as the evictor: no eviction once the Lease lapsed
				post(nodedrain.EvResult{Err: coordinator.ErrLeaseLapsed})
				return
			}
			if !counted { // an attempt that reaches the API (an unanswered one is no attempt)
				counted = true
				s.countEviction(rid, st.Attempt)
			}
			if listed == nil { // as the evictor: one list of the node's pods per attempt (GetPodsForDeletion)
				listed = map[string]bool{}
				for _, p := range cl.podsOn(node) {
					listed[p.name] = true
				}
			}
			var blockers []nodedrain.Blocker
			left := 0
			for _, name := range slices.Sorted(maps.Keys(listed)) {
				p, ok := cl.pods[name]
				if !ok { // gone: the attempt waits for exactly the pods it listed
					continue
				}
				left++
				if p.deleting {
					continue
				}
				if err := cl.evictCall(p); err != nil {
					blockers = append(blockers, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: "default", Name: p.name, Reason: err.Error()})
				}
			}
			if left == 0 {
				post(nodedrain.EvResult{})
				return
			}
			if !s.w.now.Before(deadline) {
				post(nodedrain.EvResult{Err: fmt.Errorf("%d pod(s) left: %w", left, context.DeadlineExceeded), Blockers: blockers})
				return
			}
			s.w.after(time.Second, "eviction round", round)
		}
		s.w.after(s.w.between(time.Millisecond, 20*time.Millisecond), "eviction round", round)
	}
}

// deleteNode deletes a decommissioned node's Node object, as nodeOps.deleteNode: read it, leave
// it if uncordoned, delete it as of the resourceVersion read. The deletion is checked as a
// COMPLETE is (S2): its pods gone, its data safe elsewhere.
func (c *coord) deleteNode(node, rid, drained string, inc int, post func(nodedrain.EvResult)) {
	s, cl := c.s, c.s.cluster
	var rv int
	var gone, cordoned bool
	var uid string
	c.apiOp("get node", false, func() error {
		n, ok := cl.nodes[node]
		gone = !ok || !n.exists
		if !gone {
			rv, cordoned, uid = n.rv, n.unschedulable, nodeUID(n.uid)
		}
		return nil
	}, c.onReply(inc, func(err error) {
		if err == nil && !gone && drained != "" && uid != drained {
			post(nodedrain.EvResult{UID: uid}) // another object than the one drained: left as it is
			return
		}
		if err != nil || gone || !cordoned {
			post(nodedrain.EvResult{Err: err, Cordoned: gone, Missing: gone})
			return
		}
		sent := s.w.now // (a deletion that lands late is judged on what its checks saw then)
		c.writeNode(node, "delete node", rv, nil, func() {
			n := cl.nodes[node]
			s.checkS2(c, nodedrain.NodeDrainStatus{Node: node, RequestID: rid, Decommission: true}, sent)
			n.exists, n.deleted, n.ready = false, true, false
			cl.markUnsafe(node)
			s.w.logf("%s deletes the Node object of %s for request %s (decommission)", c.name, node, rid)
			s.w.after(podGCDelay, "pod garbage collection", func() { s.podGC(n) })
		}, func(err error) { post(nodedrain.EvResult{Err: err, Cordoned: err == nil}) })
	}))
}

// forget removes a decommissioned node's request (if still rid), then its status (unless another
// request is on the bus), fenced on the run's last write, as Engine.forget does: two writes, and
// it may fail between them (the status's removal lost on a lossy bus).
func (c *coord) forget(node, rid string, post func(nodedrain.EvResult)) {
	s := c.s
	refused := false
	s.bus.op(c.conn, func() error {
		if !c.stillLeading() {
			return coordinator.ErrLeaseLapsed
		}
		r, hasReq := s.bus.value(bucketRequests, node).(nodedrain.NodeDrainRequest)
		if hasReq && r.RequestID != rid {
			return nil
		}
		if hasReq {
			s.bus.write(bucketRequests, node, nil, c.name)
			s.w.logf("%s removes the request of decommissioned %s", c.name, node)
		}
		if s.bus.lossy && s.frng.Float64() < 0.3 {
			s.w.logf("%s: the removal of the status of decommissioned %s fails (no reply)", c.name, node)
			return errors.New("remove the status: no reply")
		}
		// A copied delete marker is no removal of the coordinator's (Engine.forgetStatus).
		if cur, found := s.bus.latest(bucketStatus, node); found && (cur.val != nil || cur.copied) {
			if s.bus.buckets[bucketStatus].last != c.lastSeq { // UnpublishIfLast refused
				refused = true
				return errors.New("remove the status: the bucket was written since")
			}
			c.lastSeq = s.bus.write(bucketStatus, node, nil, c.name)
			s.w.logf("%s removes the keys of decommissioned %s", c.name, node)
		}
		return nil
	}, func(err error) {
		if refused {
			c.forgetRefused()
		}
		post(nodedrain.EvResult{Err: err})
	})
}

// forgetRefused is Engine.fenceRefused for forget's status removal.
func (c *coord) forgetRefused() {
	s := c.s
	if last, ok := s.bus.streamInfo(bucketStatus); !ok || last < s.bus.buckets[bucketStatus].last {
		return // (LastRevision failed or answered behind the refusal: refused again until it answers)
	}
	over, read := c.termTakenOver()
	if !read {
		return // (refused again until the term record can be read)
	}
	if over {
		c.fenced(nodedrain.NodeDrainStatus{Node: "(forget)"})
		return
	}
	c.lastSeq = s.bus.buckets[bucketStatus].last
}

// writeNode is a write to node made, as nodeOps makes it, as a compare-and-swap on the revision
// rv read before it, and refused once the Lease lapsed: a missing Node answers missing (nil:
// nothing to do), a changed one a conflict; apply changes the node as the write lands.
func (c *coord) writeNode(name, what string, rv int, missing error, apply func(), done func(error)) {
	if !c.stillLeading() {
		done(coordinator.ErrLeaseLapsed)
		return
	}
	cl := c.s.cluster
	c.apiOp(what, true, func() error {
		n, ok := cl.nodes[name]
		switch {
		case !ok || !n.exists:
			return missing
		case n.rv != rv:
			return errConflict
		}
		apply()
		n.rv++
		return nil
	}, done)
}

// podGCDelay is how long Kubernetes' pod garbage collector leaves the pods of a deleted Node
// (its quarantine time).
const podGCDelay = 40 * time.Second

// podGC deletes the agent's pod of a Node still deleted: the agent stops, and no DaemonSet makes
// it again until the Node registers again (the machine boots).
func (s *Sim) podGC(n *node) {
	if n.exists || !n.up {
		return
	}
	a := s.agentOf(n.name)
	s.w.logf("the pods of deleted %s are garbage-collected: its agent stops", n.name)
	a.podDeleted()
}
