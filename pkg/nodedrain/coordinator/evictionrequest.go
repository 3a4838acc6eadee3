package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	lifecycleinformers "k8s.io/client-go/informers/lifecycle/v1alpha1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kubernetes' EvictionRequest API (lifecycle.k8s.io/v1alpha1, KEP-4563) lets a workload's own
// controller (a "responder": KubeVirt live-migrating a VM, a database handing over its primary)
// do an eviction its way before anyone evicts the pod. edgedrain speaks it when the cluster
// serves it (Config.EvictionRequests): before evicting a pod it files an EvictionRequest for it,
// and while an Eviction of the pod shows a responder of the pod's own at work, it does not evict.
//
// Kubernetes v1.37 serves the API but runs nothing that acts on it: no controller turns
// EvictionRequests into Evictions or evicts. edgedrain therefore still evicts the pod itself
// (the eviction API, PodDisruptionBudgets honoured) once no responder is active: an
// EvictionRequest announces the eviction, it does not replace it.

// Settings of Config.EvictionRequests.
const (
	// EvictionRequestsAuto uses EvictionRequests when the cluster serves the API.
	EvictionRequestsAuto = "auto"
	// EvictionRequestsOn requires them: a cluster without the API is reported (log, blockers),
	// and pods are still evicted, as without it.
	EvictionRequestsOn = "on"
	// EvictionRequestsOff never uses them.
	EvictionRequestsOff = "off"
)

const (
	// EvictionRequester is the requester every EvictionRequest of edgedrain names.
	EvictionRequester = "edgedrain.io/coordinator"
	// EvictionRequestNodeLabel marks edgedrain's EvictionRequests with the node whose drain filed
	// them (the node's name, or a digest of it when the name is too long for a label value; the
	// annotation of the same key holds the name).
	EvictionRequestNodeLabel = "edgedrain.io/node"
	// evictionRequestPrefix begins the name of each EvictionRequest of edgedrain; the pod's UID
	// ends it, so that every attempt and every coordinator finds the same object.
	evictionRequestPrefix = "edgedrain-"

	lifecycleGroupVersion = "lifecycle.k8s.io/v1alpha1"
	// discoveryTTL is how long an answer of discovery is trusted: an attempt asks at most this
	// often, so that a thousand attempts do not ask a thousand times.
	discoveryTTL = 30 * time.Second
	// evictionSyncWait bounds the wait for the Eviction informer before an attempt evicts without
	// it (a list refused by RBAC must not hold a drain up).
	evictionSyncWait = 10 * time.Second
	// withdrawTimeout bounds the deletions of one withdrawal.
	withdrawTimeout = 30 * time.Second
	// deleteWorkers bounds the deletions in flight at once.
	deleteWorkers = 8
	podUIDIndex   = "pod-uid"
)

// errDrainCancelled is the cause of the end of a node's operations that the drain cancelled (its
// request was withdrawn or replaced, the node vanished): an eviction attempt that ends by it
// withdraws its EvictionRequests, one whose run merely stopped leaves them for the next run.
var errDrainCancelled = errors.New("the drain cancelled its operations")

// evictionRequests files, reads and withdraws edgedrain's EvictionRequests, for the attempts of
// one engine run.
type evictionRequests struct {
	client kubernetes.Interface
	mode   string
	log    logrus.FieldLogger
	now    func() time.Time

	dmu       sync.Mutex // discovery's answer (held while asking)
	checkedAt time.Time
	served    bool
	said      string // the last answer of discovery that was logged

	mu      sync.Mutex
	running map[string]int // eviction attempts under way, per node
}

func newEvictionRequests(client kubernetes.Interface, mode string, log logrus.FieldLogger, now func() time.Time) *evictionRequests {
	if mode == "" {
		mode = EvictionRequestsAuto
	}
	if log == nil {
		log = logrus.New()
	}
	if now == nil {
		now = time.Now
	}
	return &evictionRequests{client: client, mode: mode, log: log, now: now, running: map[string]int{}}
}

