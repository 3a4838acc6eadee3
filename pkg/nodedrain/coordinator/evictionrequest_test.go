package coordinator

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The responder the tests play: KubeVirt live-migrating a VM out of its pod.
const testResponder = "kubevirt.io/migration-controller"

// otherRequester is a requester besides edgedrain, whose EvictionRequest edgedrain must leave.
const otherRequester = "test.example/other"

// On a cluster serving the EvictionRequest API, with a responder of the pod's own at work:
// edgedrain files an EvictionRequest per pod it evicts, holds the pod the responder works on
// (a blocker naming it) and evicts the rest, evicts that pod once the responder completed, and
// withdraws its EvictionRequests when the drain ends, or when it is withdrawn mid-way.
func TestEvictionRequests(t *testing.T) {
	c := evictionRequestCluster(t)

	t.Run("a responder holds its pod until it completes", func(t *testing.T) {
		h := newHarnessOn(t, c, "er-hold", 3)
		target := h.deploy("vm", 6, 1)
		pods := h.podsOn(target)
		held := pods[0]
		ev := h.migrating(held)
		cfg := h.config(h.c.Client)
		cfg.EvictionRequests = EvictionRequestsOn
		cfg.Limits.DrainAttemptTimeout = 2 * time.Minute // one attempt: the pod is held, not failed
		h.run(cfg)

		h.request(target, "r1", time.Now())
		st := h.waitFor(target, 60*time.Second, "a blocker naming the active responder", func(s nodedrain.NodeDrainStatus) bool {
			return blockerFor(s, held) != nil && strings.Contains(blockerFor(s, held).Reason, "responder "+testResponder+" active")
		})
		reason := blockerFor(st, held).Reason
		assert.Contains(t, reason, "live-migrating to another node", "the responder's message")
		assert.Contains(t, reason, "started ")

		// One EvictionRequest per pod evicted, each naming its pod and edgedrain (kept until the
		// attempt ends: the held pod keeps it going).
		var ers []lifecyclev1alpha1.EvictionRequest
		require.Eventually(t, func() bool { ers = h.evictionRequests(target); return len(ers) == len(pods) },
			30*time.Second, 50*time.Millisecond, "edgedrain's EvictionRequests for %s: want one per pod (%d)", target, len(pods))
		byPod := map[string]lifecyclev1alpha1.EvictionRequest{}
		for _, er := range ers {
			require.NotNil(t, er.Spec.Target.Pod)
			byPod[er.Spec.Target.Pod.Name] = er
		}
		for _, p := range pods {
			er, ok := byPod[p.Name]
			require.True(t, ok, "no EvictionRequest for pod %s", p.Name)
			assert.Equal(t, p.UID, er.Spec.Target.Pod.UID)
			assert.Equal(t, EvictionRequester, er.Spec.Requester)
			assert.Equal(t, lifecyclev1alpha1.EvictionRequestIntentEviction, er.Spec.Intent)
			assert.Equal(t, "edgedrain-"+string(p.UID), er.Name)
		}

		// The others go; the held pod stays while its responder is active.
		require.Eventually(t, func() bool {
			left, err := h.c.PodsOnNode(context.Background(), h.ns, target)
			return err == nil && len(left) == 1 && left[0].UID == held.UID
		}, 60*time.Second, 50*time.Millisecond, "only the held pod should be left on %s: %s", target, podsLeft(h, target))
		notEvicted := func() bool {
			p, err := h.c.Client.CoreV1().Pods(h.ns).Get(context.Background(), held.Name, metav1.GetOptions{})
			return err == nil && p.UID == held.UID && p.DeletionTimestamp == nil
		}
		require.True(t, notEvicted(), "the held pod was evicted while its responder was active")
		testenv.Never(t, func() bool { return !notEvicted() }, 2*time.Second, 50*time.Millisecond,
			"the held pod was evicted while its responder was active")
		last, _ := h.last(target)
		assert.Equal(t, nodedrain.StatusCordoned, last.Status)

		// The responder is done; the imperative evictor's turn (the controller's part, played here).
		h.complete(ev)
		h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
		assert.Empty(t, podsLeft(h, target))
		require.Eventually(t, func() bool { return len(h.evictionRequests(target)) == 0 }, 30*time.Second, 50*time.Millisecond,
			"edgedrain's EvictionRequests for %s are left after COMPLETE", target)
		h.requireOthersKept(held)
	})

	t.Run("a responder that takes up the request itself", func(t *testing.T) {
		// A responder (or a controller making Evictions) that learns of the eviction from
		// edgedrain's EvictionRequest has a retry delay to take it up before the pod is evicted.
		h := newHarnessOn(t, c, "er-react", 3)
		target := h.deploy("db", 3, 1)
		pods := h.podsOn(target)
		held := pods[0]
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w, err := h.c.Client.LifecycleV1alpha1().EvictionRequests(h.ns).Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		seen := make(chan struct{})
		go func() {
			for ev := range w.ResultChan() {
				if er, ok := ev.Object.(*lifecyclev1alpha1.EvictionRequest); ok && er.Spec.Requester == EvictionRequester &&
					er.Spec.Target.Pod != nil && er.Spec.Target.Pod.UID == held.UID {
					close(seen)
					return
				}
			}
		}()
		cfg := h.config(h.c.Client)
		cfg.EvictionRequests = EvictionRequestsOn
		cfg.EvictRetryDelay = 2 * time.Second // room for the responder, whatever the load
		cfg.Limits.DrainAttemptTimeout = 2 * time.Minute
		h.run(cfg)
		h.request(target, "r1", time.Now())
		select {
		case <-seen:
		case <-time.After(60 * time.Second):
			t.Fatal("no EvictionRequest of edgedrain's for the pod")
		}
		ev := h.migrating(held)
		h.waitFor(target, 60*time.Second, "a blocker naming the responder", func(s nodedrain.NodeDrainStatus) bool {
			return blockerFor(s, held) != nil && strings.Contains(blockerFor(s, held).Reason, "responder "+testResponder+" active")
		})
		p, err := h.c.Client.CoreV1().Pods(h.ns).Get(context.Background(), held.Name, metav1.GetOptions{})
		require.NoError(t, err, "the pod was evicted before its responder could take the request up")
		assert.Nil(t, p.DeletionTimestamp, "the pod was evicted before its responder could take the request up")
		h.complete(ev)
		h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	})

	t.Run("withdrawn while a responder is active", func(t *testing.T) {
		h := newHarnessOn(t, c, "er-withdraw", 3)
		target := h.deploy("vm", 4, 1)
		held := h.podsOn(target)[0]
		h.migrating(held)
		h.run(h.config(h.c.Client)) // (auto: the cluster serves the API)

		h.request(target, "r1", time.Now())
		h.waitFor(target, 60*time.Second, "a blocker naming the active responder", func(s nodedrain.NodeDrainStatus) bool {
			return blockerFor(s, held) != nil && strings.Contains(blockerFor(s, held).Reason, "responder "+testResponder+" active")
		})
		require.NotEmpty(t, h.evictionRequests(target))
		h.withdraw(target)
		h.waitFor(target, 30*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
			return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
		})
		assert.False(t, h.node(target).Spec.Unschedulable, "node left cordoned")
		require.Eventually(t, func() bool { return len(h.evictionRequests(target)) == 0 }, 30*time.Second, 50*time.Millisecond,
			"edgedrain's EvictionRequests for %s are left after the withdrawal", target)
		h.requireOthersKept(held)
	})

	// EvictionRequests a run left behind (a coordinator killed mid-drain, whose drain then
	// ended) are deleted when the next one starts: those of a node it manages that is not being
	// drained, and those whose pod is gone. Those of live pods on a node it does not manage
	// (another coordinator's, --node-selector) stay, and so does another requester's.
	t.Run("left behind: swept at start", func(t *testing.T) {
		h := newHarnessOn(t, c, "er-sweep", 2)
		h.deploy("web", 2, 1)
		pods, err := h.c.RunningPods(context.Background(), h.ns, "app=web")
		require.NoError(t, err)
		require.Len(t, pods, 2)
		idle, other := pods[0].Spec.NodeName, "node-of-another-coordinator"
		h.migrating(pods[0]) // (the other requester's EvictionRequest, and an Eviction)
		gone := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "gone", UID: "9d7c5d0e-8c1b-4a55-9a43-6a0f7e3c2b11"}}
		ers := h.c.Client.LifecycleV1alpha1().EvictionRequests(h.ns)
		for _, er := range []*lifecyclev1alpha1.EvictionRequest{
			evictionRequestFor(pods[0], idle), evictionRequestFor(gone, other), evictionRequestFor(pods[1], other)} {
			_, err := ers.Create(context.Background(), er, metav1.CreateOptions{})
			require.NoError(t, err)
		}

		h.run(h.config(h.c.Client))
		require.Eventually(t, func() bool { return len(h.evictionRequests(idle)) == 0 }, 30*time.Second, 50*time.Millisecond,
			"the EvictionRequest of a managed node not being drained is still there")
		require.Eventually(t, func() bool {
			left := h.evictionRequests(other)
			return len(left) == 1 && left[0].Spec.Target.Pod.UID == pods[1].UID
		}, 30*time.Second, 50*time.Millisecond, "on a node of another coordinator's: want only the live pod's EvictionRequest kept")
		h.requireOthersKept(pods[0])
	})
}

