package policy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// runSource starts a Source for namespace/DefaultName and waits for its first list; it stops
// when the test ends.
func runSource(t *testing.T, client kubernetes.Interface, namespace string) (*Source, *prometheus.Registry, *record.FakeRecorder) {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := record.NewFakeRecorder(100)
	s, err := NewSource(SourceConfig{Client: client, Namespace: namespace, Name: DefaultName, Registerer: reg, Recorder: rec})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	require.NoError(t, s.WaitSynced(wctx))
	return s, reg, rec
}

// waitGeneration waits for Changed signals until the state reaches generation gen, which it
// must reach exactly (no change counted twice), and returns it.
func waitGeneration(t *testing.T, s *Source, gen uint64) State {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-s.Changed():
			if st := s.State(); st.Generation >= gen {
				require.Equal(t, gen, st.Generation, "generation")
				return st
			}
		case <-deadline:
			t.Fatalf("no change to generation %d; state %+v", gen, s.State())
		}
	}
}

func policyMap(namespace, policy string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: DefaultName}, Data: map[string]string{DefaultKey: policy}}
}

// metrics returns edgedrain_policy_config_valid and the reload counts by result, as registered.
func metrics(t *testing.T, reg *prometheus.Registry, s *Source) (valid, ok, invalid float64) {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, "edgedrain_policy_config_valid", "edgedrain_policy_config_reloads_total")
	require.NoError(t, err)
	require.Equal(t, 3, n, "one gauge and two counters registered")
	return testutil.ToFloat64(s.valid), testutil.ToFloat64(s.reloads.WithLabelValues(ReloadOK)), testutil.ToFloat64(s.reloads.WithLabelValues(ReloadInvalid))
}

func TestNewSourceValidates(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		name string
		cfg  SourceConfig
		want string
	}{
		{"no client", SourceConfig{Namespace: "ns", Name: "p"}, "a Kubernetes client is required"},
		{"no namespace", SourceConfig{Client: client, Name: "p"}, "ConfigMap namespace"},
		{"bad name", SourceConfig{Client: client, Namespace: "ns", Name: "Policy!"}, "ConfigMap name \"Policy!\""},
		{"bad key", SourceConfig{Client: client, Namespace: "ns", Name: "p", Key: "a/b"}, "ConfigMap key \"a/b\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSource(tc.cfg)
			require.ErrorIs(t, err, ErrInvalidSourceConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	reg := prometheus.NewRegistry()
	_, err := NewSource(SourceConfig{Client: client, Namespace: "ns", Name: "p", Registerer: reg})
	require.NoError(t, err)
	_, err = NewSource(SourceConfig{Client: client, Namespace: "ns", Name: "p", Registerer: reg})
	require.Error(t, err, "a second Source on the same registry cannot register its metrics")
}

// Every kind of bad content leaves no policy (none was ever valid), an error saying what is
// wrong, the metric at 0 and a Warning Event on the ConfigMap.
func TestSourceBadContent(t *testing.T) {
	const ns = "edgedrain-system"
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
	for _, tc := range []struct {
		name   string
		cm     *corev1.ConfigMap
		target error
		want   string
	}{
		{"binaryData", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultName},
			BinaryData: map[string][]byte{DefaultKey: []byte("windows: {}")}}, ErrMissingKey, `key "policy.yaml" is in binaryData`},
		{"missing key", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultName},
			Data: map[string]string{"policy.yml": "windows: {}"}}, ErrMissingKey, `no key "policy.yaml" in data (keys: [policy.yml])`},
		{"huge value", policyMap(ns, "# "+strings.Repeat("x", 300<<10)), ErrInvalid, "more than the limit of 262144"},
		{"not UTF-8", policyMap(ns, "windows: {default: {timeZone: \"\xc3\x28\"}}"), ErrInvalid, "not UTF-8"},
		{"YAML bomb", policyMap(ns, bomb), ErrInvalid, "anchors and aliases are not allowed"},
		{"a list", policyMap(ns, "- windows\n"), ErrInvalid, "must be a mapping"},
		{"unknown field", policyMap(ns, "windows: {UPDATE: {start: \"01:00\", ende: \"02:00\"}}"), ErrInvalid, "windows.UPDATE.ende: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, reg, rec := runSource(t, fake.NewClientset(tc.cm), ns)
			st := s.State()
			assert.Nil(t, st.Config, "no valid policy ever")
			require.ErrorIs(t, st.Err, tc.target)
			assert.Contains(t, st.Err.Error(), tc.want)
			assert.Equal(t, uint64(1), st.Generation)
			valid, ok, invalid := metrics(t, reg, s)
			assert.Equal(t, []float64{0, 0, 1}, []float64{valid, ok, invalid}, "valid, reloads ok, reloads invalid")
			require.Len(t, rec.Events, 1)
			ev := <-rec.Events
			assert.True(t, strings.HasPrefix(ev, "Warning InvalidPolicy "), ev)
			assert.Contains(t, ev, "no valid policy yet")
			assert.LessOrEqual(t, len(ev), maxEventMessage+len("Warning InvalidPolicy "))
		})
	}
}

