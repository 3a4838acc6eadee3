package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// confirmEvery is how often, at most, the requests are read afresh to confirm a declared
// whole-cluster shutdown while admission waits on it and the reads disagree or fail.
const confirmEvery = 2 * time.Second

// confirmDeclared reads the request of every node of the cluster (and every node the Core has
// a drain for) afresh and, if each matches what the Core serves, lets the next admission act on
// the declared whole-cluster shutdown. A mismatch means the watch has a change still to deliver:
// its event comes, and admission decides again then.
func (e *Engine) confirmDeclared(ctx context.Context) bool {
	now := time.Now()
	if now.Sub(e.declaredReadAt) < confirmEvery {
		return false
	}
	e.declaredReadAt = now
	if err := e.requestsMatch(ctx); err != nil {
		e.warnings.Logger("declared-confirm", e.log).WithError(err).
			Info("a declared whole-cluster shutdown is not acted on until the requests read afresh match the watch's")
		return false
	}
	e.core.ConfirmDeclared()
	return true
}

// requestsMatch says, as an error, where a fresh read of the requests differs from the Core's.
func (e *Engine) requestsMatch(ctx context.Context) error {
	nodes, err := e.clusterNodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	keys := e.core.Nodes()
	for _, n := range nodes {
		keys = append(keys, n.Name)
	}
	slices.Sort(keys)
	// As of the bucket's last revision: a follower that lags would agree with the watch's old
	// view.
	last, err := e.requests.LastRevision(ctx)
	if err != nil {
		return err
	}
	for _, key := range slices.Compact(keys) {
		req, _, origin, err := e.requests.GetCurrent(ctx, key, last)
		var id string
		switch {
		case errors.Is(err, pubsub.ErrNotFound), errors.Is(err, pubsub.ErrDecode):
			// (A value that does not decode is served as none.)
		case err != nil:
			return fmt.Errorf("read the request of %s: %w", key, err)
		case origin == pubsub.Copied || req.Node != key:
			// Served as none too (a server copy, or another node's request under the key): an
			// agent's credential could plant one under an idle node's key for good.
		default:
			id = req.RequestID
		}
		d, _ := e.core.Drain(key)
		if served := requestID(d.Request); served != id {
			return fmt.Errorf("the request of %s is %q on the bus, %q as the watch delivered it", key, id, served)
		}
	}
	return nil
}

func requestID(r *nodedrain.NodeDrainRequest) string {
	if r == nil {
		return ""
	}
	return r.RequestID
}
