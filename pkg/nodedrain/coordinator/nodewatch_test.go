package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// nodesSent records the Node objects the API server sent through a client (its lists and
// watches): what the coordinator's node informer was given. A test that cuts the API must first
// know that the informer saw what the rule it tests will read (a cordon), or under load the cut
// may come before the watch event, and the coordinator rightly refuses on a view without it.
type nodesSent struct {
	mu   sync.Mutex
	last map[string]*corev1.Node
}

// watchNodes returns client wrapped so that sent records the Nodes it is sent.
func watchNodes(client kubernetes.Interface) (kubernetes.Interface, *nodesSent) {
	sent := &nodesSent{last: map[string]*corev1.Node{}}
	return nodeWatchClient{Interface: client, sent: sent}, sent
}

func (s *nodesSent) record(n *corev1.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[n.Name] = n.DeepCopy()
}

// waitCordoned waits until the client was sent node cordoned.
func (s *nodesSent) waitCordoned(t *testing.T, node string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := s.last[node]
		return n != nil && n.Spec.Unschedulable
	}, within, 20*time.Millisecond, "the coordinator's node informer was never sent %s cordoned", node)
}

type nodeWatchClient struct {
	kubernetes.Interface
	sent *nodesSent
}

func (c nodeWatchClient) CoreV1() typedcorev1.CoreV1Interface {
	return nodeWatchCore{CoreV1Interface: c.Interface.CoreV1(), sent: c.sent}
}

type nodeWatchCore struct {
	typedcorev1.CoreV1Interface
	sent *nodesSent
}

func (c nodeWatchCore) Nodes() typedcorev1.NodeInterface {
	return nodeWatchNodes{NodeInterface: c.CoreV1Interface.Nodes(), sent: c.sent}
}

type nodeWatchNodes struct {
	typedcorev1.NodeInterface
	sent *nodesSent
}

func (n nodeWatchNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	l, err := n.NodeInterface.List(ctx, opts)
	if err == nil {
		for i := range l.Items {
			n.sent.record(&l.Items[i])
		}
	}
	return l, err
}

func (n nodeWatchNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := n.NodeInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if node, ok := ev.Object.(*corev1.Node); ok {
			n.sent.record(node)
		}
		return ev, true
	}), nil
}
