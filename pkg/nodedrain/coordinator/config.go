package coordinator

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Config configures an Engine. DefaultConfig fills everything but the clients.
type Config struct {
	// Client talks to the Kubernetes API. Required. Give it a generous rate limit: client-go's
	// default (QPS 5) makes a 100-pod eviction take many seconds.
	Client kubernetes.Interface
	// JetStream is the bus. Required.
	JetStream jetstream.JetStream
	// Signer signs every status the coordinator publishes (DESIGN §10). Required.
	Signer *nodedrain.Signer
	// TrustedKeys returns the keys the agents trust; it must hold the Signer's. The coordinator
	// resumes only from statuses signed by one of them, and repairs any other value under a
	// node's status key. Required.
	TrustedKeys func() nodedrain.KeySet
	// Gate is the volume gate; nil allows every node (AllowAll).
	Gate VolumeGate
	// Limits holds the retry limits and delays of one drain.
	Limits nodedrain.Limits
	// NodeSelector limits the nodes the coordinator manages (drains, cordons) to those matching
	// this label selector; empty: every node of the cluster.
	NodeSelector string
	// ClusterSelector is the nodes that make up the cluster (empty: every node): admission counts
	// the Ready, schedulable ones as places the workloads of a drained node can move to, managed
	// or not, and a whole-cluster shutdown needs every one of them asking or down. Set it to the
	// NodeSelector only when the selected nodes form a cluster of their own (nothing moves
	// between them and the others).
	ClusterSelector string
	// MaxConcurrentDrains is how many nodes may be in maintenance at once, cluster-wide (≥ 1).
	MaxConcurrentDrains int
	// APIUnreachableTimeout is how long the Kubernetes API may be unreachable before a drain
	// under way is let through to COMPLETE (only if its volumes were safe). Zero disables it.
	APIUnreachableTimeout time.Duration
	// InformerRelist bounds how long after the API answers again, or a term begins, the
	// informers may still be listing again: the API-unreachable rule does not decide on their view
	// meanwhile (Core.APIAnswered). Zero: a minute (client-go's longest relist wait); negative:
	// never (for tests that cut the API right after start).
	InformerRelist time.Duration
	// Started is when the process started its informers (before the volume gate's and the
	// policy's starts, which may wait through an outage); zero: when the Engine is made.
	// Core.TermBegins.
	Started time.Time
	// EvictRetryDelay is the wait before asking again to evict a pod whose eviction was refused
	// (by a PodDisruptionBudget or a webhook) within one attempt (> 0).
	EvictRetryDelay time.Duration
	// EvictUnmanagedPods also evicts pods no controller manages; they would die with the node.
	EvictUnmanagedPods bool
	// EvictionRequests says whether each pod to evict first gets an EvictionRequest
	// (lifecycle.k8s.io/v1alpha1), whose responders the eviction waits for (evictionrequest.go):
	// EvictionRequestsAuto (when the cluster serves the API; empty means it), EvictionRequestsOn
	// (required: its absence is reported, and pods are evicted as without it), EvictionRequestsOff.
	EvictionRequests string
	// Explainer says why a refused eviction is refused where the refusal alone does not (a VM
	// KubeVirt is live-migrating, or one that cannot migrate: pkg/vms), and may act on it; nil:
	// the refusal's own message (a PodDisruptionBudget is named).
	Explainer EvictionExplainer
	// ProgressEvery bounds how often eviction progress is published (> 0).
	ProgressEvery time.Duration
	// BucketReplicas is the replica count of the bus buckets (1 embedded, 3 on a NATS cluster).
	BucketReplicas int
	// Identity names this replica in the term record it writes on the bus when it becomes active
	// (nodedrain.Term); empty: "edgedrain-coordinator".
	Identity string
	// Metrics receives the coordinator's metrics; nil: NewMetrics(nil) (not exported).
	Metrics *Metrics
	// Maintenance is the maintenance policy (windows, blockers, pre-flight, order); nil: none.
	Maintenance Maintenance
	// StaleHolderTimeout is how long a COMPLETE node may be NotReady before its admission slot
	// is released (see Core.SetStaleHolderTimeout); zero: never.
	StaleHolderTimeout time.Duration
	// NodeConditions keeps each node's maintenance state as the Node condition
	// EdgedrainMaintenance (NodeConditionType), for kubectl describe node and other tools.
	NodeConditions bool
	// LifecycleConditions writes Kubernetes' node lifecycle conditions (MaintenancePlanned,
	// MaintenanceInProgress, DrainInProgress, Drained; see lifecycle.go) beside it, and keeps
	// a node another writer has in maintenance by those conditions out of admission.
	LifecycleConditions bool
	// AllowDecommission lets decommission requests (nodedrain.DeclaresDecommission) be admitted;
	// false: they wait in REQUESTED, saying so. Off by default, like the deletes it needs.
	AllowDecommission bool
	// Recorder records a Kubernetes Event on the Node for each transition; nil: none.
	Recorder record.EventRecorder
	// Logger receives structured logs (fields node, status, attempt, request).
	Logger logrus.FieldLogger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// DefaultConfig returns DESIGN's defaults: one drain at a time, the default policy, 5 minutes
// of API unreachability before a safe drain proceeds.
func DefaultConfig() Config {
	return Config{
		Limits:                nodedrain.DefaultLimits(),
		MaxConcurrentDrains:   1,
		APIUnreachableTimeout: 5 * time.Minute,
		EvictRetryDelay:       time.Second,
		EvictUnmanagedPods:    true,
		EvictionRequests:      EvictionRequestsAuto,
		ProgressEvery:         500 * time.Millisecond,
		BucketReplicas:        1,
		NodeConditions:        true,
		LifecycleConditions:   true,
		StaleHolderTimeout:    30 * time.Minute,
	}
}

// Validate reports a configuration the engine cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	if c.JetStream == nil {
		errs = append(errs, errors.New("a JetStream context is required"))
	}
	switch {
	case c.Signer == nil:
		errs = append(errs, errors.New("a signing key is required: agents take only signed statuses"))
	case c.TrustedKeys == nil:
		errs = append(errs, errors.New("the trusted keys are required"))
	case !c.TrustedKeys().Has(c.Signer.KeyID()):
		errs = append(errs, fmt.Errorf("the signing key %s is not among the trusted keys (%v): agents would refuse every status "+
			"it signs; add its public key to the trusted keys (docs/status-signing.md)", c.Signer.KeyID(), c.TrustedKeys().IDs()))
	}
	return errors.Join(append(errs, c.ValidateSettings())...)
}

