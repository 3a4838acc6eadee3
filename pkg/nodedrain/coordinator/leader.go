package coordinator

import (
	"context"
	"fmt"
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
	Logger                                    logrus.FieldLogger
}

// DefaultLeaderConfig returns lease timings for a failover within 15 s of a leader's death.
func DefaultLeaderConfig() LeaderConfig {
	return LeaderConfig{Name: "edgedrain-coordinator", LeaseDuration: 10 * time.Second,
		RenewDeadline: 7 * time.Second, RetryPeriod: 2 * time.Second}
}

// RunWithLeaderElection runs run(ctx) while this replica holds the Lease, and returns when ctx
// ends. If leadership is lost, run's context is cancelled and the replica campaigns again; at
// most one replica runs at a time. On shutdown the Lease is released so another takes over at once.
func RunWithLeaderElection(ctx context.Context, cfg LeaderConfig, run func(context.Context) error) error {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return fmt.Errorf("leader election needs a client, a namespace, a lease name and an identity")
	}
	log := cfg.Logger
	if log == nil {
		log = logrus.StandardLogger()
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.Namespace, cfg.Name,
		cfg.Client.CoreV1(), cfg.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: cfg.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true, Name: cfg.Name,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.WithField("identity", cfg.Identity).Info("became the active coordinator")
					// While we lead, the engine must run.
					KeepRunning(lctx, log, run)
				},
				OnStoppedLeading: func() {
					log.WithField("identity", cfg.Identity).Info("no longer the active coordinator")
				},
				OnNewLeader: func(id string) {
					if id != cfg.Identity {
						log.WithField("leader", id).Info("standing by: another coordinator is active")
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
	return nil
}

// KeepRunning runs run(ctx) until ctx ends, restarting it 2 s after it returns early (an error
// such as a bus watch that ended), so that an active coordinator never sits idle.
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
