package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubectl/pkg/drain"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// evictor runs eviction attempts: it picks the pods to evict as kubectl drain does
// (k8s.io/kubectl/pkg/drain: DaemonSet pods and mirror pods skipped, emptyDir allowed), evicts
// them all in parallel through the eviction API (PodDisruptionBudgets honoured), retries each
// refusal (a 429 from a PDB, an admission webhook's denial) until the attempt's deadline, and
// waits with a pod watch until the evicted pods are gone.
type evictor struct {
	client kubernetes.Interface
	// retryDelay is the wait before asking again to evict a pod whose eviction was refused.
	retryDelay time.Duration
	// force also evicts pods no controller manages (they would die with the node anyway).
	force bool
	// progressEvery bounds how often progress is reported.
	progressEvery time.Duration
	// explain says more about a refusal (VMs); nil: nothing.
	explain EvictionExplainer
	// ers files EvictionRequests and waits for the pods' responders (evictionrequest.go); nil:
	// never.
	ers *evictionRequests
	log logrus.FieldLogger
}

// EvictionExplainer explains a refused eviction the refusal alone does not explain, and may act
// on it (pkg/vms: a VM that KubeVirt is live-migrating, or one that cannot migrate).
type EvictionExplainer interface {
	// Explain returns the reason to show for pod's refused eviction, or ok false when it has
	// nothing to add. It is called on every refusal, every retry delay.
	Explain(ctx context.Context, pod corev1.Pod, refusal error) (reason string, ok bool)
}

// progressFunc receives an attempt's progress: pods evicted so far, pods to evict, pods
// evicted but not gone yet, and the pods refusing to go with the reason.
type progressFunc func(evicted, total, terminating int, blockers []nodedrain.Blocker)

// podState tracks one pod through an attempt.
type podState struct {
	pod     corev1.Pod
	evicted bool   // the eviction (or an earlier deletion) was accepted
	gone    bool   // the pod, with this UID, no longer exists
	refusal string // why the last eviction request was refused
}

type attemptRun struct {
	e        *evictor
	node     string
	mu       sync.Mutex
	pods     map[types.UID]*podState
	goneCh   chan struct{} // signalled when a pod goes
	pdbMu    sync.Mutex
	pdbCache map[string][]policyv1.PodDisruptionBudget
	er       *erAttempt // nil: no EvictionRequests in this attempt
	erNote   string     // added to every refusal (EvictionRequests required but not served)
}

// syncFailed is the error of an attempt whose pod informer never synced before ctx ended. The
// informer retries a refused connection without a word (client-go's watch-list mode backs off
// and tries again), so the API is asked once whether it answers at all: an attempt that the
// API's absence ended says so, and is not counted as a failed attempt (unreachable).
func (e *evictor) syncFailed(ctx context.Context, node string) error {
	err := fmt.Errorf("watch pods on node %s: %w", node, context.Cause(ctx))
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err // cancelled (a withdrawal, the term's end): nothing to ask
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if perr := e.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error(); unreachable(perr) {
		return fmt.Errorf("%w (the API server does not answer: %w)", err, perr)
	}
	return err
}