// With --eviction-requests=on on a cluster without the API, the drain goes on as without it,
// and the pods it cannot evict say why and that the API is missing.
func TestEvictionRequestsRequiredButNotServed(t *testing.T) {
	h := newHarness(t, "er-required", 3)
	target := h.deploy("db", 3, 1)
	h.pdbAllowingNone("db-pdb", "db", 3)
	cfg := h.config(h.c.Client)
	cfg.EvictionRequests = EvictionRequestsOn
	h.run(cfg)

	h.request(target, "r1", time.Now())
	st := h.waitFor(target, 60*time.Second, "a blocker saying the API is missing", func(s nodedrain.NodeDrainStatus) bool {
		return len(s.Blockers) > 0 && strings.Contains(s.Blockers[0].Reason, "does not serve the EvictionRequest API")
	})
	assert.Contains(t, st.Blockers[0].Reason, "PodDisruptionBudget "+h.ns+"/db-pdb allows 0 disruptions", "the refusal itself")
	assert.Contains(t, st.Blockers[0].Reason, "--eviction-requests=on")
	h.withdraw(target)
	h.waitFor(target, 30*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
}

// On a cluster that does not serve the API (the package's shared one), a drain goes as it
// always did: discovery is asked, one line says the API is not served, and no EvictionRequest
// or Eviction is ever asked for.
func TestEvictionRequestsNotServed(t *testing.T) {
	h := newHarness(t, "er-absent", 3)
	target := h.deploy("web", 4, 1)
	client, paths := recordingClient(t, h.c)
	cfg := h.config(client)
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	cfg.Logger = log
	h.run(cfg)

	h.request(target, "r1", time.Now())
	h.waitStatus(target, nodedrain.StatusComplete, 60*time.Second)
	assert.Empty(t, podsLeft(h, target))
	h.withdraw(target)
	h.waitFor(target, 30*time.Second, "idle and uncordoned", func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})

	asked := paths()
	assert.Contains(t, asked, "/apis/lifecycle.k8s.io/v1alpha1", "discovery was not asked whether the API is served")
	for _, p := range asked {
		if strings.HasPrefix(p, "/apis/lifecycle.k8s.io/") {
			assert.Equal(t, "/apis/lifecycle.k8s.io/v1alpha1", p, "an EvictionRequest API call on a cluster without the API")
		}
	}
	var said []string
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "EvictionRequest") {
			said = append(said, e.Level.String()+": "+e.Message)
			assert.GreaterOrEqual(t, e.Level, logrus.InfoLevel, "warned about an API the cluster does not serve: %s", e.Message)
		}
	}
	require.Len(t, said, 1, "one line says the API is not served, once: %q", said)
	assert.Contains(t, said[0], "does not serve the EvictionRequest API")
}

