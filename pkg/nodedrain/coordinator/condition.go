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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// NodeConditionType is the Node condition that shows a node's maintenance in `kubectl describe
// node` and every tool that reads conditions: status True while edgedrain has business with the
// node (a request, a drain, its COMPLETE, an uncordon or the return gate under way), its reason
// the status name (REQUESTED .. COMPLETE) and its message the status's. It is removed once the
// node is idle.
const NodeConditionType corev1.NodeConditionType = "EdgedrainMaintenance"

// conditionRetry is how soon a condition write that failed is tried again.
const conditionRetry = 5 * time.Second

// conditions writes each node's maintenance condition from its published statuses, off the
// engine's loop: only the latest status per node is written, a failed write is tried again
// later. It is informational: nothing reads it back.
type conditions struct {
	client kubernetes.Interface
	log    logrus.FieldLogger
	now    func() time.Time

	mu      sync.Mutex
	pending map[string]nodedrain.NodeDrainStatus
	written map[string]string // node -> the reason last written ("" after a removal)
	wake    chan struct{}

	warnings ratelog.Limiter
}

func newConditions(client kubernetes.Interface, log logrus.FieldLogger, now func() time.Time) *conditions {
	return &conditions{client: client, log: log, now: now, pending: map[string]nodedrain.NodeDrainStatus{},
		written: map[string]string{}, wake: make(chan struct{}, 1)}
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

// run writes the pending conditions until ctx ends.
func (c *conditions) run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-retry.C:
		}
		c.mu.Lock()
		batch := c.pending
		c.pending = map[string]nodedrain.NodeDrainStatus{}
		c.mu.Unlock()
		failed := false
		for node, st := range batch {
			if ctx.Err() != nil {
				return
			}
			if err := c.write(ctx, st); err != nil {
				failed = true
				c.mu.Lock()
				if _, newer := c.pending[node]; !newer {
					c.pending[node] = st
				}
				c.mu.Unlock()
				c.warnings.Logger("condition", c.log).WithField("node", node).WithError(err).
					Warnf("could not write the node's %s condition; trying again in %s", NodeConditionType, conditionRetry)
			}
		}
		if failed {
			retry.Reset(conditionRetry)
		}
	}
}

// inMaintenance reports whether st means edgedrain has business with the node.
func inMaintenance(st nodedrain.NodeDrainStatus) bool {
	return st.Status != nodedrain.StatusNotRequested && st.Status != nodedrain.StatusUnknown || st.CordonedByUs || !st.ReturningSince.IsZero()
}

// write patches node's condition (strategic merge on the status subresource: the kubelet's own
// conditions stay as they are).
func (c *conditions) write(ctx context.Context, st nodedrain.NodeDrainStatus) error {
	reason := ""
	var cond map[string]any
	if inMaintenance(st) {
		reason = st.Status.String()
		now := metav1.NewTime(c.now())
		cond = map[string]any{"type": NodeConditionType, "status": corev1.ConditionTrue, "reason": reason,
			"message": st.Message, "lastHeartbeatTime": now}
		c.mu.Lock()
		prev, known := c.written[st.Node]
		c.mu.Unlock()
		if !known || prev != reason {
			cond["lastTransitionTime"] = now
		}
	} else {
		cond = map[string]any{"type": NodeConditionType, "$patch": "delete"}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, st.Node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) { // no Node (deleted, not registered yet): nothing to show it on
		return err
	}
	c.mu.Lock()
	c.written[st.Node] = reason
	c.mu.Unlock()
	return nil
}
