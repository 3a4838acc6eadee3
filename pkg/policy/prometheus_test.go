package policy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

const (
	promWait = 10 * time.Second
	promTick = 50 * time.Millisecond
)

// promCheck builds a checker for cfg (URL and timeout filled in when empty) and runs one Check;
// every blocker it returns must be valid on the wire.
func promCheck(t *testing.T, url string, cfg Prometheus) ([]nodedrain.Blocker, error) {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = url
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	c, err := NewPromChecker(cfg)
	require.NoError(t, err)
	bs, err := c.Check(context.Background())
	if len(bs) > 0 {
		require.NoError(t, nodedrain.NodeDrainStatus{Node: "n1", Status: 1, Blockers: bs}.Validate())
	}
	return bs, err
}

// blockerNames returns the blockers' names.
func blockerNames(bs []nodedrain.Blocker) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return out
}

// rawAlerts returns the state of each active alert by name, read from Prometheus directly.
func rawAlerts(t *testing.T, url string) map[string]v1.AlertState {
	t.Helper()
	client, err := api.NewClient(api.Config{Address: url})
	require.NoError(t, err)
	res, err := v1.NewAPI(client).Alerts(context.Background())
	require.NoError(t, err)
	out := map[string]v1.AlertState{}
	for _, a := range res.Alerts {
		out[string(a.Labels[model.AlertNameLabel])] = a.State
	}
	return out
}

