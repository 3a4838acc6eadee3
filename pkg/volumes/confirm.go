package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// The check after eviction is the one COMPLETE follows, and the caches may be behind the API by
// far more than a round trip: after an API server restart, or a cut of the coordinator's own path
// to it, each informer lists again only after its reflector's backoff (30 to 60 s at worst), while the
// coordinator's own requests already succeed. A Node deleted in that time still exists in the
// cache, a replica failed in it is still healthy there, and a node could go down holding the last
// copy of a volume. So a check after eviction that the caches call safe is decided again on the
// Nodes and the storage system's objects listed from the API server at that moment (a list
// without a resourceVersion is served from etcd with a quorum read): only if that read is safe
// too is the node. A read that fails fails the check, which is asked again. The lists run side by
// side and the whole check must answer within nodedrain.MaxAnswerAge of its start: an answer
// older than that is not acted on anyway, and is asked again at once, so a read allowed longer
// would only loop. (The API-unreachable rule asks for the last known view, GateOptions.LastKnown: the
// caches are all there is then.)

// FreshReader is implemented by Sources that can answer from the API server instead of their
// caches.
type FreshReader interface {
	// Fresh returns the source as of objects listed from the API server now.
	Fresh(ctx context.Context) (Source, error)
}

// MaxConfirmTime is how long after its start a check that confirms may answer: an answer older
// than nodedrain.MaxAnswerAge is not acted on, and a fifth of it is left for the answer to reach
// the drain.
const MaxConfirmTime = nodedrain.MaxAnswerAge - nodedrain.MaxAnswerAge/5

// confirmBudget is MaxConfirmTime, or less if writes are given less.
func (g *Gate) confirmBudget() time.Duration { return min(g.cfg.WriteTimeout, MaxConfirmTime) }

// confirm decides the replicated volumes of node again on a fresh read, which must answer
// by deadline: the blockers it finds and whether they block.
func (g *Gate) confirm(ctx context.Context, node string, opts coordinator.GateOptions, deadline time.Time) ([]nodedrain.Blocker, bool, error) {
	rctx, cancel := context.WithDeadline(ctx, deadline) // (or the caller's, if sooner)
	defer cancel()
	nodes, sources, err := g.readFresh(rctx)
	if err != nil {
		return nil, false, err
	}
	found, err := g.evaluate(nodes, sources, node, opts)
	if err != nil {
		return nil, false, err
	}
	var blockers []nodedrain.Blocker
	blocked := false
	for _, sf := range found {
		b, bl := sf.blockers()
		blockers, blocked = append(blockers, b...), blocked || bl
	}
	return blockers, blocked, nil
}

// confirmSafe is Check's last step after eviction when the caches found nothing blocking: the
// replicated volumes' blockers are a fresh read's, others (the local volumes' and the detach
// wait's, none blocking) are kept. It returns the check's blockers and whether they block.
// started is when the check began: its budget counts from then.
func (g *Gate) confirmSafe(ctx context.Context, log logrus.FieldLogger, node string, opts coordinator.GateOptions,
	started time.Time, others []nodedrain.Blocker) ([]nodedrain.Blocker, bool, error) {
	fresh, blocked, err := g.confirm(ctx, node, opts, started.Add(g.confirmBudget()))
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		// Slow, not unreachable: said without the transport error, which the coordinator would
		// take for the API being down.
		return nil, false, fmt.Errorf("%w: no answer within %s of the check's start", ErrNotConfirmed, g.confirmBudget())
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", ErrNotConfirmed, err)
	}
	key := staleKey(node)
	if !blocked {
		g.forgetReport(key)
		return append(fresh, others...), false, nil
	}
	var why []string
	for _, b := range fresh {
		why = append(why, b.Name+": "+b.Reason)
	}
	// Once per episode (the caches stay behind for up to a minute, asked again every few seconds).
	if g.reportOnce(key, "stale") {
		log.WithField("blockers", strings.Join(why, "; ")).
			Warn("the volume gate's caches are behind the API server: they said the node's volumes are safe, a read from the API says not; the drain waits")
		g.metrics.StaleCaches.Inc()
	}
	return append(fresh, others...), blocked, nil
}

// staleKey is the report key of node's caches found behind the API (an episode ends when the
// caches no longer say safe on their own, or the API agrees).
func staleKey(node string) string { return "stale-caches:" + node }

// readAPI lists the Nodes, and each source that can the storage system's objects, from the API
// server, side by side (Gate.readFresh).
func (g *Gate) readAPI(ctx context.Context) ([]*corev1.Node, []Source, error) {
	var nodes []*corev1.Node
	sources := slices.Clone(g.sources)
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		list, err := g.cfg.Client.CoreV1().Nodes().List(ectx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		return nil
	})
	for i, s := range sources {
		if f, ok := s.(FreshReader); ok && s.Available() {
			eg.Go(func() error {
				fs, err := f.Fresh(ectx)
				if err != nil {
					return fmt.Errorf("%s: %w", s.Name(), err)
				}
				sources[i] = fs
				return nil
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return nil, nil, err
	}
	return nodes, sources, nil
}

// ErrNotConfirmed: the check after eviction could not read the API server to confirm what the
// caches said.
var ErrNotConfirmed = errors.New("volume gate: could not confirm the volumes are safe on a fresh read from the API server")

// Fresh returns a Longhorn source that answers from Longhorn's objects listed from the API
// server now, with the same indexes as the caches.
func (l *Longhorn) Fresh(ctx context.Context) (Source, error) {
	f := &Longhorn{dyn: l.dyn, disc: l.disc, namespace: l.namespace, log: l.log, memo: map[*unstructured.Unstructured]any{}}
	f.installed.Store(true)
	read := func(ctx context.Context, gvr schema.GroupVersionResource, cached cache.Indexer) (cache.Indexer, error) {
		if cached == nil {
			return nil, nil // not served
		}
		list, err := l.dyn.Resource(gvr).Namespace(l.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cached.GetIndexers())
		for i := range list.Items {
			if err := idx.Add(&list.Items[i]); err != nil {
				return nil, fmt.Errorf("index %s: %w", gvr.Resource, err)
			}
		}
		return idx, nil
	}
	eg, ectx := errgroup.WithContext(ctx)
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		from cache.Indexer
		to   *cache.Indexer
	}{
		{longhornVolumes, l.volumes, &f.volumes}, {longhornReplicas, l.replicas, &f.replicas}, {longhornEngines, l.engines, &f.engines},
		{longhornNodes, l.nodes, &f.nodes}, {longhornSettings, l.settings, &f.settings},
	} {
		eg.Go(func() error {
			idx, err := read(ectx, r.gvr, r.from)
			*r.to = idx
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return f, nil
}
