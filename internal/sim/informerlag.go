package sim

import (
	"maps"
	"reflect"
	"time"

	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// A coordinator's informers (the volume gate's Nodes and Longhorn objects) do not see the API the
// moment it answers again. After an API server restart, or after the coordinator's own path to it
// was cut, each reflector's watch has failed and lists again only after its backoff (client-go's
// reflector backs off from 800 ms, doubling, to 30 to 60 s with its jitter), while the
// coordinator's own requests — its Lease,
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
// reflector's longest backoff (30 s, and a jitter of up to as much again).
const maxCatchUp = time.Minute

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

// facts is what this replica's informers hold: what they held when it lost the API (its own path
// cut, or the API down), until the API answers it again and they caught up; otherwise what the API
// said a moment ago. (Without InformersBehind: held only while its own path is cut and the API is
// up, as the regressions found before were.)
func (c *coord) facts() ([]volumes.Volume, map[string]volumes.NodeState) {
	if !c.s.informersLate() {
		c.cachesHeld, c.factsQ, c.lostAPI = false, nil, apiLoss{}
		if c.apiCut && c.s.cluster.apiUp {
			return c.heldVols, c.heldNodes
		}
		return c.s.cluster.facts()
	}
	if c.cachesHeld && (c.apiCut || !c.s.cluster.apiUp || c.lagging()) {
		return c.heldVols, c.heldNodes
	}
	c.cachesHeld = false
	return c.delivered(c.s.cluster.facts())
}

// loseAPI: this replica stops hearing from the API (its own path cut, or the API down); its
// informers hold what they had, unless they still held older facts.
func (c *coord) loseAPI() {
	vols, nodes := c.s.cluster.facts()
	c.lostAPI = apiLoss{at: c.s.w.now, vols: vols, nodes: nodes, behind: c.cachesHeld}
	if !c.cachesHeld {
		vols, nodes := c.facts()
		c.heldVols, c.heldNodes, c.cachesHeld = vols, nodes, true
	}
}

// apiLoss is what the API said when a replica lost it, for the checker: a view its informers
// held from an earlier loss (behind) is older than the outage, and the API-unreachable rule must
// not decide on it (checkAPIRule).
type apiLoss struct {
	at     time.Time
	vols   []volumes.Volume
	nodes  map[string]volumes.NodeState
	behind bool
}

// factsView is one state of the facts as this replica's informers deliver it, from at.
type factsView struct {
	at    time.Time
	vols  []volumes.Volume
	nodes map[string]volumes.NodeState
}

// delivered returns what this replica's informers show now when the API says vols and nodes:
// as its node view (nodeview.go), a change is queued as the view first meets it and delivered a
// random delay within maxViewLag later, after every change before it.
func (c *coord) delivered(vols []volumes.Volume, nodes map[string]volumes.NodeState) ([]volumes.Volume, map[string]volumes.NodeState) {
	live := factsView{at: c.s.w.now, vols: vols, nodes: nodes}
	q := c.factsQ
	if len(q) == 0 {
		c.factsQ = []factsView{live}
		return vols, nodes
	}
	if last := q[len(q)-1]; !maps.Equal(last.nodes, nodes) || !reflect.DeepEqual(last.vols, vols) {
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

// catchUpLater: this replica reaches the API again (its path back, and the API up); its
// informers catch up a random time within maxCatchUp from now.
func (c *coord) catchUpLater() {
	if !c.s.informersLate() || !c.alive || !c.cachesHeld || c.apiCut || !c.s.cluster.apiUp {
		return
	}
	c.caughtUpAt = later(c.s.w.now.Add(betweenR(c.s.lrng, 0, maxCatchUp)), c.caughtUpAt)
	c.s.w.logf("%s's informers catch up with the API in %s (until then its volume gate reads what they held)",
		c.name, c.caughtUpAt.Sub(c.s.w.now).Round(time.Millisecond))
}

// apiDown: the Kubernetes API stops answering; every replica's informers hold what they had.
func (s *Sim) apiDown() {
	s.cluster.setAPI(false)
	if s.informersLate() {
		for _, c := range s.coords {
			if c.alive {
				c.loseAPI()
			}
		}
	}
}

// apiBack: the Kubernetes API answers again after an outage; the informers of every replica
// whose own path to it is not cut catch up.
func (s *Sim) apiBack() {
	s.cluster.setAPI(true)
	for _, c := range s.coords {
		c.catchUpLater()
	}
}

// readFresh reads the facts from the API server, as the volume gate's check before COMPLETE
// does (a quorum read, not the informers'), and passes them, or the read's error, to reply. With
// InformersBehind the read takes a round trip, now and then a slow one (an API server under
// load), and gives up at deadline (world time) as the gate does; the facts are those at the
// server when the request reaches it. Without it the read is instant, as the runs found before
// assume.
func (c *coord) readFresh(inc int, deadline time.Time, reply func([]volumes.Volume, map[string]volumes.NodeState, error)) {
	s := c.s
	if !s.informersLate() {
		if !c.apiUp() {
			reply(nil, nil, errUnreachable("list nodes"))
			return
		}
		vols, nodes := s.cluster.liveFacts()
		reply(vols, nodes, nil)
		return
	}
	there, back := betweenR(s.lrng, time.Millisecond, 30*time.Millisecond), betweenR(s.lrng, time.Millisecond, 30*time.Millisecond)
	if s.lrng.IntN(8) == 0 {
		back = betweenR(s.lrng, 500*time.Millisecond, 1500*time.Millisecond)
	}
	answer := func(d time.Duration, vols []volumes.Volume, nodes map[string]volumes.NodeState, err error) {
		if at := s.w.now.Add(d); at.After(deadline) {
			d, vols, nodes, err = max(0, deadline.Sub(s.w.now)), nil, nil, volumes.ErrNotConfirmed
		}
		s.w.after(d, "fresh read answers", func() { c.run("fresh read", inc, func() { reply(vols, nodes, err) }) })
	}
	s.w.after(there, "fresh read at the API", func() {
		if !c.apiUp() {
			answer(betweenR(s.lrng, 0, 3*time.Second), nil, nil, errUnreachable("list nodes"))
			return
		}
		vols, nodes := s.cluster.liveFacts()
		answer(back, vols, nodes, nil)
	})
}
