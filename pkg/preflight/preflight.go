// Package preflight predicts, before anything is cordoned, what would block a node's drain if it
// started now (DESIGN §9, `edgedrainctl check NODE`): pods whose eviction a
// PodDisruptionBudget refuses now, pods no controller manages when those may not be evicted,
// volumes whose data is not safe elsewhere (the volume gate's own rules), VMs that cannot
// live-migrate, and the maintenance policy's blockers. It only reads: nothing is cordoned, evicted, created or annotated.
package preflight

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// VolumePredictor predicts what a node's volumes would make a drain wait for, without changing
// anything; *volumes.Gate is one (started first).
type VolumePredictor interface {
	PredictFor(ctx context.Context, node string, opts coordinator.GateOptions) (volumes.Prediction, error)
}

var _ VolumePredictor = (*volumes.Gate)(nil)

// VMPredictor says which of the pods a drain would evict are VMs whose eviction would be refused
// (blocker reasons by "namespace/pod"), with notes on the others; *vms.KubeVirt is one.
type VMPredictor interface {
	Predict(ctx context.Context, pods []corev1.Pod) (map[string]string, []string, error)
}

// ExtraFunc returns more blockers of node's drain (the maintenance policy's: pods matching a
// selector, firing alerts); an error fails the prediction.
type ExtraFunc func(ctx context.Context, node string) ([]nodedrain.Blocker, error)

// Config says what Predict looks at.
type Config struct {
	// Client reads nodes, pods, PodDisruptionBudgets and DaemonSets. Required.
	Client kubernetes.Interface
	// Volumes predicts the volume blockers; nil: volumes are not predicted (a note says so).
	Volumes VolumePredictor
	// EvictUnmanagedPods is the coordinator's setting of the same name: false makes every pod
	// no controller manages a blocker (the drain would refuse to evict it).
	EvictUnmanagedPods bool
	// VMs predicts which VMs could not be moved (KubeVirt); nil: VMs are pods like any other.
	VMs VMPredictor
	// Extra adds the maintenance policy's blockers; nil: none.
	Extra ExtraFunc
	// Now is the clock of Prediction.At; nil: time.Now.
	Now func() time.Time
	// Decommission predicts a decommission (agent request decommission): the node's replicas
	// evicted whatever the volume policy, its node-local PVCs judged by their annotation.
	Decommission bool
}

// Validate reports a configuration Predict cannot work with, as an error matching
// ErrInvalidConfig.
func (c Config) Validate() error {
	if c.Client == nil {
		return fmt.Errorf("%w: a Kubernetes client is required", ErrInvalidConfig)
	}
	return nil
}

// Prediction is what would block a drain of Node if it started At.
type Prediction struct {
	// Node is the node asked about.
	Node string `json:"Node"`
	// Clear is true when nothing would block.
	Clear bool `json:"Clear"`
	// Blockers are what would block, sorted by kind, namespace and name, at most
	// nodedrain.MaxBlockers.
	Blockers []nodedrain.Blocker `json:"Blockers"`
	// Notes say what would happen without blocking (drainer Jobs that would run, pods that go
	// one at a time) and what was not looked at.
	Notes []string `json:"Notes"`
	// At is when the prediction was made.
	At time.Time `json:"At"`
}

// Predict says what would block a drain of node if it started now, reading the cluster as it is
// and changing nothing. A node the API does not know is an error matching ErrNodeNotFound.
func Predict(ctx context.Context, cfg Config, node string) (Prediction, error) {
	if err := cfg.Validate(); err != nil {
		return Prediction{}, err
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	p := Prediction{Node: node, Blockers: []nodedrain.Blocker{}, Notes: []string{}, At: now()}
	n, err := cfg.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Prediction{}, fmt.Errorf("node %s: %w", node, ErrNodeNotFound)
	}
	if err != nil {
		return Prediction{}, fmt.Errorf("get node %s: %w", node, err)
	}
	if n.Spec.Unschedulable {
		p.Notes = append(p.Notes, "the node is already cordoned")
	}

	pods, notes, err := podBlockers(ctx, cfg.Client, node, cfg.EvictUnmanagedPods, cfg.VMs)
	if err != nil {
		return Prediction{}, err
	}
	p.Blockers, p.Notes = append(p.Blockers, pods...), append(p.Notes, notes...)

	if cfg.Volumes == nil {
		p.Notes = append(p.Notes, "volumes were not checked")
	} else {
		v, err := cfg.Volumes.PredictFor(ctx, node, coordinator.GateOptions{Decommission: cfg.Decommission})
		if err != nil {
			return Prediction{}, fmt.Errorf("predict the volumes of node %s: %w", node, err)
		}
		p.Blockers, p.Notes = append(p.Blockers, v.Blockers...), append(p.Notes, v.Notes...)
	}

	if cfg.Extra != nil {
		extra, err := cfg.Extra(ctx, node)
		if err != nil {
			return Prediction{}, fmt.Errorf("policy blockers of node %s: %w", node, err)
		}
		p.Blockers = append(p.Blockers, extra...)
	}

	sortBlockers(p.Blockers)
	if extra := len(p.Blockers) - nodedrain.MaxBlockers; extra > 0 {
		p.Blockers = p.Blockers[:nodedrain.MaxBlockers]
		p.Notes = append(p.Notes, fmt.Sprintf("%d more blockers not listed", extra))
	}
	p.Clear = len(p.Blockers) == 0
	return p, nil
}

// sortBlockers orders blockers by kind, namespace, name and reason.
func sortBlockers(bs []nodedrain.Blocker) {
	sort.SliceStable(bs, func(i, j int) bool {
		a, b := bs[i], bs[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Reason < b.Reason
	})
}