// evictionRequestCluster starts a cluster of the test's own that serves the EvictionRequest API.
func evictionRequestCluster(t *testing.T) *testenv.Cluster {
	return testenv.StartTestCluster(t, testenv.ClusterConfig{ControlPlaneConfig: testenv.ControlPlaneConfig{
		FeatureGates: "EvictionRequestAPI=true", RuntimeConfig: "lifecycle.k8s.io/v1alpha1=true"}})
}

// recordingClient is a client of c whose every request path is recorded.
func recordingClient(t *testing.T, c *testenv.Cluster) (kubernetes.Interface, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	rc := *c.Admin
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			paths = append(paths, req.URL.Path)
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	client, err := kubernetes.NewForConfig(&rc)
	require.NoError(t, err)
	return client, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

func blockerFor(s nodedrain.NodeDrainStatus, pod corev1.Pod) *nodedrain.Blocker {
	for i, b := range s.Blockers {
		if b.Kind == nodedrain.BlockerPod && b.Namespace == pod.Namespace && b.Name == pod.Name {
			return &s.Blockers[i]
		}
	}
	return nil
}

// podsOn lists the harness's pods on node, by name.
func (h *harness) podsOn(node string) []corev1.Pod {
	h.t.Helper()
	pods, err := h.c.PodsOnNode(context.Background(), h.ns, node)
	require.NoError(h.t, err)
	require.NotEmpty(h.t, pods)
	return pods
}

// evictionRequests lists edgedrain's EvictionRequests for node in the harness's namespace.
func (h *harness) evictionRequests(node string) []lifecyclev1alpha1.EvictionRequest {
	h.t.Helper()
	list, err := h.c.Client.LifecycleV1alpha1().EvictionRequests(h.ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: EvictionRequestNodeLabel + "=" + node})
	require.NoError(h.t, err)
	return list.Items
}