// TestPromCheckerAgainstPrometheus runs the checks against one real Prometheus; each subtest
// leaves no alert active.
func TestPromCheckerAgainstPrometheus(t *testing.T) {
	p := testenv.StartPrometheus(t, testenv.PrometheusOptions{})
	p.WaitScraped(15 * time.Second)
	allAlerts := Prometheus{Alerts: &AlertFilter{}}
	noneActive := func(t *testing.T) {
		t.Helper()
		require.Eventually(t, func() bool { return len(rawAlerts(t, p.URL)) == 0 }, promWait, promTick,
			"alerts still active")
	}

	t.Run("a firing alert blocks until it resolves", func(t *testing.T) {
		p.Set("TestAlert", 1)
		want := []nodedrain.Blocker{{Kind: BlockerAlert, Name: "TestAlert", Reason: fmt.Sprintf(
			`alert firing {alert="TestAlert", instance=%q, job="test-exporter", severity="critical"}`, p.Target)}}
		var got []nodedrain.Blocker
		require.Eventually(t, func() bool {
			var err error
			got, err = promCheck(t, p.URL, allAlerts)
			require.NoError(t, err)
			return len(got) > 0
		}, promWait, promTick, "the firing alert never blocked")
		assert.Equal(t, want, got)

		p.Set("TestAlert", 0)
		require.Eventually(t, func() bool {
			got, err := promCheck(t, p.URL, allAlerts)
			require.NoError(t, err)
			return len(got) == 0
		}, promWait, promTick, "the resolved alert still blocks")
		noneActive(t)
	})

	t.Run("a pending alert does not block", func(t *testing.T) {
		p.Set("PendingAlert", 1)
		require.Eventually(t, func() bool { return rawAlerts(t, p.URL)["PendingAlert"] == v1.AlertStatePending },
			promWait, promTick, "PendingAlert never became pending")
		got, err := promCheck(t, p.URL, allAlerts)
		require.NoError(t, err)
		assert.Empty(t, got)
		require.Equal(t, v1.AlertStatePending, rawAlerts(t, p.URL)["PendingAlert"], "no longer pending after the check")
		p.Delete("PendingAlert")
		noneActive(t)
	})

	t.Run("include and exclude filter the alerts", func(t *testing.T) {
		p.Set("TestAlert", 1)
		p.Set("OtherAlert", 1)
		require.Eventually(t, func() bool {
			got, err := promCheck(t, p.URL, allAlerts)
			require.NoError(t, err)
			return len(got) == 2
		}, promWait, promTick, "both alerts never blocked")
		for _, tc := range []struct {
			name             string
			include, exclude string
			want             []string
		}{
			{"no filter", "", "", []string{"OtherAlert", "TestAlert"}},
			{"include", "^Test", "", []string{"TestAlert"}},
			{"exclude", "", "^Test", []string{"OtherAlert"}},
			{"include and exclude", "Alert$", "Other", []string{"TestAlert"}},
			{"include matching none", "^Nope", "", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := &AlertFilter{}
				if tc.include != "" {
					f.Include = regexp.MustCompile(tc.include)
				}
				if tc.exclude != "" {
					f.Exclude = regexp.MustCompile(tc.exclude)
				}
				got, err := promCheck(t, p.URL, Prometheus{Alerts: f})
				require.NoError(t, err)
				assert.Equal(t, tc.want, blockerNames(got))
			})
		}
		t.Run("alerts not checked", func(t *testing.T) {
			got, err := promCheck(t, p.URL, Prometheus{Queries: []string{`vector(1) > 2`}})
			require.NoError(t, err)
			assert.Empty(t, got)
		})
		p.Set("TestAlert", 0)
		p.Set("OtherAlert", 0)
		noneActive(t)
	})

	t.Run("a query with series blocks, an empty one does not", func(t *testing.T) {
		p.Set("Query", 5)
		blocking := `test_blocking_value{alert="Query"} > 1`
		cfg := Prometheus{Queries: []string{blocking, `test_blocking_value{alert="Query"} > 10`}}
		want := []nodedrain.Blocker{{Kind: BlockerQuery, Name: blocking, Reason: fmt.Sprintf(
			`returned 1 series, e.g. test_blocking_value{alert="Query", instance=%q, job="test-exporter"} 5`, p.Target)}}
		var got []nodedrain.Blocker
		require.Eventually(t, func() bool {
			var err error
			got, err = promCheck(t, p.URL, cfg)
			require.NoError(t, err)
			return len(got) > 0
		}, promWait, promTick, "the query never blocked")
		assert.Equal(t, want, got, "only the first query blocks")

		got, err := promCheck(t, p.URL, Prometheus{Queries: []string{`test_blocking_value{alert="Query"}[5s]`}})
		require.NoError(t, err)
		require.Len(t, got, 1, "a range query with a series")
		assert.Equal(t, fmt.Sprintf(`returned 1 series, e.g. test_blocking_value{alert="Query", instance=%q, job="test-exporter"}`,
			p.Target), got[0].Reason)

		p.Delete("Query")
		require.Eventually(t, func() bool {
			got, err := promCheck(t, p.URL, cfg)
			require.NoError(t, err)
			return len(got) == 0
		}, promWait, promTick, "the query still blocks after its series went away")
	})

	t.Run("a scalar result always blocks", func(t *testing.T) {
		got, err := promCheck(t, p.URL, Prometheus{Queries: []string{"scalar(vector(0))"}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, nodedrain.Blocker{Kind: BlockerQuery, Name: "scalar(vector(0))",
			Reason: "returned the scalar 0; a scalar always blocks: write the query as a filter of series"}, got[0])
	})

	t.Run("a query Prometheus refuses is an error naming it", func(t *testing.T) {
		for _, q := range []string{`up{`, `rate(up)`} {
			got, err := promCheck(t, p.URL, Prometheus{Alerts: &AlertFilter{}, Queries: []string{`vector(0) > 1`, q}})
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Contains(t, err.Error(), fmt.Sprintf("prometheus %s: query %q: bad_data: ", p.URL, q))
		}
	})

	t.Run("an HTTP error names the URL and the status", func(t *testing.T) {
		got, err := promCheck(t, p.URL, Prometheus{URL: p.URL + "/nope", Alerts: &AlertFilter{}})
		require.Error(t, err)
		assert.Nil(t, got)
		assert.Contains(t, err.Error(), fmt.Sprintf("prometheus %s/nope: read alerts: ", p.URL))
		assert.Contains(t, err.Error(), "404")
	})
}

