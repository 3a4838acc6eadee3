package coordinator

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fault is the error every request about the Lease fails with (nil: none).
type fault struct{ p atomic.Pointer[error] }

func (f *fault) Store(err error) { f.p.Store(&err) }

// leaseFaults makes every request about the Lease fail with f's error, if any.
func leaseFaults(client *fake.Clientset, f *fault) {
	for _, verb := range []string{"get", "update", "create"} {
		client.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if e := f.p.Load(); e != nil && *e != nil {
				return true, nil, *e
			}
			return false, nil, nil
		})
	}
}

// A leader that loses its Lease because the API does not answer stays active in outage mode
// (its run goes on, the lease guard refuses, the outage check allows); once the API answers
// again the run is stopped and the replica campaigns (and wins) again.
func TestLeaseLostToAnAPIOutageKeepsTheRunInOutageMode(t *testing.T) {
	client := fake.NewClientset()
	var flt fault
	leaseFaults(client, &flt)
	cfg := fastLeaderConfig(client)
	cfg.ActThroughAPIOutage = true
	runs := make(chan context.Context, 4)
	run := func(ctx context.Context) error {
		runs <- ctx
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = RunWithLeaderElection(ctx, cfg, run) }()
	rctx := receiveCtx(t, runs, "never became leader")
	require.True(t, stillLeading(rctx))
	require.False(t, inOutage(rctx))

	flt.Store((&url.Error{Op: "Put", URL: "https://api:6443", Err: syscall.ECONNREFUSED}))
	require.Eventually(t, func() bool { return inOutage(rctx) }, 10*time.Second, 10*time.Millisecond,
		"outage mode never began")
	require.False(t, stillLeading(rctx), "the lease guard must refuse Kubernetes writes in outage mode")
	// Well past the point where the elector gave up (RenewDeadline), the run still goes on.
	require.Never(t, func() bool { return rctx.Err() != nil || !inOutage(rctx) }, 3*cfg.RenewDeadline, 10*time.Millisecond,
		"the run was stopped (or left outage mode) although the Lease was lost to an API outage")

	flt.Store(nil) // the API answers again: outage mode ends, the run stops
	select {
	case <-rctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run went on after the API answered again")
	}
	require.False(t, inOutage(rctx))
	next := receiveCtx(t, runs, "did not campaign and lead again after the outage")
	require.True(t, stillLeading(next))
}

// A Lease lost for another reason (the API answered: refused, or held by someone else) ends the
// run at once, as without outage mode; so does a lost Lease when outage mode is off.
func TestLeaseLostOtherwiseStopsTheRun(t *testing.T) {
	for name, tc := range map[string]struct {
		err     error
		allowed bool
	}{
		"the API refuses": {errors.New("injected: the API answered with an error"), true},
		"outage mode off": {&url.Error{Op: "Put", URL: "https://api:6443", Err: syscall.ECONNREFUSED}, false},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			var flt fault
			leaseFaults(client, &flt)
			cfg := fastLeaderConfig(client)
			cfg.ActThroughAPIOutage = tc.allowed
			runs := make(chan context.Context, 4)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				_ = RunWithLeaderElection(ctx, cfg, func(ctx context.Context) error { runs <- ctx; <-ctx.Done(); return nil })
			}()
			rctx := receiveCtx(t, runs, "never became leader")
			flt.Store(tc.err)
			select {
			case <-rctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the run went on without the Lease")
			}
			require.False(t, inOutage(rctx))
		})
	}
}

func receiveCtx(t *testing.T, c <-chan context.Context, msg string) context.Context {
	t.Helper()
	select {
	case ctx := <-c:
		return ctx
	case <-time.After(20 * time.Second):
		t.Fatal(msg)
		return nil
	}
}

// The WriteGuard lets reads through always and writes only while its check allows them.
func TestWriteGateRefusesWritesWithoutTheLease(t *testing.T) {
	var g WriteGuard
	var hits atomic.Int32
	next := roundTripFunc(func(*http.Request) (*http.Response, error) {
		hits.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})
	rt := g.Wrap(next)
	do := func(method string) error {
		req, err := http.NewRequest(method, "https://api/api/v1/nodes/n", nil)
		require.NoError(t, err)
		_, err = rt.RoundTrip(req)
		return err
	}
	require.NoError(t, do(http.MethodPatch), "no check set: everything allowed")
	var holds atomic.Bool
	g.Set(holds.Load)
	require.NoError(t, do(http.MethodGet))
	for _, m := range []string{http.MethodPatch, http.MethodPut, http.MethodPost, http.MethodDelete} {
		require.ErrorIs(t, do(m), ErrLeaseLapsed, m)
	}
	holds.Store(true)
	require.NoError(t, do(http.MethodDelete))
	require.Equal(t, int32(3), hits.Load(), "refused writes must not reach the server")
}
