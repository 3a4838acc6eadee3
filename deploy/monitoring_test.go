package deploy_test

import (
	"encoding/json"
	"os"
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

// checkExpr checks an expression is balanced and refers only to exported metrics.
func checkExpr(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	require.NotEmpty(t, strings.TrimSpace(expr), where)
	depth := map[rune]int{}
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range expr {
		switch r {
		case '(', '[', '{':
			depth[r]++
		case ')', ']', '}':
			depth[pairs[r]]--
			require.GreaterOrEqual(t, depth[pairs[r]], 0, "%s: unbalanced %q in %s", where, r, expr)
		}
	}
	for r, d := range depth {
		assert.Zero(t, d, "%s: unbalanced %q in %s", where, r, expr)
	}
	found := metricName.FindAllString(expr, -1)
	assert.NotEmpty(t, found, "%s: no edgedrain metric in %s", where, expr)
	for _, m := range found {
		assert.True(t, names[m], "%s refers to %s, which no binary exports", where, m)
	}
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
}

// README's metrics section names every metric the binaries export.
func TestReadmeListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for name := range exported(t) {
		if strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") {
			continue
		}
		assert.True(t, strings.Contains(string(readme), name), "README does not mention %s", name)
	}
}
