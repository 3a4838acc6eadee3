package volumes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// Prediction is what the gate expects a drain of a node to meet, as Predict finds it.
type Prediction struct {
	// Blockers are the volumes that would hold the drain back now: the blocking findings Check
	// would report before eviction, and drainer templates that would not run.
	Blockers []nodedrain.Blocker
	// Notes say what would happen without blocking: drainer Jobs that would run once the pods
	// are gone, findings the policy lets through, what the policy evict would ask, storage
	// systems not installed.
	Notes []string
}

// sourceFindings is what the rules found about one source's volumes on a node.
type sourceFindings struct {
	source   Source
	volumes  int // the source's volumes with data on the node
	findings []Finding
}

// blockers returns the findings as blockers, and whether any blocks; none from a source not
// installed.
func (sf sourceFindings) blockers() ([]nodedrain.Blocker, bool) {
	if !sf.source.Available() {
		return nil, false
	}
	out := make([]nodedrain.Blocker, 0, len(sf.findings))
	for _, f := range sf.findings {
		out = append(out, f.Blocker())
	}
	return out, Blocks(sf.findings)
}

// Predict says what would block a drain of node if it started now, without changing anything:
// the same rules as Check (before eviction, not in a whole-cluster shutdown) over the same
// cached facts, but no storage system is asked to evict, no drainer Job is created, no Event
// is recorded and no problem is remembered as reported. The drainer Jobs a drain would run on
// the node's local volumes are listed in the notes. Before Start it returns ErrNotStarted.
func (g *Gate) Predict(ctx context.Context, node string) (Prediction, error) {
	return g.PredictFor(ctx, node, coordinator.GateOptions{})
}

// PredictFor is Predict for a drain with opts: for a decommission (opts.Decommission) the
// replicas are judged as its drain will (evicted whatever the policy) and the node-local PVCs
// by their decommission annotation.
func (g *Gate) PredictFor(_ context.Context, node string, opts coordinator.GateOptions) (Prediction, error) {
	if !g.ready.Load() {
		return Prediction{}, fmt.Errorf("predict node %s: %w", node, ErrNotStarted)
	}
	opts.AfterEviction, opts.WholeCluster = false, false
	p := Prediction{Blockers: []nodedrain.Blocker{}, Notes: []string{}}
	found, err := g.replicated(node, opts)
	if err != nil {
		return Prediction{}, err
	}
	policy := g.policyFor(opts)
	allow := policy == PolicyAllow
	for _, sf := range found {
		if !sf.source.Available() {
			p.Notes = append(p.Notes, fmt.Sprintf("%s is not installed: its volumes are not checked", sf.source.Name()))
			continue
		}
		for _, f := range sf.findings {
			b := f.Blocker()
			switch {
			case f.Decision.Verdict != Block:
				p.Notes = append(p.Notes, noteOf(b, ""))
			case allow:
				p.Notes = append(p.Notes, noteOf(b, "not blocking (volume policy allow): "))
			case !Predicts(f):
				p.Notes = append(p.Notes, noteOf(b, "the drain itself resolves this (volume policy evict): "))
			default:
				p.Blockers = append(p.Blockers, b)
			}
		}
		if _, ok := sf.source.(Evictor); ok && policy == PolicyEvict && sf.volumes > 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("volume policy evict: the drain would ask %s to move this node's replicas of %d volume(s) to other nodes, then wait for them",
				sf.source.Name(), sf.volumes))
		}
	}
	predictLocal := g.predictLocal
	if opts.Decommission {
		predictLocal = g.predictDecommission
	}
	for _, lv := range g.localVolumes(node) {
		b, note := predictLocal(lv, node)
		switch {
		case b != nil && !allow:
			p.Blockers = append(p.Blockers, *b)
		case b != nil:
			p.Notes = append(p.Notes, noteOf(*b, "not blocking (volume policy allow): "))
		case note != "":
			p.Notes = append(p.Notes, note)
		}
	}
	return p, nil
}

// replicated runs the rules over the volumes each source has on node, as Check does, and asks
// nothing of the sources but their cached facts. Sources not installed are listed with no
// findings.
func (g *Gate) replicated(node string, opts coordinator.GateOptions) ([]sourceFindings, error) {
	all, err := g.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return g.evaluate(all, g.sources, node, opts)
}

// evaluate runs the rules over the volumes sources report on node, with nodes as the Nodes.
func (g *Gate) evaluate(nodes []*corev1.Node, sources []Source, node string, opts coordinator.GateOptions) ([]sourceFindings, error) {
	states := nodeStates(nodes)
	out := make([]sourceFindings, 0, len(sources))
	for _, s := range sources {
		sf := sourceFindings{source: s}
		if s.Available() {
			vols, err := s.Volumes(node)
			if err != nil {
				return nil, fmt.Errorf("%s volumes on node %s: %w", s.Name(), node, err)
			}
			view := &View{Node: node, WholeCluster: opts.WholeCluster, Policy: g.policyFor(opts), Nodes: withStorage(states, s.StorageNodes())}
			sf.volumes, sf.findings = len(vols), Evaluate(vols, view, g.rules)
		}
		out = append(out, sf)
	}
	return out, nil
}

// predictLocal says what a drain would meet on one node-local volume: a blocker when its
// drainer template would not run (invalid, or refused by the DrainerPolicy), else a note
// naming the drainer Job that would run, or nothing when none is configured or the PVC is
// already drained.
func (g *Gate) predictLocal(lv localVolume, node string) (*nodedrain.Blocker, string) {
	src, ok := g.templateFor(lv.pvc)
	if !ok || lv.pvc.Labels[DrainStatusLabel] == DrainStatusDrained {
		return nil, ""
	}
	if err := g.templateProblem(src, lv.pvc); err != nil {
		b := volumeBlocker("local", lv.pv.Name, lv.pvc.Namespace, lv.pvc.Name, fmt.Sprintf("drainer template on %s: %v", src.where, err), 0)
		return &b, ""
	}
	return nil, fmt.Sprintf("PVC %s/%s (local volume %s): drainer Job %s would run on %s once its pods are gone (template on %s); the drain waits for it to succeed",
		lv.pvc.Namespace, lv.pvc.Name, lv.pv.Name, drainerJobName(lv.pvc), node, src.where)
}

// templateProblem is why the drainer template src would not run for pvc (it does not parse,
// or the DrainerPolicy or the namespace refuses it), or nil: admitTemplate's judgement without
// its reports.
func (g *Gate) templateProblem(src templateSource, pvc *corev1.PersistentVolumeClaim) error {
	t, err := ParseDrainerTemplate(src.raw)
	if err != nil {
		return err
	}
	return g.policyProblem(t, pvc)
}

// noteOf renders a blocker that does not block as a note.
func noteOf(b nodedrain.Blocker, prefix string) string {
	progress := ""
	if b.Progress > 0 {
		progress = fmt.Sprintf(" [%d%%]", b.Progress)
	}
	return fmt.Sprintf("volume %s%s: %s%s", b.Name, progress, prefix, b.Reason)
}

// Predicts reports whether a blocking finding before a drain predicts a blocked drain: not
// the evict policy's wait for replacements, which the drain itself asks the storage system for
// (predicting it would hold every node with replicas back for good under --preflight=hold).
func Predicts(f Finding) bool { return f.Rule != "evict-replacement" }
