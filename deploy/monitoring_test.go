package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/policy"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// exported returns the metric names the binaries export, histograms with their series.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	for _, c := range collectors() {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			require.NotNil(t, m, d.String())
			names[m[1]] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
	}
	return names
}

func collectors() []prometheus.Collector {
	reg := &collecting{}
	coordinator.NewMetrics(reg)
	volumes.NewMetrics(reg)
	// The policy watcher's metrics (it only registers them here: it is not started).
	if _, err := policy.NewSource(policy.SourceConfig{Client: fake.NewClientset(), Namespace: "edgedrain-system", Name: "edgedrain-policy",
		Registerer: reg}); err != nil {
		panic(err)
	}
	registerAgentMetrics(reg)
	// Both programs' bus probes (they only register their gauges here).
	for _, name := range []string{cli.CoordinatorBusMetric, cli.AgentBusMetric} {
		cli.NewBusProbe(nil, nil, reg, name, logrus.New())
	}
	return reg.cs
}

// collecting is a Registerer that keeps what is registered.
type collecting struct{ cs []prometheus.Collector }

func (c *collecting) Register(col prometheus.Collector) error { c.cs = append(c.cs, col); return nil }
func (c *collecting) MustRegister(cs ...prometheus.Collector) { c.cs = append(c.cs, cs...) }
func (c *collecting) Unregister(prometheus.Collector) bool    { return true }

var metricName = regexp.MustCompile(`\bedgedrain_[a-z_]+\b`)

// checkExpr checks an expression refers only to exported metrics (its syntax is promtool's to
// check: promtoolCheck).
func checkExpr(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	require.NotEmpty(t, strings.TrimSpace(expr), where)
	found := metricName.FindAllString(expr, -1)
	assert.NotEmpty(t, found, "%s: no edgedrain metric in %s", where, expr)
	for _, m := range found {
		assert.True(t, names[m], "%s refers to %s, which no binary exports", where, m)
	}
}

// promtool runs Prometheus's promtool (Debian's prometheus package; .ci/run installs it) and
// fails the test with its output if it fails.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool not found: install Debian's prometheus package (.ci/run does)")
	out, err := exec.Command(path, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// The alert rules pass promtool's check, and its unit tests (monitoring/alerts_test.yaml): each
// alert fires on a synthetic series in trouble, stays quiet on a healthy one beside it, and
// renders its annotations.
func TestAlertRulesPromtool(t *testing.T) {
	assert.Contains(t, promtool(t, "check", "rules", "monitoring/alerts.yaml"), "SUCCESS")
	assert.Contains(t, promtool(t, "test", "rules", "monitoring/alerts_test.yaml"), "SUCCESS")

	// Every alert has a case where it fires.
	data, err := os.ReadFile("monitoring/alerts_test.yaml")
	require.NoError(t, err)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(data, &tests))
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	for _, name := range alertNames(t) {
		assert.True(t, fires[name], "monitoring/alerts_test.yaml has no case where %s fires", name)
	}
}

func alertNames(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("monitoring/alerts.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(data, &file))
	var out []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Alert)
		}
	}
	return out
}

func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile("monitoring/alerts.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.UnmarshalStrict(data, &file))
	names := exported(t)
	seen := map[string]bool{}
	var alerts []string
	for _, g := range file.Groups {
		require.NotEmpty(t, g.Rules)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			assert.False(t, seen[r.Alert], "duplicate alert %s", r.Alert)
			seen[r.Alert] = true
			alerts = append(alerts, r.Alert)
			checkExpr(t, r.Alert, r.Expr, names)
			assert.Contains(t, []string{"info", "warning", "critical"}, r.Labels["severity"], r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
			if r.For != "" {
				assert.Regexp(t, `^\d+[smh]$`, r.For, r.Alert)
			}
		}
	}
	sort.Strings(alerts)
	for _, want := range []string{"EdgedrainDrainFailed", "EdgedrainDrainStuck", "EdgedrainNodeCordonedTooLong"} {
		assert.Contains(t, alerts, want)
	}
}

func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("monitoring/dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash))
	require.NotEmpty(t, dash.Panels)
	names := exported(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			checkExpr(t, p.Title, tg.Expr, names)
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				used[m] = true
			}
		}
	}
	for _, m := range []string{"edgedrain_drain_completion_time_seconds_bucket", "edgedrain_drain_status", "edgedrain_blocked_volumes", "edgedrain_blocked_pods"} {
		assert.True(t, used[m], "dashboard does not show %s", m)
	}

	// Prometheus's own PromQL parser reads every query: promtool checks them as recording rules,
	// Grafana's interval variables given a value.
	rules := "groups:\n- name: dashboard\n  rules:\n"
	i := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h").Replace(tg.Expr)
			quoted, err := json.Marshal(expr)
			require.NoError(t, err)
			rules += fmt.Sprintf("  - record: dashboard:query_%d\n    expr: %s\n", i, quoted)
			i++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rules), 0o600))
	assert.Contains(t, promtool(t, "check", "rules", path), fmt.Sprintf("SUCCESS: %d rules found", i))
}

// The monitoring guide explains every metric the binaries export (the generated reference,
// docs/reference/metrics.md, lists them; this keeps the prose from falling behind).
func TestMonitoringGuideExplainsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../docs/operations/monitoring.md")
	require.NoError(t, err)
	for name := range exported(t) {
		if strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") {
			continue
		}
		assert.True(t, strings.Contains(string(readme), name), "docs/operations/monitoring.md does not mention %s", name)
	}
}