// attempt evicts every pod on node that must go and waits until they are gone or ctx ends. On
// failure it returns the pods that did not go, each with its reason. last says no attempt
// follows a failed one (its EvictionRequests are then withdrawn).
func (e *evictor) attempt(ctx context.Context, node string, last bool, progress progressFunc) ([]nodedrain.Blocker, error) {
	r := &attemptRun{e: e, node: node, pods: map[types.UID]*podState{}, goneCh: make(chan struct{}, 1),
		pdbCache: map[string][]policyv1.PodDisruptionBudget{}}

	// Watch the node's pods before choosing them, so that no deletion is missed.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	informer := cache.NewSharedIndexInformer(
		cache.NewFilteredListWatchFromClient(e.client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
			}),
		&corev1.Pod{}, 0, cache.Indexers{})
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				pod, ok = tomb.Obj.(*corev1.Pod)
			}
		}
		if ok {
			r.markGone(pod.UID)
		}
	}})
	go informer.RunWithContext(watchCtx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, e.syncFailed(ctx, node)
	}

	helper := e.helper(ctx)
	list, errs := helper.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return nil, fmt.Errorf("list pods to evict from %s: %w", node, errors.Join(errs...))
	}
	for _, p := range list.Pods() {
		r.pods[p.UID] = &podState{pod: p, evicted: p.DeletionTimestamp != nil}
	}
	// Pods deleted between the informer's list and ours never produce an event.
	r.mu.Lock()
	for uid, st := range r.pods {
		obj, exists, _ := informer.GetStore().Get(&st.pod)
		if pod, ok := obj.(*corev1.Pod); !exists || !ok || pod.UID != uid {
			st.gone = true
		}
	}
	r.mu.Unlock()

	r.er, r.erNote = e.ers.begin(ctx, node)
	defer func() { r.er.end(ctx, last, r.settled()) }() // (after wg.Wait: deferred first)
	var wg sync.WaitGroup
	for _, st := range r.pods {
		if st.evicted || st.gone {
			continue
		}
		wg.Add(1)
		go func(st *podState) {
			defer wg.Done()
			r.evict(ctx, helper, st)
		}(st)
	}
	defer wg.Wait()

	tick := time.NewTicker(e.progressEvery)
	defer tick.Stop()
	for {
		evicted, total, terminating, blockers, done := r.summary()
		if done {
			progress(evicted, total, 0, nil)
			return nil, nil
		}
		select {
		case <-ctx.Done():
			blockers = r.blockers(true)
			return blockers, fmt.Errorf("%d of %d pods did not go within the attempt: %w", len(blockers), total, context.Cause(ctx))
		case <-tick.C:
			progress(evicted, total, terminating, blockers)
		case <-r.goneCh:
		}
	}
}

// left returns, as blockers, the pods an eviction attempt would take from node now (kubectl
// drain's choice): an attempt evicts the pods it listed, and a pod that landed after its list
// (created with spec.nodeName, bound by a scheduler that decided before the cordon) is still
// there when it succeeds.
func (e *evictor) left(ctx context.Context, node string) ([]nodedrain.Blocker, error) {
	list, errs := e.helper(ctx).GetPodsForDeletion(node)
	if len(errs) > 0 {
		return nil, fmt.Errorf("list pods to evict from %s: %w", node, errors.Join(errs...))
	}
	var out []nodedrain.Blocker
	for _, p := range list.Pods() {
		out = append(out, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: p.Namespace, Name: p.Name,
			Reason: "on the node after its eviction attempt listed the pods to evict"})
	}
	out = firstBlockers(out)
	return out, nil
}

func (e *evictor) helper(ctx context.Context) *drain.Helper {
	return &drain.Helper{
		Ctx:                 ctx,
		Client:              e.client,
		Force:               e.force,
		GracePeriodSeconds:  -1, // each pod's own grace period, as kubectl drain
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		Out:                 io.Discard,
		ErrOut:              io.Discard,
	}
}

// evict asks for the pod's eviction until it is accepted, the pod is gone, or ctx ends.
func (r *attemptRun) evict(ctx context.Context, helper *drain.Helper, st *podState) {
	for {
		if !stillLeading(ctx) {
			return // the Lease lapsed: no write after another replica may have taken over
		}
		// A responder of the pod's own at work (an EvictionRequest's Eviction) holds it as a
		// refusal would: asked again after the retry delay.
		hold := r.er.hold(ctx, st.pod)
		var err error
		if hold == "" {
			err = helper.EvictPod(st.pod, policyv1.SchemeGroupVersion)
		}
		if err != nil && ctx.Err() != nil {
			// The attempt ended during the request: its error says nothing about the pod, and
			// must not replace the last refusal (a PodDisruptionBudget's), which the attempt's
			// blockers report.
			return
		}
		refusal := ""
		if err != nil && !apierrors.IsNotFound(err) {
			refusal = r.refusal(ctx, st.pod, err)
		}
		r.mu.Lock()
		switch {
		case hold != "":
			st.refusal = hold
		case err == nil:
			st.evicted, st.refusal = true, ""
		case apierrors.IsNotFound(err):
			st.evicted, st.gone = true, true
		default:
			st.refusal = refusal
		}
		done := st.evicted
		r.mu.Unlock()
		if done {
			r.signal()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.e.retryDelay):
		}
	}
}

