package volumes

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Drainer Job results, the values of the result label of edgedrain_drainer_jobs_total.
const (
	// ResultSucceeded counts drainer Jobs that completed: their PVC is labelled drained.
	ResultSucceeded = "succeeded"
	// ResultFailed counts drainer Jobs that failed; they are retried after a backoff.
	ResultFailed = "failed"
	// ResultTimeout counts drainer Jobs stopped by Config.DrainerTimeout; they are retried too.
	ResultTimeout = "timeout"
)

// Metrics are the gate's Prometheus metrics. The number of volumes blocking each node is the
// coordinator's edgedrain_blocked_volumes, computed from the gate's answers.
type Metrics struct {
	// DrainerJobs counts finished drainer Jobs by result (succeeded, failed, timeout).
	DrainerJobs *prometheus.CounterVec
	// TemplateErrors counts drainer templates found invalid (each reported as an Event).
	TemplateErrors prometheus.Counter
	// TemplatesRefused counts drainer templates refused by the DrainerPolicy, once per PVC and
	// template value (each reported as an Event on the PVC).
	TemplatesRefused prometheus.Counter
	// CheckDuration observes how long one Check takes.
	CheckDuration prometheus.Histogram
	// OrphanedPVCs is how many orphaned PVCs of scaled-down StatefulSets are waiting for their
	// drainer (state pending) or drained (state drained).
	OrphanedPVCs *prometheus.GaugeVec
	// SourceAvailable is 1 for each storage system the gate reads (its CRDs are served), else 0.
	SourceAvailable *prometheus.GaugeVec
	// StaleCaches counts episodes of checks after eviction that the caches called safe and a
	// fresh read from the API server did not (confirm.go).
	StaleCaches prometheus.Counter
	// ReplicaHolds observes, for each node's replica hold that ended, how long the node was
	// away (from the hold to the drain's end; 0 for a hold that expired), by outcome:
	// caught_up (every replica there came back), rebuilt (some were rebuilt in full),
	// expired (the node was away longer than held).
	ReplicaHolds *prometheus.HistogramVec
}

// Outcomes of a replica hold, the values of the outcome label of
// edgedrain_volume_replica_hold_away_seconds.
const (
	HoldCaughtUp = "caught_up"
	HoldRebuilt  = "rebuilt"
	HoldExpired  = "expired"
)

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DrainerJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_drainer_jobs_total",
			Help: "Drainer Jobs run on node-local and orphaned PVCs, by result (succeeded, failed, timeout).",
		}, []string{"result"}),
		TemplateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_drainer_template_errors_total",
			Help: "Drainer Job templates found invalid (annotation on a PVC or StatefulSet).",
		}),
		TemplatesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_drainer_templates_refused_total",
			Help: "Drainer Job templates refused: they asked for privileges, host access or another ServiceAccount, or their namespace is not allowed.",
		}),
		CheckDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edgedrain_volume_gate_check_seconds",
			Help:    "Time taken by one volume gate check of a node.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. ~4 s
		}),
		OrphanedPVCs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_orphaned_pvcs",
			Help: "PVCs left by scaled-down StatefulSets with a drainer template, by state (pending, drained).",
		}, []string{"state"}),
		SourceAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_volume_source_available",
			Help: "1 when the volume gate reads the storage system (its CRDs are served), 0 when it is absent.",
		}, []string{"source"}),
		StaleCaches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_volume_gate_stale_caches_total",
			Help: "Times the volume gate's caches called a node safe before COMPLETE and a read from the API server did not (counted once per episode; the drain waited).",
		}),
		ReplicaHolds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edgedrain_volume_replica_hold_away_seconds",
			Help:    "How long a node whose Longhorn replicas were held (--longhorn-hold-replicas) was away, by how they came back: caught_up, rebuilt (in full), expired (away longer than held; 0).",
			Buckets: []float64{60, 300, 600, 900, 1800, 3600, 7200, 14400},
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.DrainerJobs, m.TemplateErrors, m.TemplatesRefused, m.CheckDuration, m.OrphanedPVCs, m.SourceAvailable, m.StaleCaches,
			m.ReplicaHolds)
	}
	return m
}
