package volumes

import (
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

var _ coordinator.GatePeers = (*Gate)(nil)

// Peers lists, for each volume of vols with a copy on node, the other nodes holding a copy of
// it: an intact replica, or one being rebuilt (a copy soon), that is not being deleted, on a
// node that exists (exists says which do). A copy on a node whose Node object is gone (deleted,
// decommissioned) is no peer: no drain there will ever end and free it, and the gate never
// counts it, so naming it would hide from admission and from GiveWay two drains each waiting for
// the other's copy, a wait that lasts until the node registers again. Whether
// that copy counts now (its node cordoned, down, its replica stopped) is the gate's question at
// the drain; admission asks which nodes must not be in maintenance together. (A rebuild that
// completes on a node in maintenance leaves two drains each waiting for the other's copy just
// as two intact copies do; the simulation found it.)
func Peers(vols []Volume, node string, exists func(node string) bool) []nodedrain.VolumePeers {
	var out []nodedrain.VolumePeers
	for _, v := range vols {
		var others []string
		mine := false
		for _, r := range v.Replicas {
			switch {
			case !(r.Intact || r.Rebuilding) || r.Deleting || r.Inactive:
			case r.Node == node:
				mine = true
			case !exists(r.Node):
			default:
				others = append(others, r.Node)
			}
		}
		if mine {
			out = append(out, nodedrain.VolumePeers{Volume: v.Name, Nodes: others})
		}
	}
	return out
}

// Peers is Peers on the gate's cached facts, under the wait policy only: the evict policy asks
// the storage system to move the node's copies elsewhere (from the copies still running on the
// cordoned nodes), and allow waits for nothing. A source that cannot answer leaves its volumes
// out: admission then goes by the drains' own gate checks, as it did without this.
func (g *Gate) Peers(node string) []nodedrain.VolumePeers {
	if !g.ready.Load() || g.cfg.Policy != PolicyWait {
		return nil
	}
	var out []nodedrain.VolumePeers
	for _, s := range g.sources {
		if !s.Available() {
			continue
		}
		vols, err := s.Volumes(node)
		if err != nil {
			g.log.WithFields(logrus.Fields{"node": node, "source": s.Name()}).WithError(err).Debug("cannot list the volumes' copies for admission")
			continue
		}
		out = append(out, Peers(vols, node, g.nodeExists)...)
	}
	return out
}

// nodeExists reports whether the gate's cache holds a Node object named node.
func (g *Gate) nodeExists(node string) bool {
	_, err := g.nodes.Get(node)
	return err == nil
}
