package coordinator

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// NodeConditionType is the Node condition that shows a node's maintenance in `kubectl describe
// node` and every tool that reads conditions: status True while edgedrain has business with the
// node (a request, a drain, its COMPLETE, an uncordon or the return gate under way), its reason
// the status name (REQUESTED .. COMPLETE) and its message the status's. It is removed once the
// node is idle.
const NodeConditionType corev1.NodeConditionType = "EdgedrainMaintenance"

const (
	// conditionRetry is how soon a condition write that failed is tried again.
	conditionRetry = 5 * time.Second
	// conditionMessageEvery is how often a new message alone (eviction progress, a volume's
	// rebuild) is written: every Node change goes to every watcher of Nodes.
	conditionMessageEvery = 30 * time.Second
	// conditionWriteTimeout bounds one write.
	conditionWriteTimeout = 10 * time.Second
)

// conditions writes each node's maintenance condition from its published statuses, off the
// engine's loop: only the latest status per node, a new reason at once, a new message alone at
// most every conditionMessageEvery, nothing when the Node already shows it. A failed write is
// tried again later. Admission reads another writer's lifecycle conditions (lifecycle.go).
type conditions struct {
	client kubernetes.Interface
	nodes  listersv1.NodeLister
	log    logrus.FieldLogger
	now    func() time.Time
	// own, lifecycle: write EdgedrainMaintenance; Kubernetes' node lifecycle conditions (see
	// lifecycle.go).
	own, lifecycle bool

	mu      sync.Mutex
	pending map[string]nodedrain.NodeDrainStatus
	wrote   map[string]written // node -> its last write by this run
	wake    chan struct{}

	warnings ratelog.Limiter
}

func newConditions(client kubernetes.Interface, nodes listersv1.NodeLister, log logrus.FieldLogger, now func() time.Time, own, lifecycle bool) *conditions {
	return &conditions{client: client, nodes: nodes, log: log, now: now, own: own, lifecycle: lifecycle, pending: map[string]nodedrain.NodeDrainStatus{},
		wrote: map[string]written{}, wake: make(chan struct{}, 1)}
}

// set asks for node's condition to follow st.
func (c *conditions) set(st nodedrain.NodeDrainStatus) {
	c.mu.Lock()
	c.pending[st.Node] = st
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sweep asks for the condition to go from every Node that shows it while drains (the Core's)
// does not name it: left by a coordinator that stopped before clearing it.
func (c *conditions) sweep(drains func(node string) bool) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	for _, n := range nodes {
		if hasOurs(n) && !drains(n.Name) {
			c.set(nodedrain.NodeDrainStatus{Node: n.Name, Status: nodedrain.StatusNotRequested})
		}
	}
}

// run writes the pending conditions until ctx ends.
func (c *conditions) run(ctx context.Context) {
	later := time.NewTimer(time.Hour)
	defer later.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-later.C:
		}
		c.mu.Lock()
		batch := c.pending
		c.pending = map[string]nodedrain.NodeDrainStatus{}
		c.mu.Unlock()
		next := time.Duration(0)
		for node, st := range batch {
			if ctx.Err() != nil || !stillLeading(ctx) {
				return // no Kubernetes write without the Lease; the next leader writes them
			}
			wait, err := c.write(ctx, st)
			if err != nil {
				c.warnings.Logger("condition", c.log).WithField("node", node).WithError(err).
					Warnf("could not write the node's maintenance conditions; trying again in %s", conditionRetry)
				wait = conditionRetry
			}
			if wait > 0 {
				c.mu.Lock()
				if _, newer := c.pending[node]; !newer {
					c.pending[node] = st
				}
				c.mu.Unlock()
				if next == 0 || wait < next {
					next = wait
				}
			}
		}
		if next > 0 {
			later.Reset(next)
		}
	}
}

// written is a node's last condition write by this run: when, and the types it showed.
type written struct {
	at    time.Time
	shown map[corev1.NodeConditionType]bool
}

// inMaintenance reports whether st means edgedrain has business with the node.
func inMaintenance(st nodedrain.NodeDrainStatus) bool {
	return (st.Status != nodedrain.StatusNotRequested && st.Status != nodedrain.StatusUnknown) || st.CordonedByUs || !st.ReturningSince.IsZero()
}

// write patches node's conditions to what st wants (strategic merge on the status subresource,
// keyed by type: the kubelet's conditions and another writer's stay as they are), unless the
// Node (as the informer last saw it) shows them already. A condition whose type another writer
// holds is left to it. wait > 0: not written yet, try again then (new messages alone too soon
// after the last write).
func (c *conditions) write(ctx context.Context, st nodedrain.NodeDrainStatus) (wait time.Duration, err error) {
	n, err := c.nodes.Get(st.Node)
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil // no Node (deleted, not registered yet): nothing to show it on
	case err != nil:
		return 0, err
	}
	now := c.now()
	want := wanted(st, c.own, c.lifecycle)
	c.mu.Lock()
	last, wroteBefore := c.wrote[st.Node] // by this run: the informer may not show it yet
	c.mu.Unlock()
	var changes []any
	newReason := false
	for _, t := range conditionTypes {
		have := findCondition(n, t)
		if have != nil && !ourCondition(*have) {
			continue // another writer's
		}
		w, on := want[t]
		switch {
		case !on && (have != nil || last.shown[t]):
			changes = append(changes, map[string]any{"type": t, "$patch": "delete"})
			newReason = newReason || have != nil
		case !on:
		case have != nil && have.Status == corev1.ConditionTrue && have.Reason == w.reason && have.Message == w.message:
		default:
			cond := map[string]any{"type": t, "status": corev1.ConditionTrue, "reason": w.reason,
				"message": w.message, "lastHeartbeatTime": metav1.NewTime(now)}
			if have == nil || have.Status != corev1.ConditionTrue {
				cond["lastTransitionTime"] = metav1.NewTime(now) // else the stored one stays
			}
			newReason = newReason || have == nil || have.Status != corev1.ConditionTrue || have.Reason != w.reason
			changes = append(changes, cond)
		}
	}
	if len(changes) == 0 {
		return 0, nil
	}
	if since := now.Sub(last.at); !newReason && wroteBefore && since < conditionMessageEvery {
		return conditionMessageEvery - since, nil
	}
	// Decided on the Node as the informer shows it: written only onto that very version, so
	// that a condition another writer set since is not overwritten or removed (a conflict is
	// decided again once the informer shows the newer Node).
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
		"status": map[string]any{"conditions": changes}})
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, conditionWriteTimeout)
	defer cancel()
	_, err = c.client.CoreV1().Nodes().Patch(wctx, st.Node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsConflict(err) {
		// Decided again once the informer has had time to show the newer Node (not at once: an
		// informer that is relisting would make every pending node fail again and again).
		return conditionRetry, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	c.mu.Lock()
	if len(want) > 0 {
		shown := make(map[corev1.NodeConditionType]bool, len(want))
		for t := range want {
			shown[t] = true
		}
		c.wrote[st.Node] = written{at: now, shown: shown}
	} else {
		delete(c.wrote, st.Node) // removed: an idle node's next status writes nothing
	}
	c.mu.Unlock()
	return 0, nil
}
