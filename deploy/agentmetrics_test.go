package deploy_test

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// registerAgentMetrics registers the agent's metrics.
func registerAgentMetrics(reg prometheus.Registerer) { agent.NewMetrics(reg) }