func TestSourceRunsOnce(t *testing.T) {
	s, _, _ := runSource(t, fake.NewClientset(), "ns")
	assert.ErrorIs(t, s.Run(context.Background()), ErrAlreadyRunning)
	st := s.State()
	assert.Equal(t, State{Config: &Config{}, Generation: 1}, st, "no ConfigMap: the empty policy")
}

func TestSourceWaitSyncedHonoursContext(t *testing.T) {
	s, err := NewSource(SourceConfig{Client: fake.NewClientset(), Namespace: "ns", Name: "p"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, s.WaitSynced(ctx), context.Canceled, "never run: never synced")
	assert.Equal(t, State{}, s.State(), "before the first list: generation 0, no policy")
}

// Only changes of the policy content count: the same content again (other fields of the
// ConfigMap changed) bumps nothing, signals nothing and logs nothing; an invalid policy is
// warned about once.
func TestSourceCountsPolicyChangesOnly(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	rec := record.NewFakeRecorder(10)
	s, err := NewSource(SourceConfig{Client: fake.NewClientset(), Namespace: "ns", Name: DefaultName, Logger: logger, Recorder: rec})
	require.NoError(t, err)
	notFound := apierrors.NewNotFound(corev1.Resource("configmaps"), DefaultName)
	drain := func() bool {
		select {
		case <-s.Changed():
			return true
		default:
			return false
		}
	}
	cm := func(policy string, lbls map[string]string) *corev1.ConfigMap {
		m := policyMap("ns", policy)
		m.Labels = lbls
		return m
	}
	warnings := func() int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel {
				n++
			}
		}
		return n
	}
	for i, step := range []struct {
		cm       *corev1.ConfigMap
		gen      uint64
		changed  bool
		warnings int
	}{
		{nil, 1, true, 0}, // absent
		{nil, 1, false, 0},
		{cm("windows: {}", nil), 2, true, 0},
		{cm("windows: {}", map[string]string{"a": "b"}), 2, false, 0},
		{cm("windows: {x: {}}", nil), 3, true, 1},
		{cm("windows: {x: {}}", map[string]string{"a": "b"}), 3, false, 1},
		{cm("windows: {y: {}}", nil), 4, true, 2},
		{nil, 5, true, 2},
		{cm("windows: {}", nil), 6, true, 2},
	} {
		if step.cm == nil {
			s.reconcile(nil, notFound)
		} else {
			s.reconcile(step.cm, nil)
		}
		assert.Equal(t, step.gen, s.State().Generation, "step %d: generation", i)
		assert.Equal(t, step.changed, drain(), "step %d: Changed signalled", i)
		assert.Equal(t, step.warnings, warnings(), "step %d: warnings logged", i)
		assert.Len(t, rec.Events, step.warnings, "step %d: one Warning Event per invalid policy", i)
	}
}

