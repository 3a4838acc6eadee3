package sim

import (
	"fmt"
	"time"

	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// A coordinator's informers (the volume gate's Nodes and Longhorn objects) do not see the API the
// moment it answers again. After an API server restart, or after the coordinator's own path to it
// was cut, each reflector's watch has failed and lists again only after its backoff (client-go's
// reflector backs off from 800 ms up to 30 s), while the coordinator's own requests — its Lease,
// its cordon, the checks before its status writes — already succeed. Until its informers caught
// up, its gate decides on what they held when it lost the API: a Node deleted meanwhile still
// exists there, a replica failed meanwhile is still healthy. While an InformersBehind happening
// lasts, the catch-up takes up to maxCatchUp and every change reaches the informers up to
// maxViewLag after the API made it; lrng draws both, a stream of its own so that runs without it
// keep their schedules.

// InformersBehind: for For, the coordinators' informers are as late as real ones (above). Random
// plans with Config.InformersBehind hold one for the whole active phase.
const InformersBehind Kind = "informers-behind"

// maxCatchUp bounds how long informers take to catch up with an API that answers again: the
// reflector's longest backoff.
const maxCatchUp = 30 * time.Second

// informerFaults draws this file's happening for a random plan (Config.InformersBehind).
func informerFaults(cfg Config) Plan {
	return Plan{{Kind: InformersBehind, For: cfg.Active}}
}

// applyInformerFault makes InformersBehind happen.
func (s *Sim) applyInformerFault(f Fault) {
	s.w.logf("the coordinators' informers deliver changes late, and catch up with the API up to %s after it answers again, for %s", maxCatchUp, f.For)
	s.lateInformersUntil = later(s.lateInformersUntil, s.w.now.Add(f.For))
}

// informersLate reports whether InformersBehind is happening.
func (s *Sim) informersLate() bool { return s.w.now.Before(s.lateInformersUntil) }

// facts is what this replica's informers hold: what they held when it lost the API, while its
// own path to the API is cut or its informers have not caught up since; otherwise what the API
// said a moment ago.
func (c *coord) facts() ([]volumes.Volume, map[string]volumes.NodeState) {
	if c.lagging() || (c.apiCut && c.s.cluster.apiUp) {
		return c.heldVols, c.heldNodes
	}
	vols, nodes := c.s.cluster.facts()
	if !c.s.informersLate() {
		c.factsQ = nil
		return vols, nodes
	}
	return c.delivered(vols, nodes)
}

// factsView is one state of the facts as this replica's informers deliver it, from at.
type factsView struct {
	at    time.Time
	key   string
	vols  []volumes.Volume
	nodes map[string]volumes.NodeState
}

// delivered returns what this replica's informers show now when the API says vols and nodes:
// as its node view (nodeview.go), a change is queued as the view first meets it and delivered a
// random delay within maxViewLag later, after every change before it.
func (c *coord) delivered(vols []volumes.Volume, nodes map[string]volumes.NodeState) ([]volumes.Volume, map[string]volumes.NodeState) {
	live := factsView{at: c.s.w.now, key: fmt.Sprint(vols, nodes), vols: vols, nodes: nodes}
	q := c.factsQ
	if len(q) == 0 {
		c.factsQ = []factsView{live}
		return vols, nodes
	}
	if last := q[len(q)-1]; last.key != live.key {
		live.at = later(c.s.w.now.Add(betweenR(c.s.lrng, 0, maxViewLag)), last.at)
		q = append(q, live)
	}
	for len(q) > 1 && !q[1].at.After(c.s.w.now) {
		q = q[1:]
	}
	c.factsQ = q
	return q[0].vols, q[0].nodes
}

// lagging reports whether this replica's informers are still catching up with the API.
func (c *coord) lagging() bool { return c.s.w.now.Before(c.caughtUpAt) }

// catchUpLater: this replica reaches the API again, and its informers, which held vols and
// nodes, catch up a random time within maxCatchUp from now (after any catch-up still under way:
// they held older facts still).
func (c *coord) catchUpLater(vols []volumes.Volume, nodes map[string]volumes.NodeState) {
	if !c.s.informersLate() || !c.alive {
		return
	}
	if !c.lagging() {
		c.heldVols, c.heldNodes = vols, nodes
	}
	c.caughtUpAt = later(c.s.w.now.Add(betweenR(c.s.lrng, 0, maxCatchUp)), c.caughtUpAt)
	c.s.w.logf("%s's informers catch up with the API in %s (until then its volume gate reads what they held)",
		c.name, c.caughtUpAt.Sub(c.s.w.now).Round(time.Millisecond))
}

// apiBack: the Kubernetes API answers again after an outage; every replica's informers held
// what the API said when it went down.
func (s *Sim) apiBack() {
	s.cluster.setAPI(true)
	for _, c := range s.coords {
		if !c.apiCut {
			c.catchUpLater(s.cluster.frozen, s.cluster.frozenN)
		}
	}
}

// freshFacts is what a read of the API gives this replica now (a quorum read, not its
// informers'); ok false when it does not reach the API.
func (c *coord) freshFacts() ([]volumes.Volume, map[string]volumes.NodeState, bool) {
	if !c.apiUp() {
		return nil, nil, false
	}
	vols, nodes := c.s.cluster.liveFacts()
	return vols, nodes, true
}