// TestPromCheckerFailsClosedWhenPrometheusStopped checks that a stopped server is an error at
// once (connection refused), not after the timeout.
func TestPromCheckerFailsClosedWhenPrometheusStopped(t *testing.T) {
	p := testenv.StartPrometheus(t, testenv.PrometheusOptions{})
	_, err := promCheck(t, p.URL, Prometheus{Alerts: &AlertFilter{}, Queries: []string{"vector(1)"}})
	require.NoError(t, err, "the running server answers")
	p.Stop()

	for name, cfg := range map[string]Prometheus{
		"alerts":  {Alerts: &AlertFilter{}, Timeout: 5 * time.Second},
		"queries": {Queries: []string{"up"}, Timeout: 5 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			got, err := promCheck(t, p.URL, cfg)
			require.Error(t, err)
			assert.Less(t, time.Since(start), 2*time.Second, "a refused connection waited for the timeout")
			assert.Nil(t, got)
			what := "read alerts"
			if name == "queries" {
				what = `query "up"`
			}
			assert.Contains(t, err.Error(), fmt.Sprintf("prometheus %s: %s: ", p.URL, what))
			assert.Contains(t, err.Error(), "connection refused")

			b := FailClosed(err)
			assert.Equal(t, BlockerPrometheus, b.Kind)
			assert.Equal(t, "prometheus", b.Name)
			assert.Equal(t, "cannot check blockers, failing closed: "+err.Error(), b.Reason)
		})
	}
}

// TestPromCheckerTimesOutOnAServerThatNeverAnswers checks the timeout against a listener that
// accepts connections and never answers, and that the caller's context also ends a check.
func TestPromCheckerTimesOutOnAServerThatNeverAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	url := "http://" + l.Addr().String()
	const timeout = 500 * time.Millisecond

	for name, cfg := range map[string]Prometheus{
		"alerts":  {Alerts: &AlertFilter{}, Timeout: timeout},
		"queries": {Queries: []string{"up"}, Timeout: timeout},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			got, err := promCheck(t, url, cfg)
			took := time.Since(start)
			require.Error(t, err)
			assert.Nil(t, got)
			assert.GreaterOrEqual(t, took, timeout)
			assert.Less(t, took, timeout+2*time.Second)
			assert.Contains(t, err.Error(), fmt.Sprintf("prometheus %s: ", url))
			assert.Contains(t, err.Error(), "no answer within 500ms")
		})
	}

	t.Run("the caller's context", func(t *testing.T) {
		c, err := NewPromChecker(Prometheus{URL: url, Alerts: &AlertFilter{}, Timeout: time.Minute})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.Check(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 5*time.Second)
		assert.Contains(t, err.Error(), "read alerts: interrupted: context deadline exceeded")
	})
}

