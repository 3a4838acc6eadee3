package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// examplePolicy is the policy of DESIGN §9's example, every field set.
const examplePolicy = `
windows:
  default:
    days: [Mon, Tue, Wed, Thu, Fri]
    start: "22:00"
    end: "04:00"
    timeZone: Europe/Berlin
  UPDATE:
    days: [saturday, SUN]
    start: "01:00"
    end: "05:00"
  DEVICEOP: {}
blockers:
  podSelector: "app=critical-batch"
  prometheus:
    url: http://prometheus.monitoring:9090
    timeout: 15s
    alerts:
      include: "^(NodeDown|.*Critical)$"
      exclude: "^Watchdog$"
    queries:
      - 'sum(rate(http_errors_total[5m])) > 10'
order:
  requesterPriority: {DEVICEOP: 10, UPDATE: -1}
  nodePriority:
    - selector: "!node-role.kubernetes.io/control-plane"
      priority: 5
    - selector: ""
      priority: 1
  failureDomainLabel: topology.kubernetes.io/zone
`

func TestParseExample(t *testing.T) {
	c, err := Parse([]byte(examplePolicy))
	require.NoError(t, err)

	require.Len(t, c.Windows, 3)
	assert.Equal(t, "Mon-Fri 22:00-04:00 Europe/Berlin", c.Windows["default"].String())
	assert.Equal(t, "Sat,Sun 01:00-05:00 UTC", c.Windows["UPDATE"].String())
	assert.Equal(t, []time.Weekday{time.Saturday, time.Sunday}, c.Windows["UPDATE"].Days, "days Monday first")
	assert.True(t, c.Windows["DEVICEOP"].Always, "an empty window is always open")
	assert.Equal(t, "always", c.WindowFor(nodedrain.RequesterDeviceOp).String(), "DEVICEOP's own window overrides default")
	assert.Equal(t, "Sat,Sun 01:00-05:00 UTC", c.WindowFor(nodedrain.RequesterUpdate).String())
	assert.Equal(t, "Mon-Fri 22:00-04:00 Europe/Berlin", c.WindowFor(nodedrain.RequesterNone).String(), "default for requesters without a window")
	assert.Equal(t, "Mon-Fri 22:00-04:00 Europe/Berlin", c.WindowFor(0).String(), "default for an unset requester")

	b := c.Blockers
	require.NotNil(t, b.PodSelector)
	assert.Equal(t, "app=critical-batch", b.PodSelectorText)
	assert.True(t, b.PodSelector.Matches(labels.Set{"app": "critical-batch"}))
	assert.False(t, b.PodSelector.Matches(labels.Set{"app": "web"}))
	require.NotNil(t, b.Prometheus)
	assert.Equal(t, "http://prometheus.monitoring:9090", b.Prometheus.URL)
	assert.Equal(t, 15*time.Second, b.Prometheus.Timeout)
	assert.Equal(t, []string{"sum(rate(http_errors_total[5m])) > 10"}, b.Prometheus.Queries)
	require.NotNil(t, b.Prometheus.Alerts)
	assert.True(t, b.Prometheus.Alerts.Matches("NodeDown"))
	assert.True(t, b.Prometheus.Alerts.Matches("DiskCritical"))
	assert.False(t, b.Prometheus.Alerts.Matches("NodeDownSoon"))

	o := c.Order
	assert.Equal(t, map[nodedrain.Requester]int{nodedrain.RequesterDeviceOp: 10, nodedrain.RequesterUpdate: -1}, o.RequesterPriority)
	require.Len(t, o.NodePriority, 2)
	assert.Equal(t, 5, o.NodePriority[0].Priority)
	assert.Equal(t, "topology.kubernetes.io/zone", o.FailureDomainLabel)
	assert.Equal(t, 15, o.Priority(map[string]string{}, nodedrain.RequesterDeviceOp))
	assert.Equal(t, 1+10, o.Priority(map[string]string{"node-role.kubernetes.io/control-plane": ""}, nodedrain.RequesterDeviceOp), "the empty selector matches the rest")
}

