package volumes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// ReturnCheck is the volume part of the health gate after node came back from its maintenance
// (DESIGN §9): it lists each replicated volume with a replica on node that is not healthy
// again, with the reason — a replica there rebuilding (Progress is the rebuild's percent),
// failed or not yet rebuilt, or stopped while its volume is attached — and each such volume
// still degraded (fewer healthy replicas than it wants, wherever they are). It is empty when
// all of the node's replicas and their volumes are healthy, or the node holds none. It reads
// the caches only; once the node's volumes are healthy again it ends the replica holds that are
// done (hold.go). Before Start it returns ErrNotStarted.
func (g *Gate) ReturnCheck(ctx context.Context, node string) ([]nodedrain.Blocker, error) {
	if !g.ready.Load() {
		return nil, fmt.Errorf("return check of node %s: %w", node, ErrNotStarted)
	}
	out := []nodedrain.Blocker{}
	for _, s := range g.sources {
		if !s.Available() {
			continue
		}
		vols, err := s.Volumes(node)
		if err != nil {
			return nil, fmt.Errorf("%s volumes on node %s: %w", s.Name(), node, err)
		}
		out = append(out, ReturnBlockers(vols, node)...)
	}
	if len(out) > nodedrain.MaxBlockers {
		out = out[:nodedrain.MaxBlockers]
	}
	// While its volumes are not healthy again, their changes and the node's pods wake the
	// coordinator (the node's own readiness reaches it through its node informer).
	g.watch(node, len(out) > 0, out)
	if len(out) == 0 {
		g.settleHolds(ctx, "") // the node's replicas are back: its hold may end
	}
	return out, nil
}

// ReturnBlockers is ReturnCheck's rule on volume facts: a blocker for each volume with a
// replica on node that is not healthy again (the whole-protocol simulation asks it too).
func ReturnBlockers(vols []Volume, node string) []nodedrain.Blocker {
	var out []nodedrain.Blocker
	for i := range vols {
		v := &vols[i]
		if !slices.ContainsFunc(v.Replicas, func(r Replica) bool { return r.Node == node }) {
			continue
		}
		if reasons, progress := notHealthyAgain(v, node); len(reasons) > 0 {
			out = append(out, volumeBlocker(v.Source, v.Name, v.PVCNamespace, v.PVCName, strings.Join(reasons, "; "), progress))
		}
	}
	return out
}

// notHealthyAgain lists what is not healthy yet about v for a node back from maintenance: its
// replicas on node that do not serve a complete copy, then the volume's own degradation. The
// progress is the lowest of the volume's rebuilds under way, 0 when none is.
func notHealthyAgain(v *Volume, node string) ([]string, int) {
	var reasons []string
	healthy, rebuilding, progress := 0, false, 100
	for _, r := range v.Replicas {
		if r.Rebuilding {
			rebuilding, progress = true, min(progress, clampPercent(r.Progress))
		}
		ok := r.Intact && !r.Rebuilding && (r.Running || v.Detached)
		if ok {
			healthy++
		}
		if r.Node != node || ok {
			continue
		}
		switch {
		case r.Rebuilding:
			reasons = append(reasons, fmt.Sprintf("replica %s on this node rebuilding %d%%", r.Name, clampPercent(r.Progress)))
		case !r.Intact:
			reasons = append(reasons, fmt.Sprintf("replica %s on this node not healthy (failed, or not rebuilt yet)", r.Name))
		default:
			reasons = append(reasons, fmt.Sprintf("replica %s on this node stopped while the volume is attached", r.Name))
		}
	}
	want := v.DesiredReplicas
	if want <= 0 {
		want = len(v.Replicas)
	}
	if healthy < want {
		reasons = append(reasons, fmt.Sprintf("volume degraded: %d of %d replicas healthy", healthy, want))
	}
	if !rebuilding {
		progress = 0
	}
	return reasons, progress
}