// policyRole is the Role deploy/base/rbac.yaml gives the coordinator for the policy ConfigMap.
func policyRole(t *testing.T) *rbacv1.Role {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "rbac.yaml"))
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var role rbacv1.Role
		err := dec.Decode(&role)
		if errors.Is(err, io.EOF) {
			t.Fatal("deploy/base/rbac.yaml has no Role edgedrain-coordinator-policy")
		}
		require.NoError(t, err)
		if role.Kind == "Role" && role.Name == "edgedrain-coordinator-policy" {
			return &role
		}
	}
}

// Against a real API server, as a user with only the shipped Role: the Source follows the
// ConfigMap through creation, valid and invalid updates, a fix and deletion, signalling each
// change once and keeping the last valid policy across the invalid one.
func TestSourceFollowsConfigMap(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ctx := context.Background()
	ns := c.Namespace(t)
	role := policyRole(t)
	role.Namespace = ns
	_, err := c.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	require.NoError(t, err)
	const user = "policy-watcher"
	_, err = c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-watcher"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	rc, err := c.UserConfig(user)
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	// The Role is no more than it says: other ConfigMaps stay out of reach.
	_, err = client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	require.Error(t, err, "the policy Role lets list every ConfigMap")

	s, reg, rec := runSource(t, client, ns)
	st := s.State()
	assert.Equal(t, State{Config: &Config{}, Generation: 1}, st, "absent: the empty policy")
	valid, ok, invalid := metrics(t, reg, s)
	assert.Equal(t, []float64{1, 1, 0}, []float64{valid, ok, invalid})

	cms := c.Client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, policyMap(ns, "windows: {UPDATE: {days: [Sat, Sun], start: \"01:00\", end: \"05:00\"}}"), metav1.CreateOptions{})
	require.NoError(t, err)
	st = waitGeneration(t, s, 2)
	require.NoError(t, st.Err)
	assert.Equal(t, "Sat,Sun 01:00-05:00 UTC", st.Config.WindowFor(nodedrain.RequesterUpdate).String())

	// A change elsewhere in the ConfigMap is no change of the policy.
	cm.Labels = map[string]string{"touched": "yes"}
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)

	cm.Data[DefaultKey] = "windows: {UPDATE: {days: [Sun], start: \"02:00\", end: \"02:00\", timeZone: Europe/Berlin}}"
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	st = waitGeneration(t, s, 3) // not 4: the label change, seen on its own or not, counts nothing
	require.NoError(t, st.Err)
	good := st.Config
	assert.Equal(t, "Sun 02:00-02:00 Europe/Berlin", good.WindowFor(nodedrain.RequesterUpdate).String())

	cm.Data[DefaultKey] = "windows: {UPDATE: {days: [Sun], start: \"26:00\", end: \"02:00\"}}"
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	st = waitGeneration(t, s, 4)
	assert.Same(t, good, st.Config, "the last valid policy stays")
	require.ErrorIs(t, st.Err, ErrInvalid)
	assert.Contains(t, st.Err.Error(), "windows.UPDATE.start")
	valid, ok, invalid = metrics(t, reg, s)
	assert.Equal(t, []float64{0, 3, 1}, []float64{valid, ok, invalid})
	require.Len(t, rec.Events, 1)
	ev := <-rec.Events
	assert.Contains(t, ev, "Warning InvalidPolicy")
	assert.Contains(t, ev, "keeping the last valid policy")

	cm.Data[DefaultKey] = "windows: {default: {start: \"22:00\", end: \"04:00\"}}"
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	st = waitGeneration(t, s, 5)
	require.NoError(t, st.Err)
	assert.Equal(t, "22:00-04:00 UTC", st.Config.WindowFor(nodedrain.RequesterUpdate).String())
	valid, ok, invalid = metrics(t, reg, s)
	assert.Equal(t, []float64{1, 4, 1}, []float64{valid, ok, invalid})

	require.NoError(t, cms.Delete(ctx, DefaultName, metav1.DeleteOptions{}))
	st = waitGeneration(t, s, 6)
	assert.Equal(t, State{Config: &Config{}, Generation: 6}, st, "deleted: back to the empty policy")
	valid, ok, invalid = metrics(t, reg, s)
	assert.Equal(t, []float64{1, 5, 1}, []float64{valid, ok, invalid})
	assert.Empty(t, rec.Events, "a Warning Event only for the invalid policy")
}