// The example ConfigMap shipped beside the manifests holds a valid policy.
func TestParseShippedExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "policy-configmap.example.yaml"))
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict(raw, &cm))
	assert.Equal(t, DefaultName, cm.Name)
	assert.Equal(t, DefaultNamespace, cm.Namespace)
	c, err := Parse([]byte(cm.Data[DefaultKey]))
	require.NoError(t, err)
	assert.Equal(t, "Mon-Fri 22:00-04:00 Europe/Berlin", c.WindowFor(nodedrain.RequesterNone).String())
	assert.Equal(t, "always", c.WindowFor(nodedrain.RequesterDeviceOp).String())
	assert.NotNil(t, c.Blockers.Prometheus)
}

func TestParseEmpty(t *testing.T) {
	for name, in := range map[string]string{"nothing": "", "a comment": "# no policy yet\n", "null": "~", "empty mapping": "{}",
		"empty sections": "windows: {}\nblockers: {}\norder: {}", "null sections": "windows:\nblockers:\norder:"} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(in))
			require.NoError(t, err)
			assert.True(t, c.WindowFor(nodedrain.RequesterUpdate).Always)
			assert.Nil(t, c.Blockers.PodSelector)
			assert.Nil(t, c.Blockers.Prometheus)
			assert.Zero(t, c.Order.Priority(map[string]string{"a": "b"}, nodedrain.RequesterUpdate))
			assert.Empty(t, c.Order.Domain(map[string]string{"topology.kubernetes.io/zone": "a"}))
		})
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte("windows:\n  UPDATE:\n    days: [Mon]\n  NONE:\nblockers:\n  podSelector: \"\"\n  prometheus:\n    url: https://prom:9090/prefix/\n    alerts: {}\n"))
	require.NoError(t, err)
	assert.Equal(t, "Mon all day UTC", c.Windows["UPDATE"].String(), "days without times: whole days")
	assert.True(t, c.Windows["NONE"].Always, "a window with nothing in it is always open")
	assert.Nil(t, c.Blockers.PodSelector, "an empty podSelector selects no pods")
	require.NotNil(t, c.Blockers.Prometheus)
	assert.Equal(t, DefaultPrometheusTimeout, c.Blockers.Prometheus.Timeout)
	require.NotNil(t, c.Blockers.Prometheus.Alerts, "alerts: {} checks alerts")
	assert.True(t, c.Blockers.Prometheus.Alerts.Matches("Anything"), "an empty filter matches every alert")
}

