package volumes_test

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// The coordinator builds the gate once, starts its caches, hands it to the engine as its
// Gate, and runs the orphaned-PVC loop while it is the leader.
func Example() {
	var (
		ctx    = context.Background()
		client kubernetes.Interface // the coordinator's clientset
		dyn    dynamic.Interface    // dynamic.NewForConfig of the same rest.Config
		reg    = prometheus.NewRegistry()
		log    = logrus.New()
		signer *nodedrain.Signer // cli.LoadSigningKey(--signing-key)
		keys   func() nodedrain.KeySet
	)
	cfg := volumes.DefaultConfig()
	cfg.Client, cfg.Dynamic, cfg.Logger = client, dyn, log
	cfg.Policy = volumes.PolicyWait // --volume-policy, parsed by volumes.ParsePolicy
	cfg.DrainerTimeout = 30 * time.Minute
	// Drainer Jobs only in "shop" and in namespaces labelled edgedrain.io/drainers=allowed;
	// nothing privileged, no host access, the namespace's "default" ServiceAccount, no token.
	cfg.Drainers.Namespaces = []string{"shop"}
	cfg.Metrics = volumes.NewMetrics(reg)
	gate, err := volumes.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := gate.Start(ctx); err != nil { // informers; bounded by cfg.SyncTimeout
		log.Fatal(err)
	}
	ccfg := coordinator.DefaultConfig()
	ccfg.Gate = gate // the engine calls Check, and Release when a drain is over
	// Statuses are signed with signer; the agents trust keys().
	ccfg.Signer, ccfg.TrustedKeys = signer, keys
	_ = coordinator.RunWithLeaderElection(ctx, coordinator.DefaultLeaderConfig(), func(ctx context.Context) error {
		go func() { _ = gate.Run(ctx) }() // orphaned PVCs, only on the leader
		engine, err := coordinator.NewEngine(ccfg)
		if err != nil {
			return err
		}
		return engine.Run(ctx)
	})
}