// settled returns the pods that went or whose eviction was accepted.
func (r *attemptRun) settled() []corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []corev1.Pod
	for _, st := range r.pods {
		if st.gone || st.evicted {
			out = append(out, st.pod)
		}
	}
	return out
}

func (r *attemptRun) markGone(uid types.UID) {
	r.mu.Lock()
	if st, ok := r.pods[uid]; ok {
		st.gone = true
	}
	r.mu.Unlock()
	r.signal()
}

func (r *attemptRun) signal() {
	select {
	case r.goneCh <- struct{}{}:
	default:
	}
}

func (r *attemptRun) summary() (evicted, total, terminating int, blockers []nodedrain.Blocker, done bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	done = true
	for _, st := range r.pods {
		if st.evicted || st.gone {
			evicted++
		}
		if !st.gone {
			done = false
			if st.evicted {
				terminating++
			}
		}
	}
	return evicted, len(r.pods), terminating, r.blockersLocked(false), done
}

func (r *attemptRun) blockers(includeTerminating bool) []nodedrain.Blocker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blockersLocked(includeTerminating)
}

func (r *attemptRun) blockersLocked(includeTerminating bool) []nodedrain.Blocker {
	var out []nodedrain.Blocker
	for _, st := range r.pods {
		var reason string
		switch {
		case st.gone:
			continue
		case !st.evicted && st.refusal == "" && !includeTerminating:
			continue // its eviction request is still on its way: not refused, not a blocker yet
		case !st.evicted:
			reason = st.refusal
			if reason == "" {
				reason = "eviction not accepted yet"
			}
		case includeTerminating:
			reason = "evicted but still terminating"
		default:
			continue
		}
		out = append(out, nodedrain.Blocker{Kind: nodedrain.BlockerPod, Namespace: st.pod.Namespace, Name: st.pod.Name, Reason: reason})
	}
	out = firstBlockers(out)
	return out
}

// refusal says why pod's eviction was refused: the explainer's reason, the PodDisruptionBudget
// that refused it, or the error itself.
func (r *attemptRun) refusal(ctx context.Context, pod corev1.Pod, err error) string {
	return r.refusalWhy(ctx, pod, err) + r.erNote
}

func (r *attemptRun) refusalWhy(ctx context.Context, pod corev1.Pod, err error) string {
	if r.e.explain != nil {
		if why, ok := r.e.explain.Explain(ctx, pod, err); ok {
			return why
		}
	}
	if apierrors.IsTooManyRequests(err) {
		return r.pdbReason(ctx, pod, err)
	}
	return err.Error()
}

// pdbReason names the PodDisruptionBudget that refused the pod's eviction, with its status as
// last read (read once per namespace and attempt: refusals repeat every retry delay).
func (r *attemptRun) pdbReason(ctx context.Context, pod corev1.Pod, err error) string {
	r.pdbMu.Lock()
	defer r.pdbMu.Unlock()
	pdbs, ok := r.pdbCache[pod.Namespace]
	if !ok {
		list, lerr := r.e.client.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
		if lerr != nil {
			return err.Error()
		}
		pdbs = list.Items
		r.pdbCache[pod.Namespace] = pdbs
	}
	for _, pdb := range pdbs {
		sel, serr := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if serr != nil || !sel.Matches(labels.Set(pod.Labels)) { // policy/v1: {} selects every pod
			continue
		}
		return fmt.Sprintf("PodDisruptionBudget %s/%s allows %d disruptions (needs %d healthy, has %d)",
			pdb.Namespace, pdb.Name, pdb.Status.DisruptionsAllowed, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy)
	}
	return err.Error()
}

// firstBlockers orders pod blockers by namespace and name and keeps the first MaxBlockers.
func firstBlockers(out []nodedrain.Blocker) []nodedrain.Blocker {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > nodedrain.MaxBlockers {
		out = out[:nodedrain.MaxBlockers]
	}
	return out
}
