package volumes

import (
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// DefaultLonghornNamespace is where Longhorn keeps its objects unless told otherwise.
const DefaultLonghornNamespace = "longhorn-system"

// Config configures a Gate. DefaultConfig fills everything but the clients.
type Config struct {
	// Client talks to the Kubernetes API. Required.
	Client kubernetes.Interface
	// Dynamic reads and patches the storage systems' custom resources (Longhorn). Required.
	Dynamic dynamic.Interface
	// Policy says what a volume that is not safe does (default PolicyWait).
	Policy Policy
	// LonghornNamespace is the namespace of Longhorn's objects (non-empty).
	LonghornNamespace string
	// Rules decide about each replicated volume, in order; nil: DefaultRules().
	Rules []Rule
	// Sources are extra storage systems, asked after Longhorn.
	Sources []Source
	// DrainerTimeout bounds one drainer Job run (at least a second): it is the Job's
	// activeDeadlineSeconds (unless the template asks for less), and a Job still there half as
	// long again (at most a minute more) is deleted; either way it counts as a timeout and is
	// retried after the backoff.
	DrainerTimeout time.Duration
	// DrainerBackoff is the wait after a drainer Job's first failure; it doubles after each
	// further failure up to DrainerBackoffMax (both > 0).
	DrainerBackoff, DrainerBackoffMax time.Duration
	// Drainers bounds what drainer templates, which users write, may make the coordinator
	// create, and in which namespaces (DESIGN §10). DefaultDrainerPolicy: nothing privileged,
	// no host access, the namespace's "default" ServiceAccount without an API token, and only in
	// namespaces labelled edgedrain.io/drainers=allowed.
	Drainers DrainerPolicy
	// DeleteDrainedOrphans lets a StatefulSet annotated DeleteDrainedOrphansAnnotation "true"
	// have its drained orphaned PVCs deleted. Off: the annotation is reported once and the PVCs
	// stay (the coordinator then needs no PVC delete permission).
	DeleteDrainedOrphans bool
	// OrphanInterval is how often Run looks for orphaned PVCs besides reacting to changes (> 0).
	OrphanInterval time.Duration
	// DetachTimeout bounds the wait, after eviction, for the volumes attached to the node to
	// detach (VolumeAttachments naming it, Longhorn volumes attached there) before COMPLETE;
	// after it they are only reported. 0: no limit. Volumes of pods the drain leaves (DaemonSet,
	// static pods) are not waited for.
	DetachTimeout time.Duration
	// HoldReplicas, under PolicyWait, raises Longhorn's replica-replenishment-wait-interval and
	// the staleReplicaTimeout of the node's volumes, before COMPLETE, to the node's expected
	// time away, and restores them once its replicas have caught up (longhorn_hold.go): an
	// operation longer than Longhorn waits then costs a catch-up instead of a full rebuild of
	// every volume the node holds. The price: while a node is away, a replica that fails
	// elsewhere is also rebuilt only after the raised wait.
	HoldReplicas bool
	// ExpectedAway is how long a node is expected to be away for its operation (reboot, OS
	// update); a hold lasts the longer of it and 1.5 times the node's last measured time
	// away, plus holdMargin (> 0).
	ExpectedAway time.Duration
	// SyncTimeout bounds Start's wait for the caches to fill (> 0).
	SyncTimeout time.Duration
	// WriteTimeout bounds each API write the gate makes (Job creation, labels, Longhorn
	// eviction requests), and the fresh reads Release makes before its writes (> 0).
	WriteTimeout time.Duration
	// Logger receives structured logs (fields node, volume, pvc); nil: discarded.
	Logger logrus.FieldLogger
	// Recorder records Kubernetes Events on PVCs, StatefulSets and Nodes; nil: none.
	Recorder record.EventRecorder
	// Metrics receives the gate's metrics; nil: NewMetrics(nil) (not exported).
	Metrics *Metrics
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults: PolicyWait, Longhorn in longhorn-system, drainer Jobs
// bounded by 30 minutes and retried after 30 s doubling to 10 minutes under
// DefaultDrainerPolicy, orphans looked for every minute (and never deleted), caches given 2
// minutes to sync, attached volumes waited for 5 minutes after eviction.
func DefaultConfig() Config {
	return Config{
		Policy:            PolicyWait,
		LonghornNamespace: DefaultLonghornNamespace,
		DrainerTimeout:    30 * time.Minute,
		DrainerBackoff:    30 * time.Second,
		DrainerBackoffMax: 10 * time.Minute,
		Drainers:          DefaultDrainerPolicy(),
		OrphanInterval:    time.Minute,
		SyncTimeout:       2 * time.Minute,
		WriteTimeout:      10 * time.Second,
		DetachTimeout:     detachTimeoutDefault,
		ExpectedAway:      15 * time.Minute,
	}
}

// Validate reports a configuration the gate cannot run with, as one error matching
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	if c.Dynamic == nil {
		errs = append(errs, errors.New("a dynamic client is required"))
	}
	if err := c.ValidateSettings(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// ValidateSettings checks everything but the clients (what flags set).
func (c Config) ValidateSettings() error {
	var errs []error
	if !c.Policy.Valid() {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidPolicy, c.Policy))
	}
	if c.LonghornNamespace == "" {
		errs = append(errs, errors.New("the Longhorn namespace must not be empty"))
	}
	if c.DetachTimeout < 0 {
		errs = append(errs, fmt.Errorf("detach timeout must not be negative, got %s", c.DetachTimeout))
	}
	if c.DrainerTimeout < time.Second {
		errs = append(errs, fmt.Errorf("drainer timeout must be at least 1s, got %s", c.DrainerTimeout))
	}
	if c.DrainerBackoff <= 0 || c.DrainerBackoffMax < c.DrainerBackoff {
		errs = append(errs, fmt.Errorf("drainer backoff (%s) must be positive and at most its maximum (%s)", c.DrainerBackoff, c.DrainerBackoffMax))
	}
	if err := c.Drainers.validate(); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{"orphan interval": c.OrphanInterval, "sync timeout": c.SyncTimeout, "write timeout": c.WriteTimeout,
		"expected time away": c.ExpectedAway} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	for i, r := range c.Rules {
		if r.Apply == nil {
			errs = append(errs, fmt.Errorf("rule %d (%q) has no Apply function", i, r.Name))
		}
	}
	for i, s := range c.Sources {
		if s == nil {
			errs = append(errs, fmt.Errorf("source %d is nil", i))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}
