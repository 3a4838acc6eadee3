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
