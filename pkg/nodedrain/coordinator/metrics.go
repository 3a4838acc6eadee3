package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Metrics are the coordinator's Prometheus metrics (DESIGN §6).
type Metrics struct {
	// CompletionTime observes request-to-end time by requester and result (COMPLETE,
	// FAILEDCORDON, FAILEDDRAIN, NOTSUPPORTED, WITHDRAWN).
	CompletionTime *prometheus.HistogramVec
	// Status is each node's current status number.
	Status *prometheus.GaugeVec
	// CordonAttempts counts cordon attempts by result (ok, error).
	CordonAttempts *prometheus.CounterVec
	// EvictionAttempts counts eviction attempts by result (ok, error).
	EvictionAttempts *prometheus.CounterVec
	// CordonedByEdgedrain is 1 for each node edgedrain has cordoned and not yet uncordoned.
	CordonedByEdgedrain *prometheus.GaugeVec
	// BlockedPods is how many pods refuse to leave each node.
	BlockedPods *prometheus.GaugeVec
	// BlockedVolumes is how many volumes hold each node's drain back.
	BlockedVolumes *prometheus.GaugeVec
	// BusDecodeErrors counts bus payloads that failed to decode, by bucket.
	BusDecodeErrors *prometheus.CounterVec
	// FencedWrites counts status writes refused because another coordinator had written its
	// term record since this one's (it took over): in API-outage mode, or after a pause.
	FencedWrites prometheus.Counter
	// ForgedRequests counts request changes that were server copies of another key's message
	// (a client redirected a reply into a node's request key); they were ignored.
	ForgedRequests prometheus.Counter
	// ForgedStatuses counts values under a node's status key that the coordinator did not write
	// (a server copy, unsigned, or not verifying under a trusted key), by reason; each is
	// repaired (the coordinator's own status put back, or the key emptied).
	ForgedStatuses *prometheus.CounterVec
	// HeldSeconds accumulates the time drains waited in REQUESTED held by the maintenance
	// policy, by reason (window, blockers, preflight, checking, policy-invalid); Held is how
	// many wait now.
	HeldSeconds *prometheus.CounterVec
	Held        *prometheus.GaugeVec
	// ReturnGate observes how long nodes back from their operation held their slot, by result
	// (healthy, timeout, new-request).
	ReturnGate *prometheus.HistogramVec
	// StaleReleases counts admission slots released by COMPLETE nodes that never came back.
	StaleReleases prometheus.Counter
	// AdmissionDecision observes each admission pass (the nodes' view, the maintenance
	// policy's holds and nodedrain.AdmitWith), run after every event.
	AdmissionDecision prometheus.Histogram
	// UndrainedReboots counts nodes seen booting again while a drain request of theirs had not
	// reached COMPLETE (rebooted.go).
	UndrainedReboots prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		CompletionTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edgedrain_drain_completion_time_seconds",
			Help:    "Time from a drain request to its end (COMPLETE or another result), by requester and result.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 15), // 0.5 s .. ~2.3 h
		}, []string{"requester", "result"}),
		Status: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_drain_status",
			Help: "Current drain status of each node (0 UNKNOWN .. 9 COMPLETE, see DESIGN §1).",
		}, []string{"node"}),
		CordonAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_cordon_attempts_total",
			Help: "Cordon attempts, by result.",
		}, []string{"result"}),
		EvictionAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_eviction_attempts_total",
			Help: "Eviction attempts (each evicts every pod of the node), by result.",
		}, []string{"result"}),
		CordonedByEdgedrain: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_node_cordoned_by_edgedrain",
			Help: "1 while edgedrain holds the node cordoned (it uncordons it when the request is withdrawn).",
		}, []string{"node"}),
		BlockedPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_blocked_pods",
			Help: "Pods refusing to leave each node being drained.",
		}, []string{"node"}),
		BlockedVolumes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_blocked_volumes",
			Help: "Volumes not yet safe elsewhere, holding each node's drain back.",
		}, []string{"node"}),
		BusDecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_bus_decode_errors_total",
			Help: "Bus payloads rejected because they failed to decode, by bucket.",
		}, []string{"bucket"}),
		FencedWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_coordinator_fenced_writes_total",
			Help: "Status writes refused because another coordinator had taken over (its term record is newer): in API-outage mode, or after a pause between the Lease check and the write.",
		}),
		ForgedRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_coordinator_forged_requests_total",
			Help: "Drain request changes ignored because the server wrote them as a copy of another key's message (a client redirected a reply into a node's request key).",
		}),
		ForgedStatuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_coordinator_forged_statuses_total",
			Help: "Values under a node's status key the coordinator did not write, by reason (copied: a server copy of another message; unsigned, untrusted-key, bad-signature, wrong-key); each is repaired.",
		}, []string{"reason"}),
		HeldSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_admission_held_seconds_total",
			Help: "Seconds drains waited in REQUESTED held by the maintenance policy, by reason (window, blockers, preflight, checking, policy-invalid).",
		}, []string{"reason"}),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgedrain_admission_held",
			Help: "Drains waiting in REQUESTED held by the maintenance policy now, by reason.",
		}, []string{"reason"}),
		ReturnGate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edgedrain_return_gate_seconds",
			Help:    "How long nodes back from their operation held their admission slot until healthy, by result (healthy, timeout, new-request).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13), // 1 s .. ~68 min
		}, []string{"result"}),
		StaleReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_stale_slot_releases_total",
			Help: "Admission slots released by COMPLETE nodes that never came back (deleted, or NotReady past --stale-holder-timeout).",
		}),
		AdmissionDecision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edgedrain_admission_decision_seconds",
			Help:    "Time of one admission pass (the nodes' view, the maintenance policy's holds, the decision), run after every event.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14), // 50 µs .. ~0.4 s
		}),
		UndrainedReboots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgedrain_undrained_reboots_total",
			Help: "Nodes that booted again (a new boot ID) while a drain request of theirs had not reached COMPLETE: they went down undrained.",
		}),
	}
	// Each result's series exists from the start at 0: an alert on increase() sees the first
	// timeout (a series born at 1 has no increase to show).
	for _, r := range nodedrain.RefusalReasons() {
		m.ForgedStatuses.WithLabelValues(r)
	}
	for _, r := range []string{nodedrain.ReturnHealthy, nodedrain.ReturnTimedOut, nodedrain.ReturnNewRequest} {
		m.ReturnGate.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.CompletionTime, m.Status, m.CordonedByEdgedrain, m.CordonAttempts, m.EvictionAttempts,
			m.BlockedPods, m.BlockedVolumes, m.BusDecodeErrors, m.FencedWrites, m.ForgedRequests, m.ForgedStatuses,
			m.HeldSeconds, m.Held, m.ReturnGate, m.StaleReleases, m.AdmissionDecision, m.UndrainedReboots)
	}
	return m
}

