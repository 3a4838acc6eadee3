package coordinator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderConfig configures leader election among coordinator replicas over a
// coordination.k8s.io Lease. DefaultLeaderConfig gives a failover within about 12 s.
type LeaderConfig struct {
	Client    kubernetes.Interface
	Namespace string // of the Lease
	Name      string // of the Lease
	Identity  string // this replica (pod name)
	// LeaseDuration is how long a lost leader's lease blocks the others; RenewDeadline how long
	// the leader tries to renew before giving up; RetryPeriod how often everyone tries.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ActThroughAPIOutage keeps a leader that lost the Lease only because the Kubernetes API
	// stopped answering active in API-outage mode (see outage.go), so that the API-unreachable
	// rule can apply; set it when that rule is on.
	ActThroughAPIOutage bool
	// Writes, if set, is the WriteGuard of the clients the run uses: it allows writes only while
	// this replica holds the Lease.
	Writes *WriteGuard
	Logger logrus.FieldLogger
}

// DefaultLeaderConfig returns the lease timings: a killed leader is replaced once its Lease runs
// out, typically 11-14 s after its death and at worst about 20 s (client-go's 120 % poll jitter).
func DefaultLeaderConfig() LeaderConfig {
	return LeaderConfig{Name: "edgedrain-coordinator", LeaseDuration: 10 * time.Second,
		RenewDeadline: 7 * time.Second, RetryPeriod: 2 * time.Second}
}

// RunWithLeaderElection runs run(ctx) while this replica holds the Lease (restarting it as
// KeepRunning does), and returns when ctx ends and run has returned. If leadership is lost,
// run's context is cancelled and the replica campaigns again only once run has returned; at
// most one replica runs at a time. On shutdown the Lease is released, once run has returned, so
// another takes over at once.
func RunWithLeaderElection(ctx context.Context, cfg LeaderConfig, run func(context.Context) error) error {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return fmt.Errorf("leader election needs a client, a namespace, a lease name and an identity")
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.Namespace, cfg.Name,
		cfg.Client.CoreV1(), cfg.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: cfg.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	lock := &trackedLock{Interface: inner}
	for ctx.Err() == nil {
		if err := campaign(ctx, cfg, lock, run); err != nil {
			return err
		}
	}
	return nil
}

// campaign waits for the Lease, runs run while it holds it, and returns once leadership is lost
// (or ctx ended) and run has returned.
//
// client-go's elector calls OnStartedLeading in a goroutine of its own and returns as soon as
// leadership is lost, without waiting for it: campaign waits, so that the next campaign cannot
// start a second run beside this one. The elector's context outlives ctx while a run is under
// way, so that the Lease is renewed until run has returned and only then released.
func campaign(ctx context.Context, cfg LeaderConfig, lock *trackedLock, run func(context.Context) error) error {
	log := cfg.Logger.WithField("identity", cfg.Identity)
	ectx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var (
		mu      sync.Mutex
		leading bool                  // OnStartedLeading began a term
		over    bool                  // the elector returned: a late OnStartedLeading must not begin one
		done    = make(chan struct{}) // closed when the term's runs have returned
	)
	// While campaigning, the end of ctx ends the elector; while leading, the term ends it.
	stopOnDone := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			stopElector()
		}
	})
	defer stopOnDone()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: cfg.Name,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if over {
					mu.Unlock()
					return
				}
				leading = true
				mu.Unlock()
				defer close(done)
				defer stopElector() // release the Lease once run has returned
				// run stops when leadership is lost (lctx), unless it was lost to an API outage
				// (outage mode, which ends when the API answers), or when ctx ends.
				tctx, cancel := context.WithCancel(ctx)
				defer cancel()
				holds := func() bool { return lock.renewedWithin(cfg.RenewDeadline) }
				if cfg.Writes != nil {
					cfg.Writes.Set(holds)
					defer cfg.Writes.Set(func() bool { return false })
				}
				o := &outage{lock: lock, allowed: cfg.ActThroughAPIOutage, renew: cfg.RenewDeadline, log: log, end: cancel}
				var (
					hmu     sync.Mutex
					ended   bool
					holding sync.WaitGroup
				)
				defer func() { // the term is over: end outage mode's hold and wait for it
					hmu.Lock()
					ended = true
					hmu.Unlock()
					cancel()
					holding.Wait()
				}()
				defer context.AfterFunc(lctx, func() {
					hmu.Lock()
					defer hmu.Unlock()
					if !ended && tctx.Err() == nil && o.active() {
						holding.Add(1)
						go func() {
							defer holding.Done()
							o.hold(tctx, cfg.RetryPeriod)
						}()
						return
					}
					o.stop()
				})()
				// The engine acts only while the last renewal is recent enough that no other
				// replica can have taken the Lease (a paused process must not act on its return).
				rctx := WithOutageMode(WithLeaseCheck(tctx, holds), o.active, o.leave)
				log.Info("became the active coordinator")
				// While we lead, the engine must run.
				KeepRunning(rctx, cfg.Logger, run)
				log.Info("active coordinator stopped")
			},
			OnStoppedLeading: func() {
				mu.Lock()
				defer mu.Unlock()
				if leading {
					log.Info("no longer the active coordinator")
				}
			},
			OnNewLeader: func(id string) {
				if id != cfg.Identity {
					cfg.Logger.WithField("leader", id).Info("standing by: another coordinator is active")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ectx) // returns when leadership is lost or the elector is stopped
	mu.Lock()
	over = true
	wasLeading := leading
	mu.Unlock()
	if wasLeading {
		<-done
	}
	return nil
}

// KeepRunning runs run(ctx) until ctx ends, restarting it 2 s after it returns early (an error
// such as a bus watch that ended), so that an active coordinator never sits idle. It returns
// once ctx has ended and run has returned; runs never overlap.
func KeepRunning(ctx context.Context, log logrus.FieldLogger, run func(context.Context) error) {
	for ctx.Err() == nil {
		if err := run(ctx); err != nil {
			log.WithError(err).Error("coordinator engine stopped; restarting it in 2s")
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// trackedLock records when this replica last wrote the Lease successfully (acquired or
// renewed it), measured from before the write was sent: the Lease is surely still ours for
// LeaseDuration after that.
type trackedLock struct {
	resourcelock.Interface
	mu       sync.Mutex
	renewed  time.Time
	lastErr  error // of the last request about the Lease
	inflight bool  // a request about the Lease is waiting for its answer
}

// Create acquires the Lease, recording when.
func (l *trackedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Create)
}

// Update renews (or releases) the Lease, recording a renewal.
func (l *trackedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Update)
}

// write performs a write of the Lease and records its outcome, timed from before it was sent.
func (l *trackedLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord,
	do func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	l.sending()
	start := time.Now()
	err := do(ctx, ler)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr, l.inflight = err, false
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.renewed = start
	} else if err == nil {
		l.renewed = time.Time{} // released
	}
	return err
}

// renewedWithin reports whether the Lease was last written by us less than d ago.
func (l *trackedLock) renewedWithin(d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.renewed.IsZero() && time.Since(l.renewed) < d
}

type leaseCheckKey struct{}

// WithLeaseCheck returns ctx carrying a check that the caller still holds leadership; an Engine
// running under it acts only while the check passes.
func WithLeaseCheck(ctx context.Context, valid func() bool) context.Context {
	return context.WithValue(ctx, leaseCheckKey{}, valid)
}

// stillLeading runs ctx's lease check; without one (leader election off) it is always true.
func stillLeading(ctx context.Context) bool {
	valid, ok := ctx.Value(leaseCheckKey{}).(func() bool)
	return !ok || valid()
}
