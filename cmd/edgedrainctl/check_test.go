package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/preflight"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) { testenv.Main(m, &cluster) }

// checkCmd runs edgedrainctl check against the test cluster.
func checkCmd(t *testing.T, c *testenv.Cluster, args ...string) (string, string, int) {
	t.Helper()
	return ctlAs(t, append([]string{"--timeout", "60s", "check", "--kubeconfig", c.Kubeconfig}, args...)...)
}

// checkCluster gives the test two simulated nodes: on the first a pod no controller manages and
// a Longhorn volume whose last healthy replica it holds while a copy rebuilds on the second.
func checkCluster(t *testing.T) (c *testenv.Cluster, busy, idle, ns string) {
	t.Helper()
	c = testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "check", 2)
	ns = c.Namespace(t)
	ctx := context.Background()
	grace := int64(1)
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lonely"},
		Spec: corev1.PodSpec{NodeName: nodes[0], TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.LonghornNamespace}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	addrs := map[string]string{"vol-check-r-0": "10.4.0.1:10000", "vol-check-r-1": "10.4.0.2:10000"}
	// Left in place: only this test reads Longhorn, and the package's cluster ends with it.
	_, err = testenv.ApplyLonghorn(ctx, c.Dynamic,
		testenv.LonghornVolume("vol-check", 2, "attached", ns, "data-0"),
		testenv.LonghornReplica("vol-check-r-0", "vol-check", nodes[0], "healthy", "10.4.0.1"),
		testenv.LonghornReplica("vol-check-r-1", "vol-check", nodes[1], "rebuilding", "10.4.0.2"),
		testenv.LonghornEngine("vol-check", nodes[0], addrs, map[string]string{"vol-check-r-0": "RW", "vol-check-r-1": "WO"},
			testenv.Rebuild{To: "10.4.0.2:10000", Progress: 45, From: []string{"10.4.0.1:10000"}}))
	require.NoError(t, err)
	return c, nodes[0], nodes[1], ns
}

func TestCheck(t *testing.T) {
	c, busy, idle, ns := checkCluster(t)
	volumeReason := "longhorn volume (PVC " + ns + "/data-0): last healthy replica; rebuilding on " + idle + " 45%"

	t.Run("text, blocked", func(t *testing.T) {
		out, errOut, code := checkCmd(t, c, busy, "--evict-unmanaged-pods=false")
		require.Equal(t, 1, code, errOut)
		lines := strings.Split(out, "\n")
		assert.Equal(t, busy+": 2 blocker(s) would hold a drain back now", lines[0])
		assert.Regexp(t, `^KIND\s+NAMESPACE\s+NAME\s+PROGRESS\s+REASON$`, lines[2])
		assert.Regexp(t, `^Pod\s+`+ns+`\s+lonely\s+-\s+not managed by a controller; --evict-unmanaged-pods=false$`, lines[3])
		assert.Regexp(t, `^Volume\s+`+ns+`\s+vol-check\s+45%\s+`+regexp.QuoteMeta(volumeReason)+`$`, lines[4])
		assert.Contains(t, out, "\nNotes:\n  - 1 pod(s) would be evicted\n")
	})

	t.Run("json, blocked", func(t *testing.T) {
		out, errOut, code := checkCmd(t, c, busy, "-o", "json")
		require.Equal(t, 1, code, errOut)
		var p preflight.Prediction
		require.NoError(t, json.Unmarshal([]byte(out), &p))
		assert.Equal(t, busy, p.Node)
		assert.False(t, p.Clear)
		assert.Equal(t, []nodedrain.Blocker{{Kind: nodedrain.BlockerVolume, Namespace: ns, Name: "vol-check", Reason: volumeReason, Progress: 45}},
			p.Blockers, "unmanaged pods may be evicted by default, as by the coordinator")
		for _, field := range []string{`"Node"`, `"Clear": false`, `"Blockers"`, `"Notes"`, `"At"`, `"Progress": 45`} {
			assert.Contains(t, out, field)
		}
	})

	t.Run("clear", func(t *testing.T) {
		out, errOut, code := checkCmd(t, c, idle)
		require.Equal(t, 0, code, errOut)
		assert.True(t, strings.HasPrefix(out, idle+": clear, nothing would block a drain now\n"), out)
		out, _, code = checkCmd(t, c, "-o", "json", idle)
		require.Equal(t, 0, code)
		assert.Contains(t, out, `"Clear": true`)
		assert.Contains(t, out, `"Blockers": []`)
	})

	t.Run("policy blockers", func(t *testing.T) {
		ctx := context.Background()
		_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "batch", Labels: map[string]string{"app": "critical-batch"}},
			Spec: corev1.PodSpec{NodeName: idle, Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		policyMap := func(data string) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "edgedrain-policy"}, Data: map[string]string{"policy.yaml": data}}
			_, err := c.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) {
				_, err = c.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			}
			require.NoError(t, err)
		}
		policyMap("blockers:\n  podSelector: app=critical-batch\n")
		out, errOut, code := checkCmd(t, c, idle, "--policy-configmap", ns+"/edgedrain-policy")
		require.Equal(t, 1, code, errOut)
		assert.Regexp(t, `Pod\s+`+ns+`\s+batch\s+-\s+matches the blocking pod selector app=critical-batch`, out)

		_, _, code = checkCmd(t, c, idle, "--policy-configmap", ns+"/absent")
		assert.Equal(t, 0, code, "no policy ConfigMap: no policy blockers")

		policyMap("blockers:\n  podSelector: [oops]\n")
		_, errOut, code = checkCmd(t, c, idle, "--policy-configmap", ns+"/edgedrain-policy")
		assert.Equal(t, 2, code)
		assert.Contains(t, errOut, "blockers.podSelector")
	})

	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), busy, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, n.Spec.Unschedulable, "check cordons nothing")
}

func TestCheckFailures(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no such node", []string{"check-nowhere"}, "node check-nowhere: node not found"},
		{"no node", nil, "want exactly one NODE, got 0"},
		{"two nodes", []string{"a", "b"}, "want exactly one NODE, got 2"},
		{"bad node name", []string{"Node_1"}, `node "Node_1"`},
		{"bad output", []string{"n", "-o", "yaml"}, "want text or json"},
		{"bad policy", []string{"n", "--volume-policy", "maybe"}, "invalid volume policy"},
		{"unknown flag", []string{"n", "--force"}, "unknown flag: --force"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := checkCmd(t, c, tt.args...)
			assert.Equal(t, 2, code)
			assert.Contains(t, errOut, tt.want)
		})
	}
	t.Run("no cluster", func(t *testing.T) {
		_, errOut, code := ctlAs(t, "check", "--kubeconfig", t.TempDir()+"/none", "n")
		assert.Equal(t, 2, code)
		assert.Contains(t, errOut, "kubernetes configuration")
	})
	t.Run("help", func(t *testing.T) {
		_, errOut, code := ctlAs(t, "check", "--help")
		assert.Equal(t, 0, code)
		assert.Contains(t, errOut, "Exit status: 0 nothing would block, 1 something would block, 2 the prediction failed")
		assert.Contains(t, errOut, "-evict-unmanaged-pods")
	})
}
