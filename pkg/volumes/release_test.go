package volumes

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	batchv1client "k8s.io/client-go/kubernetes/typed/batch/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// heldAmong returns the nodes Held lists that are among ours (the cluster is shared with other
// tests).
func heldAmong(g *gateFixture, ours ...string) ([]string, error) {
	held, err := g.Held(context.Background())
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, n := range held {
		if slices.Contains(ours, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// eventuallyHeld waits until Held lists exactly want among ours.
func eventuallyHeld(t *testing.T, g *gateFixture, ours, want []string, what string) {
	t.Helper()
	var last []string
	var err error
	require.Eventually(t, func() bool {
		last, err = heldAmong(g, ours...)
		return err == nil && slices.Equal(last, want)
	}, 30*time.Second, 50*time.Millisecond, "%s: held %v (err %v), want %v\nevents:\n%s", what, last, err, want, g.events)
}

func TestHeldListsWhatReleaseUndoes(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "held", 3)
	// No kubelet: its drainer never ends. A fresh name: a namespace of an earlier run (-count)
	// may still hold a PVC pinned to the node.
	local := manualNode(t, c, "manual-held-"+rand.String(5))
	ns := c.Namespace(t)
	ctx := context.Background()
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyEvict })
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-held", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	pvc := createLocalVolume(t, c, ns, "data-0", local, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	ours := append([]string{local}, nodes...)
	held, err := heldAmong(g, ours...)
	require.NoError(t, err)
	assert.Empty(t, held)

	// The evict policy asks Longhorn to move held-0's replicas away; the check after eviction
	// starts the drainer of the local volume on manual-held.
	require.Eventually(t, func() bool {
		_, errX := g.Check(ctx, nodes[0], beforeEviction)
		_, errY := g.Check(ctx, local, afterEviction)
		held, err := heldAmong(g, ours...)
		return errX == nil && errY == nil && err == nil && slices.Equal(held, []string{nodes[0], local})
	}, 30*time.Second, 50*time.Millisecond, "Held lists the eviction request and the drainer; events:\n%s", g.events)

	require.NoError(t, g.Release(ctx, nodes[0]))
	assert.NotContains(t, getLonghornNode(t, c, nodes[0]).GetAnnotations(), LonghornEvictionAnnotation)
	eventuallyHeld(t, g, ours, []string{local}, "the withdrawn request is no longer held")
	require.NoError(t, g.Release(ctx, nodes[0]), "releasing again is a no-op")
	assert.Equal(t, 1, g.events.count("Normal VolumeEvictionWithdrawn Node /"+nodes[0]), g.events)

	require.NoError(t, g.Release(ctx, local))
	require.Eventually(t, func() bool { return jobGone(c, ns, drainerJobName(pvc)) }, 10*time.Second, 50*time.Millisecond, "the drainer is stopped")
	eventuallyHeld(t, g, ours, []string{}, "nothing is held once both are released")

	before := g.events.String()
	for _, node := range []string{nodes[0], local, nodes[2], "no-such-node"} {
		require.NoError(t, g.Release(ctx, node), "releasing %s again, never held, or unknown", node)
	}
	assert.Equal(t, before, g.events.String(), "no Event when nothing changed")

	t.Run("before Start", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Client, cfg.Dynamic = c.Client, c.Dynamic
		g, err := New(cfg)
		require.NoError(t, err)
		require.ErrorIs(t, g.Release(ctx, nodes[0]), ErrNotStarted, "nothing was undone: the caller must retry")
		_, err = g.Held(ctx)
		require.ErrorIs(t, err, ErrNotStarted)
	})
}

// failingJobDeletes is a clientset whose Job deletions fail while fail is set.
type failingJobDeletes struct {
	kubernetes.Interface
	fail *atomic.Bool
}

func (f failingJobDeletes) BatchV1() batchv1client.BatchV1Interface {
	return failingBatch{f.Interface.BatchV1(), f.fail}
}

