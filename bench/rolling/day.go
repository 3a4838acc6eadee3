package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// day is one measured rolling maintenance on fresh nodes: its own node group, namespace,
// workload, Longhorn volumes, bus, coordinator and agents.
type day struct {
	c         *testenv.Cluster
	p         params
	group, ns string
	names     []string
	machines  []*machine
	storage   *storage
	nats      *pubsub.Embedded
	closers   []func()
}

// newDay creates the nodes, a Deployment of podsPerNode pods per node with a PodDisruptionBudget
// (maxUnavailable 1), and the Longhorn volumes; it returns when every pod runs.
func newDay(ctx context.Context, c *testenv.Cluster, p params, group string) (*day, error) {
	d := &day{c: c, p: p, group: group, ns: group}
	d.closers = append(d.closers, func() { d.deleteWorld(context.Background()) })
	fail := func(err error) (*day, error) { d.cleanup(); return nil, err }
	for i := range p.nodes {
		name := fmt.Sprintf("%s-%d", group, i)
		d.names = append(d.names, name)
		if err := c.CreateNode(ctx, name, map[string]string{testenv.GroupLabel: group}); err != nil {
			return fail(err)
		}
	}
	for _, name := range d.names {
		if err := c.WaitNodeReady(ctx, name, time.Minute); err != nil {
			return fail(err)
		}
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns}}, metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	replicas := int32(p.nodes * p.podsPerNode)
	spec := testenv.DeploymentSpec{Namespace: d.ns, Name: "app", Group: group, Replicas: replicas, TerminationSeconds: int64(p.termination.Seconds())}
	if _, err := c.Client.AppsV1().Deployments(d.ns).Create(ctx, testenv.DeploymentObject(spec), metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "app"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}}}}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(d.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.RunningPods(ctx, d.ns, "app=app")
		return err == nil && len(pods) == int(replicas), nil
	})
	if err != nil {
		return fail(fmt.Errorf("pods of %s not running: %w", group, err))
	}
	d.storage = newStorage(c, group, d.ns, d.names)
	if err := d.storage.create(ctx, d.names); err != nil {
		return fail(err)
	}
	return d, nil
}

// run starts the bus, the volume gate, the coordinator and the agents, asks every agent for a
// reboot at t=0 and returns when every node is idle again (its return gate ended).
func (d *day) run(ctx context.Context) (*result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	js, err := d.startBus()
	if err != nil {
		return nil, err
	}
	if err := d.startCoordinator(js); err != nil {
		return nil, err
	}
	// The agents may only open the buckets the coordinator made; the recorder too.
	var statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		statuses, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true}, nodedrain.StatusCodec{})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("status bucket: %w", err)
	}
	for _, name := range d.names {
		m, err := newMachine(d, name)
		if err != nil {
			return nil, err
		}
		d.machines = append(d.machines, m)
		d.closers = append(d.closers, m.close)
		if err := m.startAgent(); err != nil {
			return nil, err
		}
	}
	for _, m := range d.machines {
		if err := m.waitIdle(ctx); err != nil {
			return nil, fmt.Errorf("agent of %s not idle: %w", m.name, err)
		}
	}
	rec, err := startRecorder(ctx, statuses, d.names)
	if err != nil {
		return nil, err
	}
	// Setup is done: the clock starts with the first request.
	t0 := time.Now()
	for _, m := range d.machines {
		if err := m.requestReboot(ctx); err != nil {
			return nil, fmt.Errorf("reboot request on %s: %w", m.name, err)
		}
	}
	var wg sync.WaitGroup
	lived := make(chan error, len(d.machines))
	for _, m := range d.machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.live(ctx); err != nil && ctx.Err() == nil {
				lived <- fmt.Errorf("node %s: %w", m.name, err)
			}
		}()
	}
	limit := time.Duration(d.p.nodes)*(d.p.reboot+d.p.resync+time.Minute) + 5*time.Minute
	select {
	case <-rec.done:
		err = rec.failure()
	case err = <-lived:
	case <-time.After(limit):
		err = fmt.Errorf("the day did not end within %s; %s", limit, rec.describe())
	}
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return newResult(d, t0, rec), nil
}

func (d *day) startBus() (jetstream.JetStream, error) {
	dir, err := os.MkdirTemp("", "edgedrain-rolling-nats-")
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { _ = os.RemoveAll(dir) })
	if d.nats, err = pubsub.StartEmbedded(pubsub.EmbeddedConfig{StoreDir: dir}); err != nil {
		return nil, err
	}
	d.closers = append(d.closers, d.nats.Shutdown)
	nc, err := pubsub.Connect(pubsub.ConnectOptions{URLs: []string{d.nats.ClientURL()}, Name: "edgedrain-coordinator"})
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, nc.Close)
	return jetstream.New(nc)
}

// startCoordinator runs the volume gate and the engine as cmd/coordinator wires them, with
// their defaults (policy, return gate) and its client rate limits; -volume-recheck sets the
// policy's GateRecheck, as the coordinator's --volume-recheck does.
func (d *day) startCoordinator(js jetstream.JetStream) error {
	rc := rest.CopyConfig(d.c.Admin)
	rc.QPS, rc.Burst = 200, 400
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	vcfg := volumes.DefaultConfig()
	vcfg.Client, vcfg.Dynamic, vcfg.Logger = client, d.c.Dynamic, d.logger("volume-gate")
	gate, err := volumes.New(vcfg)
	if err != nil {
		return err
	}
	gctx, stopGate := context.WithCancel(context.Background())
	d.closers = append(d.closers, stopGate)
	if err := gate.Start(gctx); err != nil {
		return fmt.Errorf("start the volume gate: %w", err)
	}
	cfg := coordinator.DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream, cfg.Gate = client, js, gate
	cfg.NodeSelector, cfg.MaxConcurrentDrains = testenv.GroupLabel+"="+d.group, d.p.concurrency
	cfg.Limits.GateRecheck = d.p.volumeRecheck
	cfg.Logger = d.logger("coordinator")
	engine, err := coordinator.NewEngine(cfg)
	if err != nil {
		return err
	}
	ectx, stopEngine := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := engine.Run(ectx); err != nil {
			d.logger("coordinator").WithError(err).Error("engine stopped")
		}
	}()
	d.closers = append(d.closers, func() { stopEngine(); <-done })
	return nil
}

// cleanup stops everything the day started, newest first, and deletes what it created.
func (d *day) cleanup() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// deleteWorld removes the day's workload, volumes and nodes, so the next day starts quiet.
func (d *day) deleteWorld(ctx context.Context) {
	client := d.c.Client
	zero := int64(0)
	_ = client.AppsV1().Deployments(d.ns).Delete(ctx, "app", metav1.DeleteOptions{})
	_ = client.CoreV1().Pods(d.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_ = client.CoreV1().Namespaces().Delete(ctx, d.ns, metav1.DeleteOptions{})
	if d.storage != nil {
		d.storage.delete(ctx, d.names)
	}
	for _, n := range d.names {
		_ = client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
}
