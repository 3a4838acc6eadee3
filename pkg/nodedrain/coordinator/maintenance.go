package coordinator

import (
	"context"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Maintenance is the maintenance policy (DESIGN §9) as the engine asks it; pkg/policy
// implements it. Nil in Config: no windows, no blockers, no pre-flight, oldest request first.
type Maintenance interface {
	// Admission says, without blocking, which waiting drains must stay REQUESTED (a closed
	// window, blockers, a pre-flight hold, a check not yet done) and which are admitted with a
	// warning. It may start checks in the background; Changed signals their results.
	Admission(waiting []Waiting, now time.Time) AdmissionVerdict
	// Order gives a node's priority for a request of requester and its failure domain.
	Order(nodeLabels map[string]string, requester nodedrain.Requester) (priority int, domain string)
	// Blockers lists what blocks COMPLETE on node now (the policy's pods and alerts); it is
	// asked with the volume gate before COMPLETE. An error fails closed.
	Blockers(ctx context.Context, node string) ([]nodedrain.Blocker, error)
	// Changed signals that Admission may answer differently now (a check finished, the policy
	// changed, a window opened).
	Changed() <-chan struct{}
}

// Waiting is a drain waiting for admission, as the maintenance policy sees it.
type Waiting struct {
	Node    string
	Request nodedrain.NodeDrainRequest
}

// GateReturner is implemented by volume gates that can tell whether a node back from its
// operation has its storage whole again (its replicas rebuilt): the return gate asks it.
type GateReturner interface {
	ReturnCheck(ctx context.Context, node string) ([]nodedrain.Blocker, error)
}

// Waiting lists the drains waiting for admission, in node order.
func (c *Core) Waiting() []Waiting {
	var out []Waiting
	for _, node := range c.Nodes() {
		if d := c.drains[node]; d.AwaitsAdmission() {
			out = append(out, Waiting{Node: node, Request: *d.Request})
		}
	}
	return out
}
