package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The operator's bus identity may put or delete any request (pkg/busauth). Used at a bad moment,
// or stolen, it puts a request of its own over whatever the node's key holds: a made-up one
// (as `edgedrainctl drain` would), or the node's earlier request replayed — one its agent
// withdrew, whose ID the agent remembers as its own. It withdraws its request after a while, as
// an operator cleaning up does. No status can be written with it: the agents must never run an
// operation on what follows, and the coordinator must keep every invariant.
const (
	OperatorPutsRequest    Kind = "operator-puts-a-request"
	OperatorReplaysRequest Kind = "operator-replays-an-earlier-request"
)

func operatorBusFaults(cfg Config, rng *rand.Rand) Plan {
	var p Plan
	for range 1 + rng.IntN(2) {
		k := OperatorPutsRequest
		if rng.IntN(2) == 0 {
			k = OperatorReplaysRequest
		}
		p = append(p, Fault{At: time.Duration(rng.Int64N(int64(cfg.Active))), Kind: k, Target: rng.IntN(cfg.Nodes),
			For: time.Duration(5+rng.IntN(116)) * time.Second})
	}
	return p
}

// applyOperatorBusFault puts the operator's request, and takes it back after f.For if the key
// still holds it.
func (s *Sim) applyOperatorBusFault(f Fault) {
	w := s.w
	name := s.cluster.order[f.Target%len(s.cluster.order)]
	if !s.bus.up {
		return
	}
	var req nodedrain.NodeDrainRequest
	switch f.Kind {
	case OperatorPutsRequest:
		s.opRequests++
		req = nodedrain.NodeDrainRequest{Node: name, RequestID: fmt.Sprintf("%s-operator%d", name, s.opRequests),
			RequestedBy: nodedrain.RequesterDeviceOp, RequestedAt: w.now, Context: "maintenance by hand"}
	case OperatorReplaysRequest:
		// (An earlier request of the agent's, one it remembers as its own: the value read back
		// from the operator's own earlier view of the bucket.)
		cur, _ := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
		a := s.agentOf(name)
		id := ""
		for _, m := range a.m.State.Mine {
			if m != cur.RequestID && m != a.m.State.RequestID {
				id = m
			}
		}
		if id == "" {
			return // nothing earlier to replay
		}
		req = nodedrain.NodeDrainRequest{Node: name, RequestID: id, RequestedBy: nodedrain.RequesterDeviceOp,
			RequestedAt: w.now.Add(-time.Minute), Context: string(a.m.State.Operation)}
	}
	w.logf("an operator's bus identity puts request %s for %s (%s)", req.RequestID, name, f.Kind)
	s.operatorWrites(name, req)
	s.withdrawn[req.RequestID] = false
	var withdraw func()
	withdraw = func() {
		cur, ok := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
		switch {
		case !ok || cur.RequestID != req.RequestID:
		case !s.bus.up:
			w.after(5*time.Second, "operator withdraws its request", withdraw) // the operator tries again
		default:
			w.logf("the operator withdraws request %s of %s", req.RequestID, name)
			s.operatorWrites(name, nil)
		}
	}
	w.after(f.For, "operator withdraws its request", withdraw)
}

// operatorWrites is an operator's write of a node's request key (nil: a withdrawal): whatever
// request it replaces is withdrawn by the operator, who releases the node's slot, down or not,
// and cancels the operation that asked for it.
func (s *Sim) operatorWrites(name string, val any) {
	if r, ok := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest); ok {
		s.withdrawn[r.RequestID] = true
	}
	if val == nil {
		s.bus.write(bucketRequests, name, nil, "operator")
	} else {
		s.bus.write(bucketRequests, name, val, "operator")
	}
	a := s.agentOf(name)
	a.cmdRequest = ""
	for _, p := range []*agentProc{a, a.twin} { // whichever made it
		if p != nil && p.m.State.Sentinel != "" {
			s.cancelled[name+"/"+string(p.m.State.Operation)] = p.m.State.SentinelModTime
		}
	}
}
