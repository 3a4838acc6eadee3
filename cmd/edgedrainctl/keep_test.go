package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

func keepCmd(t *testing.T, c *testenv.Cluster, args ...string) (string, string, int) {
	t.Helper()
	return ctlAs(t, append([]string{"--timeout", "30s", "keep-cordoned", "--kubeconfig", c.Kubeconfig}, args...)...)
}

// Issue 23, defect 4c: keep-cordoned sets and clears edgedrain.io/keep-cordoned (with the
// operator's reason, or one saying when and how it was asked) and says what edgedrain will do
// with the node's cordon.
func TestKeepCordoned(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	node := c.AddNodes(t, "keep", 1)[0]
	ctx := context.Background()
	annotations := func() map[string]string {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		require.NoError(t, err)
		return n.Annotations
	}

	out, errOut, code := keepCmd(t, c, node, "--reason", "disk errors, RMA 4411")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "disk errors, RMA 4411", annotations()[coordinator.KeepCordonedAnnotation])
	assert.Contains(t, out, "is not cordoned; the request applies when edgedrain next cordons it")

	// Under edgedrain's cordon (as its coordinator leaves it), without a reason.
	_, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(
		`{"metadata":{"annotations":{"`+coordinator.CordonAnnotation+`":"{}"}},"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	out, errOut, code = keepCmd(t, c, node)
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(annotations()[coordinator.KeepCordonedAnnotation], "asked with edgedrainctl keep-cordoned at "))
	assert.Contains(t, out, "edgedrain will leave it cordoned when its drain ends")

	out, errOut, code = keepCmd(t, c, "--clear", node)
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, annotations(), coordinator.KeepCordonedAnnotation)
	assert.Contains(t, annotations(), coordinator.CordonAnnotation, "edgedrain's own record is not the command's to touch")
	assert.Contains(t, out, "withdrawn; edgedrain uncordons it as usual")
	out, errOut, code = keepCmd(t, c, node, "--clear")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "nothing to clear")
}

func TestKeepCordonedFailures(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no node", nil, 2, "want exactly one NODE, got 0"},
		{"two nodes", []string{"a", "b"}, 2, "want exactly one NODE, got 2"},
		{"bad node name", []string{"Node_1"}, 2, `node "Node_1"`},
		{"reason and clear", []string{"n", "--clear", "--reason", "x"}, 2, "a cleared request has no reason"},
		{"long reason", []string{"n", "--reason", strings.Repeat("x", 1025)}, 2, "longer than the limit of 1024"},
		{"no such node", []string{"keep-nowhere"}, 1, `node keep-nowhere: nodes "keep-nowhere" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := keepCmd(t, c, tt.args...)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, errOut, tt.want)
		})
	}
	t.Run("no cluster", func(t *testing.T) {
		_, errOut, code := ctlAs(t, "keep-cordoned", "--kubeconfig", t.TempDir()+"/none", "n")
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "kubernetes configuration")
	})
	t.Run("help", func(t *testing.T) {
		_, errOut, code := ctlAs(t, "keep-cordoned", "--help")
		assert.Equal(t, 0, code)
		assert.Contains(t, errOut, "Exit status: 0 done")
		assert.Contains(t, errOut, "-reason")
	})
}
