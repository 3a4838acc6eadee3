package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

type bench struct {
	c           *testenv.Cluster
	termination time.Duration
	nodes       int
	seq         int
}

// setup is one identical starting point: a group of nodes, the target holding every pod.
type setup struct {
	group, ns, target string
	cleanup           func()
}

// prepare creates fresh nodes and a Deployment of n pods, all on the first node (the others are
// cordoned until the pods run), then uncordons the others so evicted pods can move there.
func (b *bench) prepare(ctx context.Context, n int) (*setup, error) {
	b.seq++
	s := &setup{group: fmt.Sprintf("bench%d", b.seq), ns: fmt.Sprintf("bench%d", b.seq)}
	client := b.c.Client
	var names []string
	for i := range b.nodes {
		name := fmt.Sprintf("%s-%d", s.group, i)
		names = append(names, name)
		if err := b.c.CreateNode(ctx, name, map[string]string{testenv.GroupLabel: s.group}); err != nil {
			return nil, err
		}
		if err := b.c.WaitNodeReady(ctx, name, time.Minute); err != nil {
			return nil, err
		}
	}
	s.target = names[0]
	for _, name := range names[1:] {
		if err := setUnschedulable(ctx, client, name, true); err != nil {
			return nil, err
		}
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	s.cleanup = func() { b.cleanup(s, names) }
	if err := b.createDeployment(ctx, s, int32(n)); err != nil {
		return nil, err
	}
	for _, name := range names[1:] {
		if err := setUnschedulable(ctx, client, name, false); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (b *bench) createDeployment(ctx context.Context, s *setup, n int32) error {
	grace := int64(b.termination.Seconds())
	d := testenv.DeploymentSpec{Namespace: s.ns, Name: "app", Group: s.group, Replicas: n, TerminationSeconds: grace}
	if _, err := b.c.Client.AppsV1().Deployments(s.ns).Create(ctx, testenv.DeploymentObject(d), metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.c.RunningPods(ctx, s.ns, "app=app")
		return err == nil && len(pods) == int(n), nil
	})
}

// cleanup removes everything at once (grace 0) and waits, so the next measurement starts quiet.
func (b *bench) cleanup(s *setup, nodes []string) {
	ctx := context.Background()
	client := b.c.Client
	zero := int64(0)
	_ = client.AppsV1().Deployments(s.ns).Delete(ctx, "app", metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_ = client.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		list, err := client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	_ = client.CoreV1().Namespaces().Delete(ctx, s.ns, metav1.DeleteOptions{})
	for _, n := range nodes {
		_ = client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
}

func setUnschedulable(ctx context.Context, client kubernetes.Interface, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// edgedrain: the coordinator with its production defaults (client QPS 200, burst 400),
// embedded NATS (secured as in production, or open as before bus authentication); timed from
// the request's publication to COMPLETE on the bus.
func (b *bench) edgedrain(ctx context.Context, s *setup, secured bool, start func()) error {
	bus, err := b.openBus(ctx, s, secured, start)
	if err != nil {
		return err
	}
	defer bus.close()
	js := bus.coordinator
	rc := rest.CopyConfig(b.c.Admin)
	rc.QPS, rc.Burst = 200, 400
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	cfg := coordinator.DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream, cfg.NodeSelector = client, js, testenv.GroupLabel+"="+s.group
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel) // the engine's warnings go to stderr
	log.SetOutput(os.Stderr)
	cfg.Logger = log.WithField("secured", secured)
	engine, err := coordinator.NewEngine(cfg)
	if err != nil {
		return err
	}
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = engine.Run(ectx) }()
	statuses, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket}, nodedrain.StatusCodec{})
	if err != nil {
		return err
	}
	// The agent opens the buckets the coordinator made (it may not create them).
	var requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		requests, err = pubsub.OpenBucket(ctx, bus.requester, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, OpenOnly: true}, nodedrain.RequestCodec{})
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	w, err := statuses.Watch(ectx)
	if err != nil {
		return err
	}
	if _, err := requests.Publish(ctx, s.target, nodedrain.NodeDrainRequest{Node: s.target, RequestID: "bench",
		RequestedAt: time.Now(), RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"}); err != nil {
		return err
	}
	for ev := range w.Events() {
		if ev.Kind == pubsub.EventPut && ev.Key == s.target {
			switch ev.Value.Status {
			case nodedrain.StatusComplete:
				return nil
			case nodedrain.StatusFailedCordon, nodedrain.StatusFailedDrain:
				return fmt.Errorf("edgedrain: %s: %s", ev.Value.Status, ev.Value.Message)
			}
		}
	}
	return fmt.Errorf("edgedrain: status watch ended before COMPLETE")
}

// kubectl: `kubectl drain` of the pinned release, as an operator would run it.
func (b *bench) kubectl(ctx context.Context, s *setup) error {
	cmd := exec.CommandContext(ctx, filepath.Join(b.c.BinDir, "kubectl"), "--kubeconfig", b.c.Kubeconfig, "drain", s.target,
		"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--grace-period=-1", "--timeout=30m")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl drain: %w\n%s", err, lastBytes(out, 2000))
	}
	return nil
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// bare: the floor — cordon, evict every pod at once with an unthrottled client, watch until gone.
func (b *bench) bare(ctx context.Context, s *setup) error {
	rc := rest.CopyConfig(b.c.Admin)
	rc.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	informer := cache.NewSharedIndexInformer(
		cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", s.ns, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.target).String()
		}), &corev1.Pod{}, 0, cache.Indexers{})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go informer.RunWithContext(wctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("bare probe: pod watch did not sync")
	}
	if err := setUnschedulable(ctx, client, s.target, true); err != nil {
		return err
	}
	pods := informer.GetStore().List()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, obj := range pods {
		pod := obj.(*corev1.Pod)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("bare probe: evict: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
		return len(informer.GetStore().List()) == 0, nil
	})
}