func TestParseErrors(t *testing.T) {
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
	for _, tc := range []struct {
		name string
		in   string
		want []string // each must appear in the error
	}{
		{"unknown top-level field", "window: {}", []string{"window: unknown field (want windows, blockers, order)"}},
		{"field names are case-sensitive", "Windows: {}", []string{"Windows: unknown field"}},
		{"unknown window field", "windows: {default: {day: [Mon]}}", []string{"windows.default.day: unknown field"}},
		{"unknown requester", "windows: {REBOOT: {}}", []string{"windows.REBOOT: unknown requester (want default or one of NONE, DEVICEOP, UPDATE)"}},
		{"requester as a number", "windows: {\"2\": {}}", []string{"windows.2: unknown requester"}},
		{"requester twice", "windows: {UPDATE: {}, update: {}}", []string{"window for UPDATE given twice"}},
		{"windows a list", "windows: [default]", []string{"windows: want a mapping, got a list"}},
		{"bad day", "windows: {default: {days: [Mon, Funday]}}", []string{"windows.default.days[1]: \"Funday\" is not a weekday"}},
		{"days a string", "windows: {default: {days: Mon}}", []string{"windows.default.days: want a list, got the string \"Mon\""}},
		{"null day", "windows: {default: {days: [Mon, ~]}}", []string{"windows.default.days[1]: empty entry"}},
		{"bad start", "windows: {UPDATE: {start: \"25:00\", end: \"01:00\"}}", []string{"windows.UPDATE.start: \"25:00\" is not a time of day"}},
		{"start a number", "windows: {UPDATE: {start: 2200, end: \"01:00\"}}", []string{"windows.UPDATE.start: want a string, got the number 2200"}},
		{"start without end", "windows: {UPDATE: {start: \"01:00\"}}", []string{"windows.UPDATE.end: required with start"}},
		{"end without start", "windows: {UPDATE: {end: \"01:00\"}}", []string{"windows.UPDATE.start: required with end"}},
		{"unknown zone", "windows: {default: {timeZone: Mars/Olympus}}", []string{"windows.default.timeZone: unknown time zone \"Mars/Olympus\""}},
		{"Local zone", "windows: {default: {timeZone: Local}}", []string{"windows.default.timeZone: \"Local\" is not an IANA time zone name"}},
		{"bad pod selector", "blockers: {podSelector: \"app in (\"}", []string{"blockers.podSelector: invalid label selector"}},
		{"prometheus without url", "blockers: {prometheus: {timeout: 5s}}", []string{"blockers.prometheus.url: required"}},
		{"prometheus url scheme", "blockers: {prometheus: {url: \"ftp://p:9090\"}}", []string{"blockers.prometheus.url: \"ftp://p:9090\" must start with http:// or https://"}},
		{"prometheus url without host", "blockers: {prometheus: {url: \"http:///x\"}}", []string{"blockers.prometheus.url: \"http:///x\" has no host"}},
		{"prometheus url password hidden", "blockers: {prometheus: {url: \"ftp://u:secret@p\"}}", []string{"blockers.prometheus.url: \"ftp://u:xxxxx@p\""}},
		{"prometheus url with query", "blockers: {prometheus: {url: \"http://p:9090/?a=b\"}}", []string{"must not carry a query"}},
		{"bad timeout", "blockers: {prometheus: {url: \"http://p\", timeout: soon}}", []string{"blockers.prometheus.timeout: \"soon\" is not a duration"}},
		{"timeout a number", "blockers: {prometheus: {url: \"http://p\", timeout: 10}}", []string{"blockers.prometheus.timeout: want a string, got the number 10"}},
		{"timeout zero", "blockers: {prometheus: {url: \"http://p\", timeout: 0s}}", []string{"blockers.prometheus.timeout: 0s is outside"}},
		{"timeout too long", "blockers: {prometheus: {url: \"http://p\", timeout: 1h}}", []string{"blockers.prometheus.timeout: 1h is outside"}},
		{"bad include", "blockers: {prometheus: {url: \"http://p\", alerts: {include: \"(\"}}}", []string{"blockers.prometheus.alerts.include: invalid regular expression"}},
		{"unknown alerts field", "blockers: {prometheus: {url: \"http://p\", alerts: {match: x}}}", []string{"blockers.prometheus.alerts.match: unknown field (want include, exclude)"}},
		{"empty query", "blockers: {prometheus: {url: \"http://p\", queries: [up, \" \"]}}", []string{"blockers.prometheus.queries[1]: empty query"}},
		{"query a mapping", "blockers: {prometheus: {url: \"http://p\", queries: [{expr: up}]}}", []string{"blockers.prometheus.queries[0]: want a string, got a mapping"}},
		{"requester priority not a number", "order: {requesterPriority: {UPDATE: high}}", []string{"order.requesterPriority.UPDATE: want a whole number, got the string \"high\""}},
		{"requester priority a fraction", "order: {requesterPriority: {UPDATE: 1.5}}", []string{"order.requesterPriority.UPDATE: want a whole number from -1000000 to 1000000, got 1.5"}},
		{"requester priority huge", "order: {requesterPriority: {UPDATE: 99999999999999999999}}", []string{"order.requesterPriority.UPDATE: want a whole number from"}},
		{"requester priority default", "order: {requesterPriority: {default: 1}}", []string{"order.requesterPriority.default: unknown requester (want one of NONE, DEVICEOP, UPDATE)"}},
		{"node priority bad selector", "order: {nodePriority: [{selector: \"app in (\", priority: 1}]}", []string{"order.nodePriority[0].selector: invalid label selector"}},
		{"node priority unknown field", "order: {nodePriority: [{selector: a, priority: 1, weight: 2}]}", []string{"order.nodePriority[0].weight: unknown field"}},
		{"node priority missing fields", "order: {nodePriority: [{}]}", []string{"order.nodePriority[0].selector: required", "order.nodePriority[0].priority: required"}},
		{"node priority a string", "order: {nodePriority: [x]}", []string{"order.nodePriority[0]: want a mapping, got the string \"x\""}},
		{"bad failure domain label", "order: {failureDomainLabel: \"not a label\"}", []string{"order.failureDomainLabel: \"not a label\" is not a label key"}},
		{"every problem reported", "windows: {default: {days: [Xday]}}\norder: {failureDomainLabel: \"-\"}", []string{"windows.default.days[0]", "order.failureDomainLabel"}},

		{"a list instead of a mapping", "- windows\n- order\n", []string{"line 1: the policy must be a mapping (windows, blockers, order), not a list"}},
		{"a scalar instead of a mapping", "hello", []string{"not the scalar \"hello\""}},
		{"duplicate key", "windows: {}\nwindows: {}\n", []string{"\"windows\" already set"}},
		{"syntax error", "windows: {default: [\n", []string{"invalid maintenance policy", "yaml"}},
		{"tabs", "windows:\n\tdefault: {}\n", []string{"yaml"}},
		{"two documents", "windows: {}\n---\norder: {}\n", []string{"line 2: a second YAML document"}},
		{"anchor", "windows:\n  default: &w {start: \"01:00\", end: \"02:00\"}\n  UPDATE: *w\n", []string{"line 2: anchor &w: anchors and aliases are not allowed"}},
		{"billion laughs", bomb, []string{"anchors and aliases are not allowed"}},
		{"merge key", "windows:\n  default:\n    <<: {start: \"01:00\"}\n    end: \"02:00\"\n", []string{"merge keys (<<) are not allowed"}},
		{"not UTF-8", "windows: {default: {timeZone: \"\xff\xfe\"}}", []string{"not UTF-8 text (invalid byte at offset 31)"}},
		{"too large", "# " + strings.Repeat("x", MaxSize), []string{"more than the limit of 262144"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalid)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestWindowFor(t *testing.T) {
	def := Window{Start: 60, End: 120}
	upd := Window{Days: []time.Weekday{time.Sunday}}
	for _, tc := range []struct {
		name string
		c    *Config
		r    nodedrain.Requester
		want Window
	}{
		{"nil config", nil, nodedrain.RequesterUpdate, AlwaysOpen},
		{"empty config", &Config{}, nodedrain.RequesterUpdate, AlwaysOpen},
		{"own window", &Config{Windows: map[string]Window{"default": def, "UPDATE": upd}}, nodedrain.RequesterUpdate, upd},
		{"default", &Config{Windows: map[string]Window{"default": def, "UPDATE": upd}}, nodedrain.RequesterDeviceOp, def},
		{"invalid requester gets default", &Config{Windows: map[string]Window{"default": def}}, nodedrain.Requester(7), def},
		{"no default", &Config{Windows: map[string]Window{"UPDATE": upd}}, nodedrain.RequesterDeviceOp, AlwaysOpen},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, tc.c.WindowFor(tc.r)) })
	}
}

