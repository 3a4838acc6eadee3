package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Metrics are the agent's Prometheus metrics (DESIGN §6).
type Metrics struct {
	// DeferredOperations is 1 for the operation held back for the drain (pending, requested, or
	// backing off after a failed drain), else 0.
	DeferredOperations *prometheus.GaugeVec
	// OverrideActive is 1 while a valid override file forces the status.
	OverrideActive prometheus.Gauge
	// OverrideErrors counts override files that could not be used (unreadable, invalid).
	OverrideErrors prometheus.Counter
	// BusConnected is 1 while the NATS connection is up (set by the runtime).
	BusConnected prometheus.Gauge
	// LastStatus is the status the agent acts on (0 UNKNOWN .. 9 COMPLETE).
	LastStatus prometheus.Gauge
	// CommandFailures counts failed operation commands, by operation.
	CommandFailures *prometheus.CounterVec
	// DrainFailures counts failed drains (FAILEDCORDON, FAILEDDRAIN) the agent backed off from,
	// by operation and status.
	DrainFailures *prometheus.CounterVec
	// BusDecodeErrors counts status payloads on the bus that did not decode.
	BusDecodeErrors prometheus.Counter
	// StateErrors counts state files that could not be read back or written.
	StateErrors prometheus.Counter
	// StateUnsaved is 1 while the agent's latest state could not be saved (retried with
	// backoff); no operation command starts meanwhile.
	StateUnsaved prometheus.Gauge
	// ForeignStatuses counts status values on the bus answering a request this agent never
	// made; they clear nothing.
	ForeignStatuses prometheus.Counter
	// RefusedStatuses counts statuses the agent would not take, by reason (nodedrain.RefusalReason):
	// unsigned, signed by a key it does not trust, not verifying, stored under another node's key,
	// a server copy, or a replay of an older one. None of them changes anything.
	RefusedStatuses *prometheus.CounterVec
	// StatusDelay observes, for each status the watch delivers after its first snapshot, the
	// time from the coordinator's publication (the status's UpdatedAt) to its arrival here.
	StatusDelay prometheus.Histogram
	// CaughtShutdowns counts shutdowns started outside edgedrain that the agent's logind lock
	// held back, by outcome: drained (let go after COMPLETE), drain-failed (let go undrained after a
	// failed drain), withdrawn (its request withdrawn), undrained (gone ahead before the drain was
	// done, counted at the next boot).
	CaughtShutdowns *prometheus.CounterVec
	// InhibitLocked is 1 while the agent holds its logind delay lock on shutdown.
	InhibitLocked prometheus.Gauge
}

// statusDelayBuckets resolve the delivery delay of a status from a fraction of a millisecond
// on loopback to seconds on a slow or partitioned network.
var statusDelayBuckets = []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DeferredOperations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_agent_deferred_operations",
			Help: "1 for the operation held back until the node is drained (pending, requested, or backing off after a failed drain).",
		}, []string{"operation"}),
		OverrideActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgedrain_agent_override_active",
			Help: "1 while a valid override file forces this node's drain status.",
		}),
		OverrideErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_agent_override_errors_total",
			Help: "Override files that could not be used (unreadable or invalid); they change nothing.",
		}),
		BusConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgedrain_agent_bus_connected",
			Help: "1 while the agent is connected to the NATS bus.",
		}),
		LastStatus: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgedrain_agent_last_status",
			Help: "The drain status the agent acts on (0 UNKNOWN .. 9 COMPLETE, see DESIGN §1), from the bus or the override file.",
		}),
		CommandFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_agent_command_failures_total",
			Help: "Operation commands that failed (non-zero exit, timeout, or a node that did not go down); each is retried.",
		}, []string{"operation"}),
		DrainFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_agent_drain_failures_total",
			Help: "Failed drains (FAILEDCORDON, FAILEDDRAIN) after which the agent withdrew its request and backed off.",
		}, []string{"operation", "status"}),
		BusDecodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_agent_bus_decode_errors_total",
			Help: "Drain status payloads on the bus that did not decode; they change nothing.",
		}),
		StateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_agent_state_errors_total",
			Help: "State files that could not be read back (moved aside) or written.",
		}),
		StateUnsaved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgedrain_agent_state_unsaved",
			Help: "1 while the agent's latest state could not be saved to its state file (retried with backoff); no operation command starts meanwhile.",
		}),
		ForeignStatuses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_agent_foreign_statuses_total",
			Help: "Drain statuses on the bus for a request this agent never made (another agent under this node's name, a lost state file, or a forgery); they clear nothing.",
		}),
		RefusedStatuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_agent_refused_statuses_total",
			Help: "Drain statuses under this node's key the agent refused, by reason: unsigned, untrusted-key, bad-signature, wrong-key, copied (a server copy of another message), replayed (older than one already taken); they change nothing.",
		}, []string{"reason"}),
		StatusDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edgedrain_agent_status_delay_seconds",
			Help:    "Time from the coordinator's publication of this node's status (its UpdatedAt) to its arrival at the agent's watch; includes any clock offset between the two machines.",
			Buckets: statusDelayBuckets,
		}),
		CaughtShutdowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_agent_caught_shutdowns_total",
			Help: "Shutdowns and reboots started outside edgedrain (systemctl reboot, a power button) that the agent's logind lock held back, by outcome: drained (let go after COMPLETE), drain-failed (let go undrained after a failed drain), withdrawn (let go undrained: its request was withdrawn), undrained (went ahead before the drain was done: logind's delay ran out or the lock was lost; counted at the next boot).",
		}, []string{"outcome"}),
		InhibitLocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgedrain_agent_inhibit_locked",
			Help: "1 while the agent holds its logind delay lock on shutdown (--catch-shutdown): a reboot typed on the node waits for its drain.",
		}),
	}
	for _, o := range []string{"drained", "drain-failed", "withdrawn", "undrained"} {
		m.CaughtShutdowns.WithLabelValues(o)
	}
	for _, r := range nodedrain.RefusalReasons() {
		m.RefusedStatuses.WithLabelValues(r)
	}
	for _, op := range Operations {
		m.DeferredOperations.WithLabelValues(string(op))
		m.CommandFailures.WithLabelValues(string(op))
	}
	if reg != nil {
		reg.MustRegister(m.DeferredOperations, m.OverrideActive, m.OverrideErrors, m.BusConnected, m.LastStatus,
			m.CommandFailures, m.DrainFailures, m.BusDecodeErrors, m.StateErrors, m.StateUnsaved, m.ForeignStatuses, m.RefusedStatuses, m.StatusDelay,
			m.CaughtShutdowns, m.InhibitLocked)
	}
	return m
}

// observe sets the gauges from the machine.
func (m *Metrics) observe(mc Machine) {
	for _, op := range Operations {
		v := 0.0
		if mc.State.Operation == op && mc.State.Phase.deferred() {
			v = 1
		}
		m.DeferredOperations.WithLabelValues(string(op)).Set(v)
	}
	active := 0.0
	if mc.Override != nil {
		active = 1
	}
	m.OverrideActive.Set(active)
	m.LastStatus.Set(float64(mc.Effective().Status))
}