// requireOthersKept checks that the other requester's EvictionRequest for pod is still there.
func (h *harness) requireOthersKept(pod corev1.Pod) {
	h.t.Helper()
	er, err := h.c.Client.LifecycleV1alpha1().EvictionRequests(h.ns).Get(context.Background(), "other-"+pod.Name, metav1.GetOptions{})
	require.NoError(h.t, err, "edgedrain deleted another requester's EvictionRequest")
	assert.Equal(h.t, otherRequester, er.Spec.Requester)
}

// migrating plays what Kubernetes v1.37 lacks for pod: another requester asked for its eviction
// earlier, the eviction controller made its Eviction, with the pod's responder first (KubeVirt,
// priority 10000) and the imperative evictor after it, and made the responder Active, which
// reports its progress. The status is written as the API server's validation requires: every
// target responder tracked in status.responders, the active one with a start time of now.
func (h *harness) migrating(pod corev1.Pod) *lifecyclev1alpha1.Eviction {
	h.t.Helper()
	ctx := context.Background()
	lc := h.c.Client.LifecycleV1alpha1()
	_, err := lc.EvictionRequests(h.ns).Create(ctx, &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "other-" + pod.Name},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{Requester: otherRequester, Intent: lifecyclev1alpha1.EvictionRequestIntentEviction,
			Target: lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: pod.Name, UID: pod.UID}}},
	}, metav1.CreateOptions{})
	require.NoError(h.t, err)
	ev, err := lc.Evictions(h.ns).Create(ctx, &lifecyclev1alpha1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + pod.Name},
		Spec:       lifecyclev1alpha1.EvictionSpec{Target: lifecyclev1alpha1.EvictionTarget{Pod: &lifecyclev1alpha1.EvictionPodReference{Name: pod.Name, UID: pod.UID}}},
	}, metav1.CreateOptions{})
	require.NoError(h.t, err)
	now := metav1.Now()
	ev.Status = lifecyclev1alpha1.EvictionStatus{
		Requesters: []lifecyclev1alpha1.Requester{{Name: otherRequester, Intent: lifecyclev1alpha1.RequesterIntentEviction}},
		TargetResponders: []lifecyclev1alpha1.TargetResponder{
			{Name: testResponder, Priority: ptr.To[int32](10000), State: lifecyclev1alpha1.ResponderStateActive},
			{Name: lifecyclev1alpha1.EvictionResponderImperativeEviction, Priority: ptr.To[int32](100), State: lifecyclev1alpha1.ResponderStateInactive},
		},
		Responders: []lifecyclev1alpha1.ResponderStatus{
			{Name: testResponder, StartTime: &now, Message: ptr.To("live-migrating to another node")},
			{Name: lifecyclev1alpha1.EvictionResponderImperativeEviction},
		},
	}
	ev, err = lc.Evictions(h.ns).UpdateStatus(ctx, ev, metav1.UpdateOptions{})
	require.NoError(h.t, err, "the Eviction's status as the controller and the responder write it")
	return ev
}

// complete plays the responder reporting its completion, then the controller passing the
// eviction to the imperative evictor: two writes, as the API server's validation wants them (a
// responder's status changes only while it is Active; Completed needs its completion time).
func (h *harness) complete(ev *lifecyclev1alpha1.Eviction) {
	h.t.Helper()
	ctx := context.Background()
	evictions := h.c.Client.LifecycleV1alpha1().Evictions(h.ns)
	update := func(what string, edit func(*lifecyclev1alpha1.Eviction)) {
		for try := 0; ; try++ {
			cur, err := evictions.Get(ctx, ev.Name, metav1.GetOptions{})
			require.NoError(h.t, err)
			edit(cur)
			_, err = evictions.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) && try < 10 {
				continue
			}
			require.NoError(h.t, err, what)
			return
		}
	}
	update("the responder reports completion", func(cur *lifecyclev1alpha1.Eviction) {
		now := metav1.Now()
		cur.Status.Responders[0].CompletionTime = &now
		cur.Status.Responders[0].Message = ptr.To("migrated")
	})
	update("the controller activates the imperative evictor", func(cur *lifecyclev1alpha1.Eviction) {
		now := metav1.Now()
		cur.Status.TargetResponders[0].State = lifecyclev1alpha1.ResponderStateCompleted
		cur.Status.TargetResponders[1].State = lifecyclev1alpha1.ResponderStateActive
		cur.Status.Responders[1].StartTime = &now
	})
}