func TestAlertFilterMatches(t *testing.T) {
	c, err := Parse([]byte("blockers: {prometheus: {url: \"http://p\", alerts: {include: Critical, exclude: \"^Watchdog\"}}}"))
	require.NoError(t, err)
	f := c.Blockers.Prometheus.Alerts
	for _, tc := range []struct {
		f    *AlertFilter
		name string
		want bool
	}{
		{f, "DiskCritical", true},
		{f, "CriticalLoad", true}, // unanchored
		{f, "WatchdogCritical", false},
		{f, "NodeDown", false},
		{&AlertFilter{}, "NodeDown", true},
		{nil, "NodeDown", false},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, tc.f.Matches(tc.name)) })
	}
}

// Parse never panics, and what it accepts is usable: every window answers Open.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{examplePolicy, "", "~", "- a", "windows: {default: {days: [Mon], start: \"23:59\", end: \"00:00\", timeZone: Pacific/Apia}}",
		"a: &a [x]\nb: *a", "order: {nodePriority: [{selector: \"a in (b)\", priority: -1000000}]}", "blockers: {prometheus: {url: \"http://[::1]:9\"}}",
		"windows: {UPDATE: {start: \"1:00\", end: \"1:00\"}}\n---\n", "{windows: {default: {days: [mon, MONDAY]}}}"} {
		f.Add([]byte(seed))
	}
	now := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			require.Nil(t, c)
			return
		}
		require.NotNil(t, c)
		for _, r := range []nodedrain.Requester{nodedrain.RequesterNone, nodedrain.RequesterDeviceOp, nodedrain.RequesterUpdate} {
			w := c.WindowFor(r)
			if open, next := w.Open(now); !open {
				require.True(t, next.After(now), "window %s: next %s", w, next)
			}
			_ = w.String()
		}
		_ = c.Order.Priority(map[string]string{"a": "b"}, nodedrain.RequesterUpdate)
	})
}
