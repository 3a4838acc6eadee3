package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// evalEvery is how often the evaluator checks the blockers of waiting drains in the engine
// tests (--policy-recheck); a drain is admitted on a check at most three periods old.
const evalEvery = 300 * time.Millisecond

const (
	// waitLong bounds the wait for a drain to reach a state.
	waitLong = 30 * time.Second
	// holdFor is how long a held drain must stay held (several evaluator periods and engine
	// ticks) for the test to count it as held.
	holdFor = 1500 * time.Millisecond
	tick    = 50 * time.Millisecond
)

// world is one engine test's cluster: its own bus (with every status published recorded), its
// own simulated nodes (a group), a namespace holding the policy ConfigMap and, once started, a
// real Source watching that ConfigMap, an Evaluator on it and the coordinator's Engine asking
// the Evaluator.
type world struct {
	*testenv.Bus
	t      *testing.T
	c      *testenv.Cluster
	group  string
	nodes  []string
	ns     string
	source *Source
	reg    *prometheus.Registry // the engine's metrics
}

// newWorld gives the test a bus, n simulated nodes of a fresh group and a namespace.
func newWorld(t *testing.T, prefix string, n int) *world {
	t.Helper()
	c := testenv.RequireCluster(t, cluster)
	w := &world{t: t, c: c, group: prefix + "-" + rand.String(5), Bus: testenv.StartBus(t)}
	w.nodes = c.AddNodes(t, w.group, n)
	w.ns = c.Namespace(t)
	return w
}

// settings are the engine's and the evaluator's configuration, for a test to change.
type settings struct {
	engine coordinator.Config
	eval   EvaluatorConfig
}