// use reports whether the API is to be used now: never when off, else when discovery lists
// evictionrequests and evictions in lifecycle.k8s.io/v1alpha1 (asked at most every discoveryTTL).
// A failed discovery counts as not served. Each change of the answer is logged once.
func (x *evictionRequests) use(ctx context.Context) bool {
	if x == nil || x.mode == EvictionRequestsOff || x.client == nil {
		return false
	}
	x.dmu.Lock()
	defer x.dmu.Unlock()
	if !x.checkedAt.IsZero() && x.now().Sub(x.checkedAt) < discoveryTTL {
		return x.served
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := discovery.ToDiscoveryInterfaceWithContext(x.client.Discovery()).ServerResourcesForGroupVersionWithContext(dctx, lifecycleGroupVersion)
	if err != nil && ctx.Err() != nil {
		return x.served // our own end, not the server's answer: keep the last one
	}
	x.checkedAt = x.now()
	answer := "absent"
	switch {
	case err == nil && lists(list, "evictionrequests") && lists(list, "evictions"):
		answer = "served"
	case err != nil && !apierrors.IsNotFound(err):
		answer = "error"
	}
	x.served = answer == "served"
	if answer != x.said {
		x.said = answer
		x.logAnswer(answer, err)
	}
	return x.served
}

func (x *evictionRequests) logAnswer(answer string, err error) {
	log := x.log.WithField("eviction-requests", x.mode)
	switch {
	case answer == "served":
		log.Info("the cluster serves the EvictionRequest API (" + lifecycleGroupVersion + "): each pod to evict gets an " +
			"EvictionRequest, and its eviction waits while a responder of the pod's own is active")
	case answer == "error":
		log.WithError(err).Warn("cannot tell whether the cluster serves the EvictionRequest API (discovery failed): " +
			"pods are evicted directly, without EvictionRequests")
	case x.mode == EvictionRequestsOn:
		log.Warn("--eviction-requests=on, but the cluster does not serve the EvictionRequest API (" + lifecycleGroupVersion +
			"; it needs the EvictionRequestAPI feature gate and --runtime-config): pods are evicted directly")
	default:
		log.Info("the cluster does not serve the EvictionRequest API (" + lifecycleGroupVersion + "): pods are evicted directly")
	}
}

func lists(l *metav1.APIResourceList, resource string) bool {
	if l == nil {
		return false
	}
	for _, r := range l.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

// notServedNote is added to the reasons of refused pods when the API is required but not served.
const notServedNote = " (--eviction-requests=on, but the cluster does not serve the EvictionRequest API: evicted directly)"

// begin starts the EvictionRequest side of an eviction attempt on node: nil when the API is not
// used, with the note its refusals carry when it should have been. The attempt counts as under
// way for node until end.
func (x *evictionRequests) begin(ctx context.Context, node string) (*erAttempt, string) {
	if x == nil || x.mode == EvictionRequestsOff {
		return nil, ""
	}
	if !x.use(ctx) {
		if x.mode == EvictionRequestsOn {
			x.log.WithField("node", node).Warn("eviction attempt without EvictionRequests: --eviction-requests=on, " +
				"but the cluster does not serve the API; evicting directly")
			return nil, notServedNote
		}
		return nil, ""
	}
	x.mu.Lock()
	x.running[node]++
	x.mu.Unlock()
	a := &erAttempt{x: x, node: node, ensured: map[types.UID]bool{}, held: map[types.UID]string{},
		silent: map[types.UID]bool{}, log: x.log.WithField("node", node)}
	a.informer = lifecycleinformers.NewEvictionInformer(x.client, metav1.NamespaceAll, 0, cache.Indexers{podUIDIndex: evictionPodUID})
	var lastErr error
	var errMu sync.Mutex
	_ = a.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		errMu.Lock()
		lastErr = err
		errMu.Unlock()
	})
	ictx, stop := context.WithCancel(ctx)
	a.stop = stop
	go a.informer.RunWithContext(ictx)
	wait := evictionSyncWait
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)/4) // (most of a short attempt is for evicting)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), a.informer.HasSynced) && ctx.Err() == nil {
		errMu.Lock()
		a.log.WithError(lastErr).Warnf("cannot read Evictions within %s: this attempt evicts without waiting for "+
			"responders until it can (EvictionRequests are still filed)", wait.Round(time.Millisecond))
		errMu.Unlock()
	}
	return a, ""
}

// evictionPodUID indexes Evictions by the UID of the pod they target.
func evictionPodUID(obj any) ([]string, error) {
	ev, ok := obj.(*lifecyclev1alpha1.Eviction)
	if !ok || ev.Spec.Target.Pod == nil || ev.Spec.Target.Pod.UID == "" {
		return nil, nil
	}
	return []string{string(ev.Spec.Target.Pod.UID)}, nil
}

