package coordinator

import (
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/core/v1"
)

// managedLister is the cluster's node lister restricted to the nodes the coordinator manages
// (--node-selector): the others are not its to drain, cordon, or check, though admission counts
// them as places workloads can move to (Engine.nodeInfos).
type managedLister struct {
	all listersv1.NodeLister
	sel labels.Selector
}

var _ listersv1.NodeLister = managedLister{}

// List lists the managed nodes that sel selects.
func (m managedLister) List(sel labels.Selector) ([]*corev1.Node, error) {
	nodes, err := m.all.List(sel)
	if err != nil {
		return nil, err
	}
	out := nodes[:0:0]
	for _, n := range nodes {
		if m.sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Get returns the managed node name; a node the coordinator does not manage is not found.
func (m managedLister) Get(name string) (*corev1.Node, error) {
	n, err := m.all.Get(name)
	if err != nil {
		return nil, err
	}
	if !m.sel.Matches(labels.Set(n.Labels)) {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return n, nil
}
