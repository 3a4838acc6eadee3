package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
	"github.com/edgedrain/edgedrain/pkg/vms"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

func run(ctx context.Context, o *options) error {
	log, err := cli.NewLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	signer, err := cli.LoadSigningKey(o.signingKey)
	if err != nil {
		return err
	}
	trusted, err := cli.NewTrustedKeys(o.trustedKeys, 0, log)
	if err != nil {
		return err
	}
	if !trusted.Keys().Has(signer.KeyID()) {
		return fmt.Errorf("the signing key %s (--signing-key) is not among the trusted keys %v (--trusted-keys): agents would refuse "+
			"every status it signs; add its public key to the trusted keys first (docs/status-signing.md)", signer.KeyID(), trusted.Keys().IDs())
	}
	log.WithField("key", signer.KeyID()).Info("statuses are signed with this key")
	rc, err := kubeConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(o.qps), o.burst
	// The API server warns on every request to an alpha API (EvictionRequests: one per pod to
	// evict); each distinct warning is logged once.
	rc.WarningHandler = &warnOnce{log: log, seen: map[string]bool{}}
	// The Lease has a client of its own; every other client writes only while this replica
	// holds the Lease (not on standby, not in API-outage mode).
	leaseRC := rest.CopyConfig(rc)
	leaseClient, err := kubernetes.NewForConfig(leaseRC)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	writes := &coordinator.WriteGuard{}
	if o.leaderElect {
		writes.Set(func() bool { return false })
		rc.Wrap(writes.Wrap)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	// Bus authentication reviews tokens outside the write gate: a TokenReview changes nothing,
	// and a standby must answer its share of the callouts.
	authClient, err := kubernetes.NewForConfig(rest.CopyConfig(leaseRC))
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	reg := cli.NewRegistry()
	nc, js, stopBus, err := connectBus(o, authClient, reg, log)
	if err != nil {
		return err
	}
	defer stopBus()
	defer nc.Close()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "edgedrain-coordinator", Host: o.identity})
	started := time.Now() // (the informers list from here: Config.Started)
	gate, err := startVolumeGate(ctx, o, rc, client, reg, recorder, log)
	if err != nil {
		return err
	}
	kubevirt, err := newKubeVirt(o, rc, log)
	if err != nil {
		return err
	}
	maintenance, err := startPolicy(ctx, o, client, gate, kubevirt, reg, recorder, log)
	if err != nil {
		return err
	}
	cfg := o.cfg
	cfg.Client, cfg.JetStream, cfg.Logger, cfg.Gate, cfg.Recorder = client, js, log, gate, recorder
	cfg.Explainer = kubevirt
	cfg.Maintenance = maintenance
	cfg.Identity, cfg.Started = o.identity, started
	cfg.Metrics = coordinator.NewMetrics(reg)
	cfg.Signer, cfg.TrustedKeys = signer, trusted.Keys
	engine, err := coordinator.NewEngine(cfg)
	if err != nil {
		return err
	}
	active := activeTerm(log, engine.Run, gate.Run)

	probe := cli.NewBusProbe(nc, js, reg, cli.CoordinatorBusMetric, log)
	go probe.Run(ctx, o.busCheck)
	ready := probe.Ready
	if o.natsEmbedded {
		// This pod's readiness puts it behind the bus's Service: a slow bucket must not take the
		// only NATS server away from the agents. The probe still sets its gauge and logs.
		ready = cli.NATSReady(nc)
	}
	if err := cli.ServeEndpoints(ctx, o.listen, reg, nil, ready, log); err != nil {
		return err
	}
	// After the endpoints: a replica waiting for the bus is alive (its /healthz answers), not
	// ready, and not restarted by its liveness probe.
	if err := coordinator.WaitTermKey(ctx, js, trusted.Keys, log); err != nil {
		return err
	}

	if !o.leaderElect {
		log.Info("leader election off: this replica is the active coordinator")
		return active(ctx)
	}
	lc := coordinator.DefaultLeaderConfig()
	lc.Client, lc.Namespace, lc.Name, lc.Identity, lc.Logger = leaseClient, o.leaderNamespace, o.leaderName, o.identity, log
	lc.Writes = writes
	// Without the Lease in an API outage, the API-unreachable rule needs outage mode.
	lc.ActThroughAPIOutage = cfg.APIUnreachableTimeout > 0
	return coordinator.RunWithLeaderElection(ctx, lc, active)
}

