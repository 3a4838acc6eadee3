package coordinator

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Maintenance is the maintenance policy (DESIGN §9) as the engine asks it; pkg/policy
// implements it. Nil in Config: no windows, no blockers, no pre-flight, oldest request first.
type Maintenance interface {
	// Admission says, without blocking, which waiting drains must stay REQUESTED (a closed
	// window, blockers, a pre-flight hold, a check not yet done) and which are admitted with a
	// warning. It may start checks in the background; Changed signals their results.
	Admission(waiting []Waiting, now time.Time) AdmitPolicy
	// Order gives a node's priority for a request of requester and its failure domain.
	Order(nodeLabels map[string]string, requester nodedrain.Requester) (priority int, domain string)
	// Blockers lists what blocks COMPLETE on node now (the policy's pods and alerts); it is
	// asked with the volume gate before COMPLETE. An error fails closed.
	Blockers(ctx context.Context, node string) ([]nodedrain.Blocker, error)
	// Changed signals that Admission may answer differently now (a check finished, the policy
	// changed, a window opened).
	Changed() <-chan struct{}
}

// Waiting is a drain waiting for admission, as the maintenance policy sees it.
type Waiting struct {
	Node    string
	Request nodedrain.NodeDrainRequest
}

// GateReturner is implemented by volume gates that can tell whether a node back from its
// operation has its storage whole again (its replicas rebuilt): the return gate asks it.
type GateReturner interface {
	ReturnCheck(ctx context.Context, node string) ([]nodedrain.Blocker, error)
}

// Waiting lists the drains waiting for admission, in node order.
func (c *Core) Waiting() []Waiting {
	var out []Waiting
	for _, node := range c.Nodes() {
		if d := c.drains[node]; d.AwaitsAdmission() {
			out = append(out, Waiting{Node: node, Request: *d.Request})
		}
	}
	return out
}

// finalBlockers asks the maintenance policy what blocks COMPLETE, failing closed on an error.
func (x *executor) finalBlockers(ctx context.Context, node string) []nodedrain.Blocker {
	m := x.e.cfg.Maintenance
	if m == nil {
		return nil
	}
	b, err := m.Blockers(ctx, node)
	if err != nil {
		return []nodedrain.Blocker{{Kind: "Policy", Name: "maintenance-policy",
			Reason: fmt.Sprintf("cannot check the maintenance policy's blockers, failing closed: %v", err)}}
	}
	return b
}

// returnCheck is the return gate's question: is the node back from its operation healthy
// again — Ready, every pod bound to it Ready (its DaemonSet pods, pods scheduled back), and its
// storage whole (GateReturner)?
func (x *executor) returnCheck(ctx context.Context, node string) ([]nodedrain.Blocker, error) {
	var blockers []nodedrain.Blocker
	n, err := x.e.nodes.Get(node)
	switch {
	case err != nil:
		blockers = append(blockers, nodedrain.Blocker{Kind: nodedrain.BlockerNode, Name: node, Reason: "the Node object is missing"})
	case !nodeReady(n):
		blockers = append(blockers, nodedrain.Blocker{Kind: nodedrain.BlockerNode, Name: node, Reason: "not Ready yet"})
	}
	pods, err := x.e.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list pods on %s: %w", node, err)
	}
	var notReady []nodedrain.Blocker
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil || podutils.IsPodReady(p) {
			continue
		}
		notReady = append(notReady, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: p.Namespace, Name: p.Name,
			Reason: "scheduled on the node and not Ready yet"})
	}
	sort.Slice(notReady, func(i, j int) bool {
		return notReady[i].Namespace+"/"+notReady[i].Name < notReady[j].Namespace+"/"+notReady[j].Name
	})
	blockers = append(blockers, notReady...)
	if r, ok := x.e.cfg.Gate.(GateReturner); ok {
		b, err := r.ReturnCheck(ctx, node)
		if err != nil {
			return nil, err
		}
		blockers = append(blockers, b...)
	}
	return blockers, nil
}
