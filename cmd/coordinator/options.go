package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
	"github.com/edgedrain/edgedrain/pkg/vms"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// options are the coordinator's flags.
type options struct {
	kubeconfig         string
	qps                float64
	burst              int
	nats               cli.NATSFlags
	natsEmbedded       bool
	natsListen         string
	natsStoreDir       string
	natsServer         pubsub.EmbeddedConfig // with --nats-embedded: the listener's TLS files
	auth               authOptions
	policy             policyOptions
	cfg                coordinator.Config
	volumes            volumes.Config
	leaderElect        bool
	leaderNamespace    string
	leaderName         string
	identity           string
	listen             string
	busCheck           time.Duration
	logFormat          string
	logLevel           string
	maxConcurrent      int
	unreachableTimeout time.Duration
	nonMigratable      string
	signingKey         string
	trustedKeys        string
}

func registerFlags(fs *pflag.FlagSet) *options {
	o := &options{cfg: coordinator.DefaultConfig(), volumes: volumes.DefaultConfig()}
	p := &o.cfg.Limits
	host, _ := os.Hostname()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration, else $KUBECONFIG or ~/.kube/config")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "Kubernetes client request rate limit (client-go's default of 5 makes evictions crawl)")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "Kubernetes client burst")
	o.nats.Register(fs)
	fs.BoolVar(&o.natsEmbedded, "nats-embedded", false, "run a NATS server with JetStream in this process (single replica; ignores --nats-url)")
	fs.StringVar(&o.natsListen, "nats-listen", "0.0.0.0:4222", "with --nats-embedded: host:port the agents connect to")
	fs.StringVar(&o.natsStoreDir, "nats-store-dir", "/var/lib/edgedrain/nats", "with --nats-embedded: JetStream file store (keep it on a volume)")
	registerEmbeddedTLSFlags(fs, &o.natsServer)
	registerAuthFlags(fs, &o.auth)
	fs.StringVar(&o.signingKey, "signing-key", "", "PEM file of the Ed25519 private key every status is signed with (required; the Secret edgedrain-signing-key, docs/status-signing.md): agents act on no status that does not verify")
	fs.StringVar(&o.trustedKeys, "trusted-keys", "", "PEM public keys the agents trust, a file or a directory of *.pem (required; the ConfigMap edgedrain-trusted-keys): the signing key must be among them; the coordinator resumes only from statuses they verify and repairs any other value under a node's status key")
	fs.BoolVar(&o.cfg.NodeConditions, "node-condition", o.cfg.NodeConditions, "keep each node's maintenance state as the Node condition EdgedrainMaintenance (reason: the status, message: its message; removed when idle), for kubectl describe node; needs nodes/status patch")
	fs.BoolVar(&o.cfg.LifecycleConditions, "node-lifecycle-conditions", o.cfg.LifecycleConditions, "write Kubernetes' node lifecycle conditions (MaintenancePlanned while a request waits, MaintenanceInProgress until the node is back, DrainInProgress, Drained at COMPLETE; reasons Edgedrain*), and do not take a node whose MaintenancePlanned or MaintenanceInProgress another writer set (it waits, saying so; another's maintenance in progress takes a slot); needs nodes/status patch")
	fs.IntVar(&o.cfg.BucketReplicas, "bucket-replicas", o.cfg.BucketReplicas, "replicas of the bus buckets: 1 embedded, 3 on a NATS cluster")
	fs.IntVar(&o.maxConcurrent, "max-concurrent-drains", o.cfg.MaxConcurrentDrains, "nodes in maintenance at once, cluster-wide; the rest wait in REQUESTED, oldest first")
	fs.StringVar(&o.cfg.NodeSelector, "node-selector", "", "label selector of the nodes this coordinator manages (drains, cordons); empty: all. The others still count as places workloads can move to")
	fs.StringVar(&o.cfg.ClusterSelector, "cluster-node-selector", "", "label selector of the nodes that make up the cluster: admission counts their Ready, schedulable ones as places a drained node's workloads can move to, and a whole-cluster shutdown needs every one of them asking or down; empty: every node. Set it like --node-selector only when the selected nodes form a cluster of their own")
	fs.IntVar(&p.CordonAttempts, "cordon-attempts", p.CordonAttempts, "cordon attempts before FAILEDCORDON")
	fs.DurationVar(&p.CordonBackoff, "cordon-backoff", p.CordonBackoff, "wait after the first failed cordon; doubles each time")
	fs.DurationVar(&p.CordonBackoffMax, "cordon-backoff-max", p.CordonBackoffMax, "longest wait between cordon attempts")
	fs.IntVar(&p.DrainAttempts, "drain-attempts", p.DrainAttempts, "eviction attempts before FAILEDDRAIN")
	fs.DurationVar(&p.DrainAttemptTimeout, "drain-attempt-timeout", p.DrainAttemptTimeout, "longest one eviction attempt may take")
	fs.DurationVar(&p.DrainBackoff, "drain-backoff", p.DrainBackoff, "wait after the first failed eviction attempt (DRAINRETRYING); doubles each time")
	fs.DurationVar(&p.DrainBackoffMax, "drain-backoff-max", p.DrainBackoffMax, "longest wait between eviction attempts")
	fs.DurationVar(&p.GateRecheck, "volume-recheck", p.GateRecheck, "how often a blocking volume gate (and the return gate) is asked again: the safety net behind --volume-react")
	fs.DurationVar(&p.GateReact, "volume-react", p.GateReact, "how soon a blocking volume gate (and the return gate) is asked again after a Longhorn object, VolumeAttachment, pod or node it depends on changes; changes within it are taken together, and it is never sooner than the last check took (at most --volume-recheck)")
	fs.DurationVar(&o.cfg.EvictRetryDelay, "evict-retry-delay", o.cfg.EvictRetryDelay, "within an attempt, wait before asking again to evict a pod that was refused (PodDisruptionBudget, webhook)")
	fs.StringVar(&o.nonMigratable, "non-migratable-vms", "block", "what to do with a KubeVirt VM whose eviction KubeVirt refuses because it cannot live-migrate (eviction strategy LiveMigrate): block (the drain waits, naming the VM and why), or restart (stop it when its VirtualMachine's runStrategy is Always, so KubeVirt starts it on another node)")
	fs.BoolVar(&o.cfg.EvictUnmanagedPods, "evict-unmanaged-pods", o.cfg.EvictUnmanagedPods, "also evict pods no controller manages (they die with the node anyway); false: such pods fail the drain")
	fs.StringVar(&o.cfg.EvictionRequests, "eviction-requests", o.cfg.EvictionRequests, "file an EvictionRequest (lifecycle.k8s.io/v1alpha1, Kubernetes' alpha EvictionRequestAPI) for each pod before evicting it, and hold the eviction while the pod's Eviction shows a responder of its own (not Kubernetes' imperative evictor) Active: auto (when the cluster serves the API), on (required: a cluster without it is reported in the log and the blockers, and pods are evicted as without it), off. Kubernetes v1.37 has no controller acting on EvictionRequests: edgedrain still evicts each pod itself once no responder is active; needs lifecycle.k8s.io evictionrequests and evictions RBAC")
	fs.DurationVar(&o.unreachableTimeout, "api-unreachable-timeout", o.cfg.APIUnreachableTimeout, "after the Kubernetes API has been unreachable this long, a drain under way (cordoned before the API went away) proceeds to COMPLETE if its volumes were safe; no drain is admitted while the API is unreachable (0: never)")
	fs.Var(cli.GoValue(&o.volumes.Policy, "policy"), "volume-policy", "what a volume whose data is not yet safe elsewhere does: wait (block the drain until it is), evict (ask Longhorn to move the node's replicas, then wait), allow (never block; still reported)")
	fs.StringVar(&o.volumes.LonghornNamespace, "longhorn-namespace", o.volumes.LonghornNamespace, "namespace of Longhorn's volumes, replicas, engines and nodes")
	fs.DurationVar(&o.volumes.DetachTimeout, "detach-timeout", o.volumes.DetachTimeout, "after eviction, how long COMPLETE waits for the volumes attached to the node (VolumeAttachments, Longhorn volumes) to detach; then they are only reported (0: no limit). An unclean detach at reboot fails Longhorn replicas and forces full rebuilds")
	fs.BoolVar(&o.volumes.HoldReplicas, "longhorn-hold-replicas", o.volumes.HoldReplicas, "under --volume-policy wait, before COMPLETE raise Longhorn's replica-replenishment-wait-interval and the node's volumes' staleReplicaTimeout to the node's expected time away (--expected-away), and restore the operator's values once its replicas have caught up: a maintenance longer than Longhorn waits costs a catch-up instead of a full rebuild of every volume there. While raised, a replica failing elsewhere is also rebuilt only after the longer wait. Needs patch on Longhorn settings and volumes")
	fs.DurationVar(&o.volumes.ExpectedAway, "expected-away", o.volumes.ExpectedAway, "how long a node is expected to be away for its operation (reboot, OS update); with --longhorn-hold-replicas the hold lasts the longer of this and 1.5 times the node's last measured time away, plus 5m")
	fs.DurationVar(&o.volumes.DrainerTimeout, "drainer-timeout", o.volumes.DrainerTimeout, "longest a drainer Job (node-local volumes) may run before it counts as failed")
	fs.DurationVar(&o.volumes.DrainerBackoff, "drainer-backoff", o.volumes.DrainerBackoff, "wait after a drainer Job's first failure; doubles each time")
	fs.DurationVar(&o.volumes.DrainerBackoffMax, "drainer-backoff-max", o.volumes.DrainerBackoffMax, "longest wait between drainer Job runs")
	fs.DurationVar(&o.volumes.OrphanInterval, "orphan-interval", o.volumes.OrphanInterval, "how often PVCs left by scaled-down StatefulSets are looked for (besides reacting to changes)")
	fs.DurationVar(&o.volumes.SyncTimeout, "volume-sync-timeout", o.volumes.SyncTimeout, "longest the volume gate's caches may take to fill at start")
	registerDrainerFlags(fs, &o.volumes)
	registerPolicyFlags(fs, &o.policy, &o.cfg)
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica with a coordination.k8s.io Lease")
	fs.StringVar(&o.leaderNamespace, "leader-election-namespace", envOr("POD_NAMESPACE", "edgedrain-system"), "namespace of the Lease")
	fs.StringVar(&o.leaderName, "leader-election-name", "edgedrain-coordinator", "name of the Lease")
	fs.StringVar(&o.identity, "identity", envOr("POD_NAME", host), "this replica's name in the Lease")
	fs.DurationVar(&o.busCheck, "bus-check-interval", cli.DefaultBusCheckInterval, "how often the bus's buckets are asked whether they answer (metric edgedrain_coordinator_bus_available, /readyz): on a NATS cluster without a quorum of its servers the connection stays up but every write is refused")
	fs.StringVar(&o.listen, "listen", ":9090", "host:port serving /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: error, warn, info, debug")
	// Defaults that depend on where the coordinator runs, as the reference pages show them.
	cli.DocDefault(fs, "identity", "${POD_NAME:-<host name>}")
	cli.DocDefault(fs, "leader-election-namespace", "${POD_NAMESPACE:-edgedrain-system}")
	cli.DocDefault(fs, "agent-service-account", "${POD_NAMESPACE:-edgedrain-system}/edgedrain-agent")
	cli.DocDefault(fs, "policy-configmap", "${POD_NAMESPACE:-edgedrain-system}/edgedrain-policy")
	cli.BindEnv(fs)
	return o
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// validate checks what the flags alone can tell; the engine's Config.Validate checks the rest.
func (o *options) validate() error {
	o.cfg.MaxConcurrentDrains = o.maxConcurrent
	o.cfg.APIUnreachableTimeout = o.unreachableTimeout
	var errs []error
	if o.qps <= 0 || o.burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive"))
	}
	if o.busCheck <= 0 {
		errs = append(errs, fmt.Errorf("--bus-check-interval %s: must be positive", o.busCheck))
	}
	if o.natsEmbedded {
		if o.natsStoreDir == "" {
			errs = append(errs, errors.New("--nats-embedded needs --nats-store-dir"))
		}
		if _, _, err := cli.SplitHostPort(o.natsListen); err != nil {
			errs = append(errs, fmt.Errorf("--nats-listen: %w", err))
		}
	} else if err := o.nats.Options("edgedrain-coordinator").Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, validateEmbeddedTLS(o.natsEmbedded, o.natsServer), o.auth.validate(o.natsEmbedded), o.policy.validate())
	if _, err := vms.ParseNonMigratable(o.nonMigratable); err != nil {
		errs = append(errs, fmt.Errorf("--non-migratable-vms: %w", err))
	}
	if o.leaderElect && (o.leaderNamespace == "" || o.leaderName == "" || o.identity == "") {
		errs = append(errs, errors.New("--leader-elect needs --leader-election-namespace, --leader-election-name and --identity"))
	}
	return errors.Join(append(errs, o.cfg.ValidateSettings(), o.volumes.ValidateSettings())...)
}