// TestPromCheckerWarnings uses a stand-in server: Prometheus 2.x warns only when a remote read
// fails, which the test Prometheus has none of.
func TestPromCheckerWarnings(t *testing.T) {
	var result string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s},"warnings":["remote read failed"]}`, result)
	}))
	t.Cleanup(srv.Close)

	result = `[]`
	got, err := promCheck(t, srv.URL, Prometheus{Queries: []string{"up == 0"}})
	assert.Nil(t, got)
	require.Error(t, err, "an empty result with warnings")
	assert.Contains(t, err.Error(), `query "up == 0": no series, but with warnings (the result may be incomplete): remote read failed`)

	result = `[{"metric":{"job":"a"},"value":[1700000000,"0"]}]`
	got, err = promCheck(t, srv.URL, Prometheus{Queries: []string{"up == 0"}})
	require.NoError(t, err, "a result with warnings")
	assert.Equal(t, []nodedrain.Blocker{{Kind: BlockerQuery, Name: "up == 0", Reason: `returned 1 series, e.g. {job="a"} 0`}}, got)
}

func TestNewPromCheckerValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Prometheus
		err  string // "" when valid
	}{
		{"valid", Prometheus{URL: "http://prometheus:9090", Alerts: &AlertFilter{}}, ""},
		{"path prefix and trailing slash", Prometheus{URL: "https://example.org/prom/", Queries: []string{"up"}}, ""},
		{"nothing to check", Prometheus{URL: "http://prometheus:9090"}, ""},
		{"no URL", Prometheus{Alerts: &AlertFilter{}}, "prometheus url: required"},
		{"not http", Prometheus{URL: "ftp://prometheus", Alerts: &AlertFilter{}}, `scheme "ftp", want http or https`},
		{"no host", Prometheus{URL: "http:///x", Alerts: &AlertFilter{}}, "no host"},
		{"query in URL", Prometheus{URL: "http://p:9090/?x=1", Alerts: &AlertFilter{}}, "without query or fragment"},
		{"credentials redacted", Prometheus{URL: "http://u:secret@p:9090#f", Alerts: &AlertFilter{}}, "http://u:xxxxx@p:9090#f"},
		{"negative timeout", Prometheus{URL: "http://p:9090", Timeout: -time.Second, Alerts: &AlertFilter{}}, "timeout -1s is negative"},
		{"empty query", Prometheus{URL: "http://p:9090", Queries: []string{"up", " \n"}}, "query 2 is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewPromChecker(tc.cfg)
			if tc.err == "" {
				require.NoError(t, err)
				require.NotNil(t, c)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			assert.NotContains(t, err.Error(), "secret")
		})
	}

	c, err := NewPromChecker(Prometheus{URL: "http://p:9090", Alerts: &AlertFilter{}})
	require.NoError(t, err)
	assert.Equal(t, DefaultPrometheusTimeout, c.timeout, "timeout 0")

	c, err = NewPromChecker(Prometheus{URL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	got, err := c.Check(context.Background())
	require.NoError(t, err, "nothing to check asks nothing")
	assert.Empty(t, got)
}

func TestPromBlockerText(t *testing.T) {
	t.Run("alert labels: the telling ones, at most four, sorted", func(t *testing.T) {
		assert.Equal(t, `{instance="i", namespace="ns", node="n", severity="critical"}`, alertTags(model.LabelSet{
			"alertname": "A", "severity": "critical", "instance": "i", "node": "n", "namespace": "ns",
			"pod": "p", "zone": "z",
		}))
		assert.Equal(t, `{a="1", b="2", severity="x"}`, alertTags(model.LabelSet{"alertname": "A", "b": "2", "a": "1", "severity": "x"}))
		assert.Equal(t, "", alertTags(model.LabelSet{"alertname": "A"}))
		long := alertTags(model.LabelSet{"severity": model.LabelValue(strings.Repeat("x", 300))})
		assert.Equal(t, maxLabelsLen, len([]rune(long)))
		assert.True(t, strings.HasSuffix(long, "…"))
	})
	t.Run("a query's name: whitespace collapsed, long ones shortened", func(t *testing.T) {
		assert.Equal(t, `sum by (node) ( up{job="a"} ) == 0`, exprName("sum by (node) (\n  up{job=\"a\"}\n)\n== 0"))
		long := exprName(strings.Repeat("up or ", 40) + "up")
		assert.Equal(t, maxExprLen, len([]rune(long)))
		assert.True(t, strings.HasSuffix(long, "…"))
	})
	t.Run("FailClosed shortens long errors", func(t *testing.T) {
		b := FailClosed(fmt.Errorf("%s", strings.Repeat("é", 1000)))
		assert.LessOrEqual(t, len([]rune(b.Reason)), len("cannot check blockers, failing closed: ")+maxReasonLen)
		require.NoError(t, nodedrain.NodeDrainStatus{Node: "n1", Status: 1, Blockers: []nodedrain.Blocker{b}}.Validate())
	})
}
