package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/policy"
	"github.com/edgedrain/edgedrain/pkg/preflight"
	"github.com/edgedrain/edgedrain/pkg/vms"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// policyOptions are the maintenance policy's flags (DESIGN §9); the policy itself (windows,
// blockers, order) lives in a ConfigMap the coordinator watches.
type policyOptions struct {
	configMap string
	preflight string
	recheck   time.Duration
}

var _ coordinator.GateReturner = (*volumes.Gate)(nil)

func registerPolicyFlags(fs *pflag.FlagSet, o *policyOptions, cfg *coordinator.Config) {
	fs.StringVar(&o.configMap, "policy-configmap", envOr("POD_NAMESPACE", "edgedrain-system")+"/edgedrain-policy",
		"namespace/name of the ConfigMap holding the maintenance policy (key policy.yaml: windows per requester, blocking pod selector, "+
			"Prometheus alerts and queries, priorities, failure-domain label), watched: changes apply without a restart. "+
			"A missing ConfigMap restricts nothing; an invalid one keeps the last valid policy (or, if none was ever valid, holds every admission). Empty: no policy")
	fs.StringVar(&o.preflight, "preflight", "warn",
		"before cordoning, predict what would block the drain (PodDisruptionBudgets allowing 0 disruptions, unmanaged pods, volumes whose last copy is on the node, drainer Jobs): "+
			"warn publishes the prediction with REQUESTED and starts anyway; hold keeps the drain REQUESTED until the prediction is clear; off predicts nothing")
	fs.DurationVar(&o.recheck, "policy-recheck", 5*time.Second,
		"how often the blockers and the prediction of waiting drains are checked again; a drain is admitted on a check at most 3 times this old")
	fs.DurationVar(&cfg.Limits.ReturnTimeout, "return-gate-timeout", cfg.Limits.ReturnTimeout,
		"after a node's operation, hold its admission slot until it is Ready, its Longhorn replicas are healthy and its pods are Ready, at most this long "+
			"(then release it with a warning Event and edgedrain_return_gate_seconds{result=\"timeout\"}); 0: release at once")
	fs.BoolVar(&cfg.AllowDecommission, "allow-decommission", cfg.AllowDecommission,
		"admit decommission requests (agent request decommission): drain the node for good, evict its Longhorn replicas, delete its node-local PVCs "+
			"annotated edgedrain.io/decommission and its Node object (needs the RBAC of deploy/components/decommission); false: they wait in REQUESTED, saying so")
	fs.DurationVar(&cfg.Limits.DecommissionLinger, "decommission-linger", cfg.Limits.DecommissionLinger,
		"remove a decommissioned node's request and status from the bus this long after the request's withdrawal (answered NOTREQUESTED meanwhile, "+
			"so that an agent that did not withdraw it learns it was), or after its COMPLETE if nobody withdraws it (its machine powered off); "+
			"0: at the withdrawal, and never without one")
	fs.DurationVar(&cfg.StaleHolderTimeout, "stale-holder-timeout", cfg.StaleHolderTimeout,
		"a COMPLETE node NotReady this long (or whose Node object is gone for a minute) releases its admission slot, with the reason in its status and an Event; 0: never")
}

func (o *policyOptions) validate() error {
	if _, err := coordinator.ParsePreflight(o.preflight); err != nil {
		return fmt.Errorf("--preflight: %w", err)
	}
	if o.recheck <= 0 {
		return fmt.Errorf("--policy-recheck must be positive, got %s", o.recheck)
	}
	if o.configMap != "" {
		if ns, name, ok := strings.Cut(o.configMap, "/"); !ok || ns == "" || name == "" {
			return fmt.Errorf("--policy-configmap %q: want namespace/name", o.configMap)
		}
	}
	return nil
}

// startPolicy starts the policy's ConfigMap watch and its evaluator (both run until ctx ends)
// and returns the evaluator for the engine.
func startPolicy(ctx context.Context, o *options, client kubernetes.Interface, gate *volumes.Gate, vmsReader *vms.KubeVirt,
	reg prometheus.Registerer, recorder record.EventRecorder, log logrus.FieldLogger) (*policy.Evaluator, error) {
	mode, _ := coordinator.ParsePreflight(o.policy.preflight)
	ecfg := policy.EvaluatorConfig{Client: client, Preflight: mode, Every: o.policy.recheck, Logger: log.WithField("component", "policy")}
	if o.policy.configMap != "" {
		ns, name, _ := strings.Cut(o.policy.configMap, "/")
		src, err := policy.NewSource(policy.SourceConfig{Client: client, Namespace: ns, Name: name, Registerer: reg, Recorder: recorder,
			Logger: log.WithField("component", "policy")})
		if err != nil {
			return nil, err
		}
		go func() { _ = src.Run(ctx) }()
		ecfg.Source = src
	}
	pcfg := preflight.Config{Client: client, Volumes: gate, VMs: vmsReader, EvictUnmanagedPods: o.cfg.EvictUnmanagedPods}
	ecfg.Predict = func(ctx context.Context, node string, req nodedrain.NodeDrainRequest) ([]nodedrain.Blocker, error) {
		pc := pcfg
		pc.Decommission = nodedrain.DeclaresDecommission(req)
		p, err := preflight.Predict(ctx, pc, node)
		return p.Blockers, err
	}
	ev, err := policy.NewEvaluator(ecfg)
	if err != nil {
		return nil, err
	}
	go func() { _ = ev.Run(ctx) }()
	return ev, nil
}