// connectBus starts the embedded server (refusing whoever busauth refuses) and connects this
// process to it in-process, or connects to the external NATS server and, with an issuer seed,
// answers its auth callouts.
func connectBus(o *options, client kubernetes.Interface, reg prometheus.Registerer, log logrus.FieldLogger) (*nats.Conn, jetstream.JetStream, func(), error) {
	natsOpts := o.nats.Options("edgedrain-coordinator")
	stop := func() {}
	password := ""
	if o.natsEmbedded {
		var err error
		if password, err = busauth.NewPassword(); err != nil {
			return nil, nil, nil, err
		}
	}
	auth, err := o.auth.authenticator(client, reg, log, password)
	if err != nil {
		return nil, nil, nil, err
	}
	if o.natsEmbedded {
		host, port, _ := cli.SplitHostPort(o.natsListen)
		srv, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{Host: host, Port: port, StoreDir: o.natsStoreDir,
			ServerName: "edgedrain-" + o.identity, Logger: log.WithField("component", "nats-server"),
			TLSCertFile: o.natsServer.TLSCertFile, TLSKeyFile: o.natsServer.TLSKeyFile, Authentication: auth})
		if err != nil {
			return nil, nil, nil, err
		}
		stop = srv.Shutdown
		natsOpts = pubsub.ConnectOptions{InProcess: srv.Server(), User: busauth.CoordinatorUser, Password: password, Name: "edgedrain-coordinator"}
		log.WithField("listen", o.natsListen).Info("embedded NATS server with JetStream started for the agents (anonymous clients refused)")
	}
	nc, js, err := cli.ConnectBus(natsOpts, log)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	issuer, err := o.auth.calloutIssuer()
	if err == nil && issuer != nil {
		if _, err = auth.ServeCallout(nc, issuer); err == nil {
			log.Info("answering the NATS server's auth callouts")
		}
	}
	if err != nil {
		nc.Close()
		stop()
		return nil, nil, nil, err
	}
	return nc, js, stop, nil
}

// activeTerm returns what this replica runs while it is the active coordinator (a leadership
// term, or the process's lifetime without leader election): the engine, restarted by
// coordinator.KeepRunning whenever it stops early, and beside it one orphaned-PVC loop for the
// whole term, not one more at each engine restart. It returns once ctx has ended and both have
// returned, so that a term never overlaps the next.
func activeTerm(log logrus.FieldLogger, engine, orphans func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := orphans(ctx); err != nil {
				log.WithError(err).Error("orphaned PVC loop stopped")
			}
		}()
		coordinator.KeepRunning(ctx, log, engine)
		cancel()
		wg.Wait()
		return nil
	}
}

// startVolumeGate starts the volume gate's caches (for the process's lifetime: a standby replica
// keeps them warm for a quick takeover).
func startVolumeGate(ctx context.Context, o *options, rc *rest.Config, client kubernetes.Interface,
	reg prometheus.Registerer, recorder record.EventRecorder, log logrus.FieldLogger) (*volumes.Gate, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	vcfg := o.volumes
	vcfg.Client, vcfg.Dynamic, vcfg.Recorder = client, dyn, recorder
	vcfg.Logger = log.WithField("component", "volume-gate")
	vcfg.Metrics = volumes.NewMetrics(reg)
	gate, err := volumes.New(vcfg)
	if err != nil {
		return nil, err
	}
	if err := gate.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the volume gate: %w", err)
	}
	return gate, nil
}

// newKubeVirt returns the reader of KubeVirt's VMs (it has nothing to say where KubeVirt is not
// installed).
func newKubeVirt(o *options, rc *rest.Config, log logrus.FieldLogger) (*vms.KubeVirt, error) {
	mode, err := vms.ParseNonMigratable(o.nonMigratable)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return vms.New(dyn, mode, log.WithField("component", "vms")), nil
}

// kubeConfig loads the given kubeconfig, or the in-cluster configuration, or the default
// kubeconfig ($KUBECONFIG, ~/.kube/config).
func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration (--kubeconfig, in-cluster, $KUBECONFIG): %w", err)
	}
	return rc, nil
}

// warnOnce logs each distinct warning of the API server once (bounded: past maxWarnings distinct
// ones, the rest are dropped).
type warnOnce struct {
	log  logrus.FieldLogger
	mu   sync.Mutex
	seen map[string]bool
}

const maxWarnings = 100

func (w *warnOnce) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[text] || len(w.seen) >= maxWarnings {
		return
	}
	w.seen[text] = true
	w.log.WithField("warning", text).Warn("the Kubernetes API server warns (each distinct warning is logged once)")
}
