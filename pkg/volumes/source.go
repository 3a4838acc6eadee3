package volumes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// Source is a replicated storage system the gate checks (Longhorn is one). Adding a storage
// system means writing a Source that turns its objects into Volume facts; the Rules and the
// coordinator stay as they are.
type Source interface {
	// Name names the storage system in blockers, logs and metrics ("longhorn").
	Name() string
	// Start starts the source's caches, which run until ctx ends; it does not wait for them to
	// fill. A storage system that is not installed is not an error: Available then reports false.
	Start(ctx context.Context) error
	// HasSynced reports whether the caches are filled (true when the system is not installed).
	HasSynced() bool
	// Available reports whether the storage system is installed and its caches are synced.
	Available() bool
	// Volumes returns, from the source's cache, every volume with a replica on node, each
	// with all its replicas.
	Volumes(node string) ([]Volume, error)
	// StorageNodes returns, from the source's cache, what the storage system says about each
	// node it knows; nil when it says nothing about nodes (every node then takes replicas).
	StorageNodes() map[string]StorageNode
}

// StorageNode is what a storage system says about one node.
type StorageNode struct {
	// Unplaceable says why the storage system would not place a new replica there; "" when it
	// would.
	Unplaceable string
	// Down says why the replicas there do not serve their data now; "" when they do.
	Down string
	// Zone is the node's zone ("" is a zone too).
	Zone string
}

// Evictor is implemented by Sources that can be asked to move a node's replicas elsewhere
// (PolicyEvict).
type Evictor interface {
	// RequestEviction asks the storage system to move node's replicas away, recording that
	// the gate asked; changed says whether it asked now. It is idempotent and leaves a request
	// someone else made alone.
	RequestEviction(ctx context.Context, node string) (changed bool, err error)
	// CancelEviction withdraws a request RequestEviction made, restoring what it changed;
	// changed is false when the gate had made none (or node is unknown to the storage system).
	CancelEviction(ctx context.Context, node string) (changed bool, err error)
	// RequestedEvictions returns the nodes that carry a request RequestEviction made and
	// CancelEviction has not withdrawn, from the source's caches where it has them.
	RequestedEvictions(ctx context.Context) ([]string, error)
}

// nodeStates returns the Kubernetes view of every node: exists, Ready, cordoned.
func nodeStates(nodes []*corev1.Node) map[string]NodeState {
	out := make(map[string]NodeState, len(nodes))
	for _, n := range nodes {
		out[n.Name] = NodeState{Exists: true, Ready: nodeReady(n), Cordoned: n.Spec.Unschedulable}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// withStorage returns a copy of nodes with what the storage system says about each: where it
// places no new replicas, where its replicas do not serve, zones. A node it does not know takes
// no replicas (it has none to serve). storage nil: nodes as they are.
func withStorage(nodes map[string]NodeState, storage map[string]StorageNode) map[string]NodeState {
	if storage == nil {
		return nodes
	}
	out := make(map[string]NodeState, len(nodes))
	for name, st := range nodes {
		sn, ok := storage[name]
		if !ok {
			sn.Unplaceable = "not a Longhorn node"
		}
		st.StorageDisabled, st.StorageWhy, st.StorageDown, st.Zone = sn.Unplaceable != "", sn.Unplaceable, sn.Down, sn.Zone
		out[name] = st
	}
	return out
}
