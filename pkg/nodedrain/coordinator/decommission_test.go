package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A decommission deletes the Node before COMPLETE; when nobody withdraws the request (the
// machine powered off first) the coordinator removes both keys after the linger, but never a
// new request for the name (a new machine) nor its status.
func TestDecommissionLingerRemovesOnlyItsOwnKeys(t *testing.T) {
	h := newHarness(t, "decom", 3)
	cfg := h.config(h.c.Client)
	cfg.AllowDecommission = true
	cfg.Limits.DecommissionLinger = 2 * time.Second
	h.run(cfg)
	ctx := context.Background()
	gone := func(node string) bool {
		_, err := h.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	keyGone := func(get func() error) bool { return errors.Is(get(), pubsub.ErrNotFound) }

	// Nobody withdraws: both keys go after the linger.
	h.RequestWithContext(t, h.nodes[0], "d1", time.Now(), "decommission")
	st := h.waitStatus(h.nodes[0], nodedrain.StatusComplete, 30*time.Second)
	assert.True(t, st.Decommission)
	assert.True(t, gone(h.nodes[0]), "the Node is deleted before COMPLETE")
	require.Eventually(t, func() bool {
		return keyGone(func() error { _, _, err := h.Requests.Get(ctx, h.nodes[0]); return err }) &&
			keyGone(func() error { _, _, err := h.Statuses.Get(ctx, h.nodes[0]); return err })
	}, 15*time.Second, 50*time.Millisecond, "request and status removed after the linger")

	// A new machine asks under the name before the linger ends: its request and status stay.
	h.RequestWithContext(t, h.nodes[1], "d2", time.Now(), "decommission")
	h.waitStatus(h.nodes[1], nodedrain.StatusComplete, 30*time.Second)
	h.RequestWithContext(t, h.nodes[1], "new", time.Now(), "reboot")
	// (Its Node is gone: it waits for it to register, or, if the node informer still had it,
	// fails to cordon it; either way the status answers the new request.)
	st = h.waitFor(h.nodes[1], 10*time.Second, "the new request taken up", func(s nodedrain.NodeDrainStatus) bool {
		return s.RequestID == "new"
	})
	assert.False(t, st.Decommission)
	testenv.Never(t, func() bool {
		r, _, err := h.Requests.Get(ctx, h.nodes[1])
		s, _, serr := h.Statuses.Get(ctx, h.nodes[1])
		return err != nil || r.RequestID != "new" || serr != nil || s.RequestID != "new"
	}, 4*time.Second, 100*time.Millisecond, "the new machine's request or status was removed")
}
