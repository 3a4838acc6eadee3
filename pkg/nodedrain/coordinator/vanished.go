package coordinator

import (
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// endVanished ends the drain under way of every node whose Node object has been missing from
// the cluster (admission's view of it) for nodedrain.NodeGoneAfter: a deleted Node must not hold
// its drain and its admission slot for ever, whatever step the drain is at (an eviction, a
// blocked volume gate, the check before COMPLETE that finds it gone). The time counts from the
// first pass that saw it missing; a Node seen again (registered again, a new object) resets it.
// An empty view is no evidence (the node lister failed, or the API was never read): nothing
// ends on it.
func (c *Core) endVanished(nodes []nodedrain.NodeInfo, now time.Time) []NodeAction {
	if len(nodes) == 0 {
		return nil
	}
	if c.vanished == nil {
		c.vanished = map[string]time.Time{}
	}
	present, unmanaged := make(map[string]bool, len(nodes)), map[string]bool{}
	for _, n := range nodes {
		present[n.Name] = true
		unmanaged[n.Name] = n.Unmanaged
	}
	var out []NodeAction
	for _, node := range c.Nodes() {
		d := c.drains[node]
		// A node that stopped matching --node-selector is timed the same way, and ends its own
		// way: it is still there, with the drain's cordon (EvNodeUnmanaged).
		if (present[node] && !unmanaged[node]) || !d.Draining() || d.Request == nil || d.Status.Decommission {
			delete(c.vanished, node)
			continue
		}
		since, seen := c.vanished[node]
		if !seen {
			c.vanished[node] = now
			continue
		}
		if gone := now.Sub(since); gone >= nodedrain.NodeGoneAfter {
			// (Again at every pass until it has ended: a drain whose cordon is in flight
			// waits for its answer first.)
			var ev nodedrain.Event = nodedrain.EvNodeGone{For: gone}
			if unmanaged[node] {
				ev = nodedrain.EvNodeUnmanaged{For: gone}
			}
			out = append(out, c.Handle(node, ev, now)...)
		}
	}
	return out
}