// observeStatus updates the per-node gauges from a published status.
func (m *Metrics) observeStatus(st nodedrain.NodeDrainStatus) {
	m.Status.WithLabelValues(st.Node).Set(float64(st.Status))
	cordoned := 0.0
	if st.CordonedByUs {
		cordoned = 1
	}
	m.CordonedByEdgedrain.WithLabelValues(st.Node).Set(cordoned)
	pods, volumes := 0, 0
	for _, b := range st.Blockers {
		switch b.Kind {
		case nodedrain.BlockerPod:
			pods++
		case nodedrain.BlockerVolume:
			volumes++
		}
	}
	m.BlockedPods.WithLabelValues(st.Node).Set(float64(pods))
	m.BlockedVolumes.WithLabelValues(st.Node).Set(float64(volumes))
}

// resetNodes forgets every node's gauges: a replica that does not lead exports none (a former
// leader's would go on saying a drain is under way), and one that starts leading sets them from
// the drains it resumed.
func (m *Metrics) resetNodes() {
	m.Status.Reset()
	m.CordonedByEdgedrain.Reset()
	m.BlockedPods.Reset()
	m.BlockedVolumes.Reset()
}

// forgetNode removes node's gauges (a decommissioned node, forgotten).
func (m *Metrics) forgetNode(node string) {
	m.Status.DeleteLabelValues(node)
	m.CordonedByEdgedrain.DeleteLabelValues(node)
	m.BlockedPods.DeleteLabelValues(node)
	m.BlockedVolumes.DeleteLabelValues(node)
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