type failingBatch struct {
	batchv1client.BatchV1Interface
	fail *atomic.Bool
}

func (b failingBatch) Jobs(ns string) batchv1client.JobInterface {
	return failingJobs{b.BatchV1Interface.Jobs(ns), b.fail}
}

type failingJobs struct {
	batchv1client.JobInterface
	fail *atomic.Bool
}

func (j failingJobs) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if j.fail.Load() {
		return apierrors.NewServiceUnavailable("injected failure")
	}
	return j.JobInterface.Delete(ctx, name, opts)
}

// TestReleaseReportsAFailedDrainerStop is the regression test of a Release that could not stop
// a drainer: it returns the error, so that the caller calls it again, and the retry stops it.
func TestReleaseReportsAFailedDrainerStop(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	node := manualNode(t, c, "manual-release-"+rand.String(5))
	ns := c.Namespace(t)
	ctx := context.Background()
	var fail atomic.Bool
	g := startGate(t, c, func(cfg *Config) { cfg.Client = failingJobDeletes{c.Client, &fail} })
	pvc := createLocalVolume(t, c, ns, "data-0", node, map[string]string{DrainerTemplateAnnotation: jobSpecTemplate})
	g.eventually(t, node, afterEviction, "the drainer runs", func(r coordinator.GateResult) bool {
		return len(r.Blockers) == 1 && strings.Contains(r.Blockers[0].Reason, "running")
	})

	fail.Store(true)
	err := g.Release(ctx, node)
	require.Error(t, err, "the drainer could not be stopped")
	assert.ErrorContains(t, err, "release node "+node)
	assert.ErrorContains(t, err, "injected failure")
	assert.False(t, jobGone(c, ns, drainerJobName(pvc)), "the drainer still runs")
	held, err := g.Held(ctx)
	require.NoError(t, err)
	assert.Contains(t, held, node)

	fail.Store(false)
	require.NoError(t, g.Release(ctx, node), "the retry")
	require.Eventually(t, func() bool { return jobGone(c, ns, drainerJobName(pvc)) }, 10*time.Second, 50*time.Millisecond, "the drainer is stopped")
	eventuallyHeld(t, g, []string{node}, []string{}, "nothing is held after the retry")
}

// TestCheckUnderACancelledContextAsksNoEviction: the coordinator cancels a node's operations
// before it releases the gate's work for a withdrawn request, and Check and Release take the
// node's lock. A check still under way when the request goes either asks first, and Release
// undoes it, or comes after Release under the cancelled context and must ask nothing, or the
// eviction request would stay with no drain to release it.
func TestCheckUnderACancelledContextAsksNoEviction(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "cancelled", 2)
	g := startGate(t, c, func(cfg *Config) { cfg.Policy = PolicyEvict })
	for _, n := range nodes {
		applyLonghorn(t, c.Dynamic, lhNode(n, true))
	}
	vol := volumeOn{name: "vol-cancelled", nodes: nodes, state: []replicaState{"healthy", "healthy"}}
	applyLonghorn(t, c.Dynamic, vol.objects()...)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.Eventually(t, func() bool {
		_, cached, err := g.longhorn.nodes.GetByKey(lhNS + "/" + nodes[0])
		r, errC := g.Check(cancelled, nodes[0], beforeEviction)
		return err == nil && cached && errC == nil && len(r.Blockers) > 0
	}, 30*time.Second, 50*time.Millisecond, "the gate sees the volume and the Longhorn Node; events:\n%s", g.events)
	assert.NotContains(t, getLonghornNode(t, c, nodes[0]).GetAnnotations(), LonghornEvictionAnnotation)
	assert.Zero(t, g.events.count("Normal VolumeEvictionRequested Node /"+nodes[0]), g.events)

	g.check(t, nodes[0], beforeEviction)
	assert.Contains(t, getLonghornNode(t, c, nodes[0]).GetAnnotations(), LonghornEvictionAnnotation, "a live check asks")
	require.NoError(t, g.Release(context.Background(), nodes[0]))
}