// erAttempt is the EvictionRequest side of one eviction attempt.
type erAttempt struct {
	x        *evictionRequests
	node     string
	log      logrus.FieldLogger
	informer cache.SharedIndexInformer
	stop     context.CancelFunc

	mu      sync.Mutex
	ensured map[types.UID]bool   // pods whose EvictionRequest this attempt saw exist
	held    map[types.UID]string // the responder each held pod waits for (logged once)
	silent  map[types.UID]bool   // pods whose silent responder was logged
	warned  bool                 // a failed filing was logged
	// unfiled: filing was refused for good in this attempt (forbidden, the API gone): not tried
	// again for every pod at every retry.
	unfiled bool
}

// hold files the pod's EvictionRequest if this attempt has not yet, and returns why the pod must
// not be evicted yet (a responder of its own is active), or "" to evict it now. Nothing here
// stops an eviction for good: an unreadable Eviction, a failed filing or a silent responder
// lets it go ahead, as it would without the API.
func (a *erAttempt) hold(ctx context.Context, pod corev1.Pod) string {
	if a == nil {
		return ""
	}
	if a.ensure(ctx, pod) {
		// A responder (or a controller making the pod's Eviction) learns of the eviction from
		// the request: it gets one retry delay to take it up before the pod is evicted.
		return "EvictionRequest " + evictionRequestName(pod.UID) + " filed: giving the pod's responders a moment to take it up"
	}
	if !a.informer.HasSynced() {
		return ""
	}
	var evs []*lifecyclev1alpha1.Eviction
	objs, _ := a.informer.GetIndexer().ByIndex(podUIDIndex, string(pod.UID))
	for _, o := range objs {
		if ev, ok := o.(*lifecyclev1alpha1.Eviction); ok {
			evs = append(evs, ev)
		}
	}
	v := readResponders(evs, pod.UID, a.x.now())
	log := a.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name})
	a.mu.Lock()
	prev := a.held[pod.UID]
	switch {
	case v.Hold != "" && prev != v.Responder:
		a.held[pod.UID] = v.Responder
		log.Info("not evicting yet: " + v.Hold)
	case v.Hold == "" && prev != "":
		delete(a.held, pod.UID)
		log.Infof("responder %s no longer active: evicting", prev)
	}
	if v.Silent != "" && !a.silent[pod.UID] {
		a.silent[pod.UID] = true
		log.Warn(v.Silent)
	}
	a.mu.Unlock()
	return v.Hold
}

// ensure files the pod's EvictionRequest; one that exists already (an earlier attempt's) is
// as good. A failure is logged once per attempt and tried again at the pod's next retry, but
// for a refusal that will not change within the attempt (RBAC, the API gone): then no pod of
// the attempt tries again.
// filed says it was filed just now.
func (a *erAttempt) ensure(ctx context.Context, pod corev1.Pod) (filed bool) {
	a.mu.Lock()
	done := a.ensured[pod.UID] || a.unfiled
	a.mu.Unlock()
	if done || !stillLeading(ctx) {
		return false
	}
	_, err := a.x.client.LifecycleV1alpha1().EvictionRequests(pod.Namespace).Create(ctx, evictionRequestFor(pod, a.node), metav1.CreateOptions{})
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		a.ensured[pod.UID] = true
		return err == nil
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err):
		a.unfiled = true
	}
	if ctx.Err() == nil && !a.warned {
		a.warned = true
		a.log.WithError(err).WithField("pod", pod.Namespace+"/"+pod.Name).Warn("cannot file the pod's EvictionRequest; " +
			"evicting without it (this attempt logs no further such failure)")
	}
	return false
}

// evictionRequestFor is the EvictionRequest edgedrain files for pod, drained from node.
func evictionRequestFor(pod corev1.Pod, node string) *lifecyclev1alpha1.EvictionRequest {
	return &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:        evictionRequestName(pod.UID),
			Namespace:   pod.Namespace,
			Labels:      map[string]string{EvictionRequestNodeLabel: nodeLabelValue(node)},
			Annotations: map[string]string{EvictionRequestNodeLabel: node},
		},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{
			Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: pod.Name, UID: pod.UID}},
			Requester: EvictionRequester,
			Intent:    lifecyclev1alpha1.EvictionRequestIntentEviction,
		},
	}
}

func evictionRequestName(uid types.UID) string { return evictionRequestPrefix + string(uid) }

// nodeLabelValue is node as a label value: the name itself, or a digest of a name longer than a
// label value may be.
func nodeLabelValue(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	sum := sha256.Sum256([]byte(node))
	return "sha256-" + hex.EncodeToString(sum[:])[:40]
}

// mayBeUsed reports whether the API may be used at all (not off).
func (x *evictionRequests) mayBeUsed() bool {
	return x != nil && x.mode != EvictionRequestsOff && x.client != nil
}
