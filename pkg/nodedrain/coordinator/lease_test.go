package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock answers Create and Update with err; it is the lock of identity "me".
type fakeLock struct {
	resourcelock.Interface
	err error
}

func (l *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *fakeLock) Identity() string                                                { return "me" }

// The engine's lease guard: valid for the renew deadline after a successful write of the Lease
// naming us, not after a failed one, and not after a release.
func TestTrackedLockRenewedWithin(t *testing.T) {
	inner := &fakeLock{}
	l := &trackedLock{Interface: inner}
	require.False(t, l.renewedWithin(time.Hour), "never acquired")
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.True(t, l.renewedWithin(time.Hour))
	require.False(t, l.renewedWithin(0), "no longer than the window")

	inner.err = errors.New("etcd timeout")
	before := l.renewed
	require.Error(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	require.Equal(t, before, l.renewed, "a failed renewal records nothing")

	inner.err = nil
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: ""}))
	require.False(t, l.renewedWithin(time.Hour), "released")
}

// A node write is not made once the Lease lapsed (review: a replica paused between reading and
// patching a node patched after another took over); with leadership valid it is.
func TestNodeWritesNeedTheLease(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}
	client := fake.NewSimpleClientset(node)
	ops := nodeOps{client: client, now: time.Now}
	lapsed := WithLeaseCheck(context.Background(), func() bool { return false })
	_, _, err := ops.cordon(lapsed, "edge-1", "r1")
	require.ErrorIs(t, err, ErrLeaseLapsed)
	for _, a := range client.Actions() {
		require.NotEqual(t, "patch", a.GetVerb(), "patched with a lapsed Lease")
	}
	valid := WithLeaseCheck(context.Background(), func() bool { return true })
	byUs, _, err := ops.cordon(valid, "edge-1", "r1")
	require.NoError(t, err)
	require.True(t, byUs)
	_, _, err = ops.uncordon(lapsed, "edge-1")
	require.ErrorIs(t, err, ErrLeaseLapsed)
	_, _, err = ops.uncordon(valid, "edge-1")
	require.NoError(t, err)
}
