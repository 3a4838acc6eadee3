package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fastLeaderConfig is a LeaderConfig over a fake clientset with short lease timings.
func fastLeaderConfig(client *fake.Clientset) LeaderConfig {
	l := logrus.New()
	l.SetLevel(logrus.PanicLevel)
	return LeaderConfig{Client: client, Namespace: "edgedrain", Name: "edgedrain-coordinator", Identity: "a",
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		Logger: l}
}

// concurrency counts the runs under way and the most seen at once.
type concurrency struct{ active, max atomic.Int32 }

func (c *concurrency) enter() {
	n := c.active.Add(1)
	for m := c.max.Load(); n > m && !c.max.CompareAndSwap(m, n); m = c.max.Load() {
	}
}

func (c *concurrency) leave() { c.active.Add(-1) }

// After a lost renewal the elector returns at once, while the engine may still be stopping;
// the replica must not win the Lease again and start a second engine beside the first.
func TestLeadershipFlapDoesNotOverlapRuns(t *testing.T) {
	client := fake.NewClientset()
	var refuse atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, errors.New("injected: lease update refused")
		}
		return false, nil, nil
	})
	var runs concurrency
	started := make(chan struct{}, 8)
	cancelled := make(chan struct{}, 8)
	run := func(ctx context.Context) error {
		runs.enter()
		defer runs.leave()
		started <- struct{}{}
		<-ctx.Done()
		cancelled <- struct{}{}
		// Slow to stop, like an engine waiting for its operations: a second term that does not
		// wait for this one starts well within this time (a RetryPeriod).
		time.Sleep(time.Second)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- RunWithLeaderElection(ctx, fastLeaderConfig(client), run) }()
	defer func() {
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("RunWithLeaderElection did not return after its context ended")
		}
	}()

	receive(t, started, 20*time.Second, "never became leader")
	refuse.Store(true) // renewals fail: leadership is lost after RenewDeadline
	receive(t, cancelled, 20*time.Second, "the run's context was not cancelled when leadership was lost")
	refuse.Store(false) // the replica can win the Lease again at once
	receive(t, started, 20*time.Second, "did not become leader again")
	require.Equal(t, int32(1), runs.max.Load(), "two runs at once after a leadership flap")
}

// On shutdown the Lease stays held, and renewed, until the run has returned; only then is it
// released and does RunWithLeaderElection return.
func TestLeaseHeldUntilRunReturns(t *testing.T) {
	client := fake.NewClientset()
	cfg := fastLeaderConfig(client)
	started := make(chan struct{}, 1)
	var returned atomic.Bool
	var holderAtReturn atomic.Value
	run := func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(time.Second) // slow to stop: longer than a lease renewal takes
		holder, err := leaseHolder(client, cfg)
		if err != nil {
			holder = err.Error()
		}
		holderAtReturn.Store(holder)
		returned.Store(true)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- RunWithLeaderElection(ctx, cfg, run) }()
	receive(t, started, 20*time.Second, "never became leader")
	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("RunWithLeaderElection did not return after its context ended")
	}
	require.True(t, returned.Load(), "RunWithLeaderElection returned before the run did")
	require.Equal(t, cfg.Identity, holderAtReturn.Load(), "the Lease was released while the run still ran")
	holder, err := leaseHolder(client, cfg)
	require.NoError(t, err)
	require.Empty(t, holder, "the Lease was not released on shutdown")
}

func receive(t *testing.T, c <-chan struct{}, timeout time.Duration, msg string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(timeout):
		t.Fatal(msg)
	}
}

func leaseHolder(client *fake.Clientset, cfg LeaderConfig) (string, error) {
	lease, err := client.CoordinationV1().Leases(cfg.Namespace).Get(context.Background(), cfg.Name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return "", err
	}
	return *lease.Spec.HolderIdentity, nil
}
