package coordinator

import (
	"context"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// VolumeGate decides whether a node's volume data is safe elsewhere, so that the node may go down.
// pkg/volumes implements it; the coordinator asks it before eviction and again before COMPLETE.
type VolumeGate interface {
	// Check reports whether every volume with data on node is safe on other nodes, listing each
	// volume that is not, with the reason. It should answer from a cache, so that it still
	// answers (with its last known view) when the Kubernetes API is unreachable.
	Check(ctx context.Context, node string, opts GateOptions) (GateResult, error)
}

// GateOptions tells the gate about the drain it is asked for.
type GateOptions struct {
	// WholeCluster is true during a planned whole-cluster shutdown (every node has requested a
	// drain): replicas on nodes already down for it are not lost, only stopped.
	WholeCluster bool
	// AfterEviction is true for the check just before COMPLETE (the node's pods are gone), false
	// for the one before eviction. Work that must wait for the pods to be gone (a drainer Job on
	// a node-local volume) starts on the second.
	AfterEviction bool
	// Decommission is true for a drain that decommissions the node (nodedrain.DeclaresDecommission):
	// its replicas are evicted whatever the volume policy, and its node-local volumes are handled
	// by their decommission annotation.
	Decommission bool
	// LastKnown asks for the gate's last known view alone, for the API-unreachable rule: a gate
	// that confirms its answer before COMPLETE on a read of the API does not try.
	LastKnown bool
	// HeldElsewhere: something else already holds COMPLETE (the maintenance policy's
	// blockers): work the gate does only for a COMPLETE that follows (a Longhorn replica hold)
	// waits for a check without it.
	HeldElsewhere bool
}

// GateReleaser is implemented by gates that start work for a drain (asking the storage system
// to move replicas away, drainer Jobs): Release undoes or stops it when the node's request is
// withdrawn — cancelled mid-drain, or the node is back after its maintenance.
type GateReleaser interface {
	Release(ctx context.Context, node string) error
}

// GateHolder is implemented by gates that can list the nodes they hold work for (GateReleaser's
// work): on start the coordinator releases those without a request, work left behind when a
// request was withdrawn while no coordinator ran.
type GateHolder interface {
	Held(ctx context.Context) ([]string, error)
}

// GateWatcher is implemented by gates that see what their answers depend on change (their
// informers): the coordinator then asks a blocked gate again soon after a change, not only on
// its recheck timer. Changed's channel may coalesce changes; it never closes.
type GateWatcher interface {
	Changed() <-chan struct{}
}

// GatePeers is implemented by gates that know where the copies of a node's volumes are: under
// the wait policy admission then never puts in maintenance together the nodes holding every
// copy of one volume, whose drains would each wait for the other's copy (with two slots or
// more). Peers answers from the gate's caches; nil when the policy needs nothing of admission.
type GatePeers interface {
	Peers(node string) []nodedrain.VolumePeers
}

// GateResult is a gate's answer.
type GateResult struct {
	// Safe is true when nothing blocks.
	Safe bool
	// Blockers lists the volumes that are not safe, each with its reason and progress.
	Blockers []nodedrain.Blocker
}

// AllowAll is the gate used when no volume gate is configured: every node is always safe.
type AllowAll struct{}

var _ VolumeGate = AllowAll{}

// Check always answers safe.
func (AllowAll) Check(context.Context, string, GateOptions) (GateResult, error) {
	return GateResult{Safe: true}, nil
}