// start writes policy to the ConfigMap (none when empty) and starts the Source, the Evaluator
// and the Engine, configured as the coordinator is by default but with short delays, then
// changed by tune. They stop when the test ends; their log is printed if it failed.
func (w *world) start(policy string, tune ...func(*settings)) {
	w.t.Helper()
	if policy != "" {
		_, err := w.c.Client.CoreV1().ConfigMaps(w.ns).Create(context.Background(), policyMap(w.ns, policy), metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
	w.source, _, _ = runSource(w.t, w.c.Client, w.ns)
	log := w.logger()
	w.reg = prometheus.NewRegistry()
	s := settings{engine: coordinator.DefaultConfig(),
		eval: EvaluatorConfig{Source: w.source, Client: w.c.Client, Every: evalEvery, Logger: log}}
	s.engine.Client, s.engine.JetStream = w.c.Client, w.JS
	s.engine.Signer, s.engine.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	s.engine.NodeSelector = testenv.GroupLabel + "=" + w.group
	s.engine.ClusterSelector = s.engine.NodeSelector // the test cluster is shared: its group is its cluster
	s.engine.Limits = testenv.FastPolicy()
	s.engine.EvictRetryDelay, s.engine.ProgressEvery = 200*time.Millisecond, 100*time.Millisecond
	s.engine.Metrics = coordinator.NewMetrics(w.reg)
	s.engine.Logger = log
	for _, f := range tune {
		f(&s)
	}
	ev, err := NewEvaluator(s.eval)
	require.NoError(w.t, err)
	s.engine.Maintenance = ev
	e, err := coordinator.NewEngine(s.engine)
	require.NoError(w.t, err)
	testenv.RunUntilCleanup(w.t, ev.Run) // cleanups run last first: the engine stops first
	testenv.RunUntilCleanup(w.t, e.Run)
}

// logger collects the coordinator's log, printed when the test fails.
func (w *world) logger() logrus.FieldLogger {
	l, hook := logtest.NewNullLogger()
	l.SetLevel(logrus.InfoLevel)
	w.t.Cleanup(func() {
		if !w.t.Failed() {
			return
		}
		var b strings.Builder
		for _, e := range hook.AllEntries() {
			line, _ := e.String()
			b.WriteString(line)
		}
		w.t.Logf("coordinator log:\n%s", b.String())
	})
	return l.WithField("test", w.t.Name())
}

// setPolicy writes policy to the ConfigMap, as an operator edits it, and waits until the Source
// has read it (valid or not); it returns the Source's state then.
func (w *world) setPolicy(policy string) State {
	w.t.Helper()
	ctx := context.Background()
	gen := w.source.State().Generation
	cms := w.c.Client.CoreV1().ConfigMaps(w.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, DefaultName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, policyMap(w.ns, policy), metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cm.Data = map[string]string{DefaultKey: policy}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	require.NoError(w.t, err)
	require.Eventually(w.t, func() bool { return w.source.State().Generation > gen }, waitLong, tick,
		"the Source never read the new policy")
	return w.source.State()
}

// requestInOrder publishes a DEVICEOP request for each node, as its agent would, each a
// millisecond younger than the one before (admission goes oldest first).
func (w *world) requestInOrder(nodes ...string) {
	w.t.Helper()
	base := time.Now()
	for i, n := range nodes {
		w.Request(w.t, n, "r-"+n, base.Add(time.Duration(i)*time.Millisecond))
	}
}

// waitHeld waits until node has been published REQUESTED in a way ok accepts, and returns
// that status.
func (w *world) waitHeld(node, what string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
	w.t.Helper()
	return w.WaitFor(w.t, node, waitLong, "REQUESTED, "+what, func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusRequested && ok(s)
	})
}

// saying accepts a status whose message contains every one of parts.
func saying(parts ...string) func(nodedrain.NodeDrainStatus) bool {
	return func(s nodedrain.NodeDrainStatus) bool {
		for _, p := range parts {
			if !strings.Contains(s.Message, p) {
				return false
			}
		}
		return true
	}
}

// blockedBy accepts a status listing a blocker of kind named name (namespace ns, if not empty).
func blockedBy(kind nodedrain.BlockerKind, ns, name string) func(nodedrain.NodeDrainStatus) bool {
	return func(s nodedrain.NodeDrainStatus) bool {
		return slices.ContainsFunc(s.Blockers, func(b nodedrain.Blocker) bool {
			return b.Kind == kind && b.Name == name && (ns == "" || b.Namespace == ns)
		})
	}
}

// stays checks for holdFor that node's latest status stays status and that also (if not nil)
// stays false; a failure shows the node's history.
func (w *world) stays(node string, status nodedrain.DrainStatus, also func() bool) {
	w.t.Helper()
	moved := func() bool {
		st, _ := w.Last(node)
		return st.Status != status || (also != nil && also())
	}
	if !testenv.Never(w.t, moved, holdFor, tick, "%s did not stay %s", node, status) {
		w.t.Fatalf("history of %s: %v", node, w.History(node))
	}
}

// staysHeld checks for holdFor that node's drain does not start: its latest status stays
// REQUESTED and the node stays schedulable.
func (w *world) staysHeld(node string) {
	w.t.Helper()
	w.stays(node, nodedrain.StatusRequested, func() bool { return w.cordoned(node) })
	require.NotContains(w.t, w.History(node), nodedrain.StatusStarting)
}

// heldUntil requests node's drain and waits until it is held as ok accepts; checks that it
// stays held; then calls release and checks that the drain runs to COMPLETE, starting only after
// release was called. It returns the held status.
func (w *world) heldUntil(node, what string, ok func(nodedrain.NodeDrainStatus) bool, release func()) nodedrain.NodeDrainStatus {
	w.t.Helper()
	w.requestInOrder(node)
	held := w.waitHeld(node, what, ok)
	w.staysHeld(node)
	released := time.Now()
	release()
	starting, _ := w.completes(node)
	notBefore(w.t, starting, released, "the hold was released")
	return held
}

// completes waits until node's drain is COMPLETE, having gone through STARTING and CORDONED,
// and returns the first STARTING and COMPLETE statuses.
func (w *world) completes(node string) (starting, complete nodedrain.NodeDrainStatus) {
	w.t.Helper()
	complete = w.WaitStatus(w.t, node, nodedrain.StatusComplete, waitLong)
	starting = w.WaitStatus(w.t, node, nodedrain.StatusStarting, 0)
	h := w.History(node)
	i, j := slices.Index(h, nodedrain.StatusStarting), slices.Index(h, nodedrain.StatusCordoned)
	require.True(w.t, i >= 0 && j > i, "%s went to COMPLETE without STARTING, CORDONED: %v", node, h)
	return starting, complete
}

// notBefore checks that status st was published no earlier than the moment t names.
func notBefore(tb testing.TB, st nodedrain.NodeDrainStatus, moment time.Time, what string) {
	tb.Helper()
	require.False(tb, st.UpdatedAt.Before(moment), "%s %s at %s, before %s (%s)", st.Node, st.Status,
		st.UpdatedAt.Format(time.RFC3339Nano), what, moment.Format(time.RFC3339Nano))
}

func (w *world) node(name string) *corev1.Node {
	w.t.Helper()
	n, err := w.c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(w.t, err)
	return n
}

func (w *world) cordoned(node string) bool { return w.node(node).Spec.Unschedulable }

// label sets a label on each of nodes.
func (w *world) label(key, value string, nodes ...string) {
	w.t.Helper()
	for _, name := range nodes {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
		_, err := w.c.Client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(w.t, err)
	}
}

// shutDown makes a simulated node look powered off (testenv.PowerOff).
func (w *world) shutDown(name string) {
	w.t.Helper()
	require.NoError(w.t, testenv.PowerOff(context.Background(), w.c.Client, name))
}

// bindPod creates a pod no controller manages, bound to node (as the scheduler or a DaemonSet
// would), with the given labels and grace period; kwok runs it.
func (w *world) bindPod(node, name string, lbls map[string]string, grace int64) *corev1.Pod {
	w.t.Helper()
	pod := testPod(w.ns, name, node, "", lbls)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}
	got, err := w.c.Client.CoreV1().Pods(w.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(w.t, err)
	return got
}

// waitRunning waits until kwok runs the pod.
func (w *world) waitRunning(name string) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		p, err := w.c.Client.CoreV1().Pods(w.ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, waitLong, tick, "pod %s never ran", name)
}

// setPodReady waits until kwok runs the pod, then sets its Ready condition, as a kubelet would
// when its readiness probe changes (kwok leaves a running pod's conditions alone).
func (w *world) setPodReady(name string, ready bool) {
	w.t.Helper()
	w.waitRunning(name)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q},{"type":"ContainersReady","status":%q}]}}`, status, status)
	_, err := w.c.Client.CoreV1().Pods(w.ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{}, "status")
	require.NoError(w.t, err)
}

// deletePod removes a pod at once (grace period 0), as a force delete does.
func (w *world) deletePod(name string) {
	w.t.Helper()
	zero := int64(0)
	require.NoError(w.t, w.c.Client.CoreV1().Pods(w.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
}

// setBudget creates or updates the PodDisruptionBudget over app=name with maxUnavailable, and
// waits until the disruption controller allows allowed disruptions under it.
func (w *world) setBudget(name string, maxUnavailable, allowed int32) {
	w.t.Helper()
	ctx := context.Background()
	pdbs := w.c.Client.PolicyV1().PodDisruptionBudgets(w.ns)
	mu := intstr.FromInt32(maxUnavailable)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := pdbs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &mu,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		pdb.Spec.MaxUnavailable = &mu
		_, err = pdbs.Update(ctx, pdb, metav1.UpdateOptions{})
		return err
	})
	require.NoError(w.t, err)
	require.Eventually(w.t, func() bool {
		got, err := pdbs.Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration >= got.Generation && got.Status.CurrentHealthy > 0 &&
			got.Status.DisruptionsAllowed == allowed
	}, waitLong, tick, "PodDisruptionBudget %s never allowed %d disruptions", name, allowed)
}

// observations is how many values the engine's histogram name observed with label=value.
func (w *world) observations(name, label, value string) uint64 {
	w.t.Helper()
	families, err := w.reg.Gather()
	require.NoError(w.t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// windowPolicy is a policy whose DEVICEOP window opens every day at from and closes at to
// (UTC, to the minute).
func windowPolicy(from, to time.Time) string {
	return fmt.Sprintf("windows:\n  DEVICEOP: {start: %q, end: %q}\n", from.UTC().Format("15:04"), to.UTC().Format("15:04"))
}
