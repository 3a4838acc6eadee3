package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// API-outage mode (DESIGN §3). The Lease needs the Kubernetes API, so in an outage the leader
// loses it and, without this mode, nobody could apply the API-unreachable rule. A leader that
// lost its Lease only because the API stopped answering stays active in outage mode: it writes
// nothing to Kubernetes (every write is behind the lease guard) and publishes statuses only
// conditionally on nothing having been written to the status bucket since its own last write
// (pubsub.Bucket.PublishIfLast). A coordinator that takes over writes its term record
// (nodedrain.TermKey) before it acts, so from then on every write of the old one is refused and
// it stops: the statuses on the bus are a serial history of one active coordinator at a time.
// The mode ends as soon as the API answers again; the replica then campaigns for the Lease.

type outageKey struct{}

// outageMode is what an engine run sees of its term's outage mode.
type outageMode struct {
	active func() bool      // the Lease was lost to an API outage and the mode has not ended
	leave  func(why string) // ends the mode and the term (another coordinator has written)
}

// WithOutageMode returns ctx telling an Engine that, while active() holds, it may go on without
// the Lease in outage mode; leave ends the mode (and the leadership term).
func WithOutageMode(ctx context.Context, active func() bool, leave func(why string)) context.Context {
	return context.WithValue(ctx, outageKey{}, outageMode{active: active, leave: leave})
}

// inOutage reports whether ctx's term is in outage mode now.
func inOutage(ctx context.Context) bool {
	m, ok := ctx.Value(outageKey{}).(outageMode)
	return ok && m.active()
}

// leaveOutage ends ctx's outage mode, if any.
func leaveOutage(ctx context.Context, why string) {
	if m, ok := ctx.Value(outageKey{}).(outageMode); ok {
		m.leave(why)
	}
}

// outage is one leadership term's outage mode, kept by the leader election.
type outage struct {
	lock    *trackedLock
	allowed bool          // LeaderConfig.ActThroughAPIOutage
	renew   time.Duration // the lease guard's RenewDeadline
	log     logrus.FieldLogger
	end     context.CancelFunc // ends the term's runs

	mu    sync.Mutex
	ended bool
}

// active: the Lease lapsed, the last attempts to renew it found no API to answer, and the mode
// has not ended.
func (o *outage) active() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.allowed && !o.ended && !o.lock.renewedWithin(o.renew) && o.lock.unreachableSinceRenewal()
}

// leave ends the mode and the term's runs, once.
func (o *outage) leave(why string) {
	if o.stop() {
		o.log.WithField("reason", why).Warn("leaving API-outage mode: this coordinator stops acting and campaigns for the Lease again")
	}
}

// stop ends the term's runs without outage mode; it reports whether it was the first to.
func (o *outage) stop() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	first := !o.ended
	o.ended = true
	o.end()
	return first
}

// hold keeps the term going in outage mode until the API answers again (or ctx ends): it asks
// for the Lease every retry period; any answer from the API server ends the mode.
func (o *outage) hold(ctx context.Context, retry time.Duration) {
	o.log.Warn("lost the Lease because the Kubernetes API does not answer: staying active in API-outage mode " +
		"(no Kubernetes writes; statuses only while no other coordinator has written one)")
	for {
		select {
		case <-ctx.Done():
			o.stop()
			return
		case <-time.After(retry):
		}
		gctx, cancel := context.WithTimeout(ctx, retry)
		_, _, err := o.lock.Get(gctx)
		cancel()
		switch {
		case ctx.Err() != nil: // the term ended meanwhile
			o.stop()
			return
		case !leaseUnreachable(err):
			o.leave("the Kubernetes API answers again")
			return
		case !o.active():
			o.leave("outage mode over")
			return
		}
	}
}

// leaseUnreachable reports whether a Lease request failed for want of an answer from the API
// server (a transport error, or its deadline passed without one).
func leaseUnreachable(err error) bool {
	return err != nil && (unreachable(err) || errors.Is(err, context.DeadlineExceeded))
}

// Get reads the Lease, recording whether the API answered.
func (l *trackedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.sending()
	ler, raw, err := l.Interface.Get(ctx)
	l.mu.Lock()
	l.lastErr, l.inflight = err, false
	l.mu.Unlock()
	return ler, raw, err
}

// sending marks a request about the Lease under way.
func (l *trackedLock) sending() {
	l.mu.Lock()
	l.inflight = true
	l.mu.Unlock()
}

// unreachableSinceRenewal reports whether the last request about the Lease found no API server
// to answer it, or is still waiting for an answer (an API that drops requests silently).
func (l *trackedLock) unreachableSinceRenewal() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight || leaseUnreachable(l.lastErr)
}

// WriteGuard refuses Kubernetes writes (any request but GET, HEAD and OPTIONS) made through a
// client whose transport it wraps, unless the current check allows them: the volume gate, the
// orphaned-PVC loop and the Event recorder write only while this replica holds the Lease (not on
// standby, not in API-outage mode). Without a check every write is allowed.
type WriteGuard struct {
	allowed atomic.Pointer[func() bool]
}

// Set replaces the check (nil: allow everything).
func (g *WriteGuard) Set(allowed func() bool) { g.allowed.Store(&allowed) }

// Allowed reports whether a write may go out now.
func (g *WriteGuard) Allowed() bool {
	p := g.allowed.Load()
	return p == nil || *p == nil || (*p)()
}

// Wrap returns rt behind the gate (for rest.Config.Wrap).
func (g *WriteGuard) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !g.Allowed() {
				return nil, fmt.Errorf("%s %s refused: %w", req.Method, req.URL.Path, ErrLeaseLapsed)
			}
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