// ValidateSettings checks everything but the clients (what flags set).
func (c Config) ValidateSettings() error {
	var errs []error
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := labels.Parse(c.NodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("node selector %q: %w", c.NodeSelector, err))
	}
	if _, err := labels.Parse(c.ClusterSelector); err != nil {
		errs = append(errs, fmt.Errorf("cluster node selector %q: %w", c.ClusterSelector, err))
	}
	if c.MaxConcurrentDrains < 1 {
		errs = append(errs, fmt.Errorf("max concurrent drains must be at least 1, got %d", c.MaxConcurrentDrains))
	}
	if c.APIUnreachableTimeout < 0 {
		errs = append(errs, fmt.Errorf("API unreachable timeout must not be negative, got %s", c.APIUnreachableTimeout))
	}
	if c.EvictRetryDelay <= 0 || c.ProgressEvery <= 0 {
		errs = append(errs, fmt.Errorf("evict retry delay (%s) and progress interval (%s) must be positive", c.EvictRetryDelay, c.ProgressEvery))
	}
	switch c.EvictionRequests {
	case "", EvictionRequestsAuto, EvictionRequestsOn, EvictionRequestsOff:
	default:
		errs = append(errs, fmt.Errorf("eviction requests %q: want auto, on or off", c.EvictionRequests))
	}
	if c.BucketReplicas < 1 || c.BucketReplicas > 5 {
		errs = append(errs, fmt.Errorf("bucket replicas must be 1..5, got %d", c.BucketReplicas))
	}
	return errors.Join(errs...)
}
