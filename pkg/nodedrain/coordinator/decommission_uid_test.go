package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// A decommission deletes the Node object it drained, named by its UID, and no other: an object
// registered under the name since (deleted, and its kubelet registering it again) is left as it
// is and answers with its UID, so that the drain starts over on it.
func TestDecommissionDeletesOnlyTheNodeObjectItDrained(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	name := c.AddNodes(t, "uid-delete", 1)[0]
	ctx := context.Background()
	ops := nodeOps{client: c.Client, now: time.Now}
	_, uid, err := ops.cordon(ctx, name, "r1")
	require.NoError(t, err)

	deleted, missing, replaced, err := ops.deleteNode(ctx, name, types.UID("a-node-deleted-before"))
	require.NoError(t, err)
	assert.False(t, deleted || missing)
	assert.Equal(t, uid, replaced)
	_, err = c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err, "a Node object other than the one drained was deleted")

	// (The deletion names the resourceVersion it read: the simulated kubelet's status updates
	// may come between, a conflict the drain answers by checking again, as here.)
	require.Eventually(t, func() bool {
		deleted, missing, replaced, err = ops.deleteNode(ctx, name, uid)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the drained Node object could not be deleted: %v", err)
	assert.True(t, deleted)
	assert.False(t, missing)
	assert.Empty(t, replaced)
	_, err = c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the drained Node object is still there: %v", err)
}
