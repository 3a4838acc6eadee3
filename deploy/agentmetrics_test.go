package deploy_test

import "github.com/prometheus/client_golang/prometheus"

// registerAgentMetrics registers the agent's metrics (wired once the agent package exists).
func registerAgentMetrics(prometheus.Registerer) {}
