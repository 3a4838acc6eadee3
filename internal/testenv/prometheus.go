package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// PrometheusInterval is the scrape and rule evaluation interval of a test Prometheus: a value the
// test sets is visible to queries and alerts within about two intervals.
const PrometheusInterval = 200 * time.Millisecond

// PrometheusGauge is the gauge the test exporter serves, with the one label "alert"; the test sets
// it with Prometheus.Set.
const PrometheusGauge = "test_blocking_value"

// PrometheusRules are the alerting rules a test Prometheus loads unless PrometheusOptions.Rules
// says otherwise: TestAlert (severity critical) and OtherAlert (severity warning) fire as soon as
// the gauge with their name as its "alert" label is above 0; PendingAlert stays pending for an
// hour, so it never fires in a test.
const PrometheusRules = `groups:
  - name: edgedrain-test
    rules:
      - alert: TestAlert
        expr: test_blocking_value{alert="TestAlert"} > 0
        for: 0s
        labels:
          severity: critical
      - alert: OtherAlert
        expr: test_blocking_value{alert="OtherAlert"} > 0
        for: 0s
        labels:
          severity: warning
      - alert: PendingAlert
        expr: test_blocking_value{alert="PendingAlert"} > 0
        for: 1h
        labels:
          severity: critical
`

// prometheusMissing is the failure message when the binary is not installed. The tests do not
// skip: CI installs the package, and a skipped safety test would pass unnoticed.
const prometheusMissing = "no prometheus binary on PATH: install Debian's prometheus package " +
	"(apt-get install prometheus); .ci/run does"

// PrometheusOptions configures StartPrometheus; the zero value is the usual choice.
type PrometheusOptions struct {
	// Rules is the content of the rule file (Prometheus rule groups in YAML); empty means
	// PrometheusRules.
	Rules string
}

// Prometheus is a real Prometheus server (Debian's prometheus binary) on 127.0.0.1 with its own
// storage, scraping a small exporter the test controls and evaluating the test's alerting rules.
type Prometheus struct {
	// URL is the server's base URL, such as http://127.0.0.1:40123.
	URL string
	// Target is the test exporter's host:port, the instance label of its series.
	Target string

	t     testing.TB
	gauge *prometheus.GaugeVec
	proc  *process

	stopOnce sync.Once
}

// StartPrometheus starts a Prometheus server for t and waits until it is ready; it is stopped and
// its files removed when t ends, and its log is printed if t failed. A missing binary fails t.
func StartPrometheus(t testing.TB, opts PrometheusOptions) *Prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal(prometheusMissing)
	}
	rules := opts.Rules
	if rules == "" {
		rules = PrometheusRules
	}

	reg := prometheus.NewRegistry()
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: PrometheusGauge,
		Help: "A value the test sets; the test rules alert when it is above 0.",
	}, []string{"alert"})
	reg.MustRegister(gauge)
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(exporter.Close) // after Prometheus stopped (cleanups run last first)

	target := strings.TrimPrefix(exporter.URL, "http://")
	dir := t.TempDir()
	for _, sub := range []string{"data", "consoles"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	rulesPath := filepath.Join(dir, "rules.yml")
	configPath := filepath.Join(dir, "prometheus.yml")
	config := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files:
  - %[2]q
scrape_configs:
  - job_name: test-exporter
    static_configs:
      - targets: [%[3]q]
`, promDuration(PrometheusInterval), rulesPath, target)
	if err := os.WriteFile(rulesPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	p := &Prometheus{t: t, gauge: gauge, Target: target}
	// The free port may be taken between asking and listening: try again with another.
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		proc, err := startProcess(fmt.Sprintf("prometheus-%d", attempt), bin, dir, false,
			"--config.file="+configPath,
			"--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr,
			// Debian's defaults point at /etc/prometheus; the tests need no consoles.
			"--web.console.templates="+filepath.Join(dir, "consoles"),
			"--web.console.libraries="+filepath.Join(dir, "consoles"),
		)
		if err != nil {
			t.Fatal(err)
		}
		p.proc, p.URL = proc, "http://"+addr
		err = p.waitReady(30 * time.Second)
		if err == nil {
			break
		}
		p.proc.stop(5 * time.Second)
		if attempt < 3 && strings.Contains(p.proc.tail(20), "address already in use") {
			continue
		}
		t.Fatalf("prometheus: %v\n%s", err, p.proc.tail(40))
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("prometheus at %s\n%s", p.URL, p.proc.tail(60))
		}
	})
	return p
}

// promDuration formats d as a Prometheus duration (whole milliseconds).
func promDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// waitReady polls /-/ready until it answers 200, the process exits or timeout passes.
func (p *Prometheus) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if p.proc.exited() {
			return fmt.Errorf("exited before it was ready: %v", p.proc.exitErr())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready at %s after %s", p.URL, timeout)
		case <-tick.C:
		}
	}
}

// WaitScraped waits until Prometheus has scraped the test exporter (up{job="test-exporter"} is 1),
// failing the test after timeout. Prometheus 2.x applies new scrape targets every 5 s, so the first
// scrape comes about 5 s after the start; a test that asserts that a query is empty must wait for
// it, or the emptiness proves nothing.
func (p *Prometheus) WaitScraped(timeout time.Duration) {
	p.t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(p.URL + "/api/v1/query?query=" + url.QueryEscape(`up{job="test-exporter"} == 1`))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"job":"test-exporter"`) {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("prometheus at %s did not scrape the test exporter within %s\n%s", p.URL, timeout, p.proc.tail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Set sets the exporter's gauge test_blocking_value{alert="<alert>"} to v; Prometheus sees it at
// its next scrape.
func (p *Prometheus) Set(alert string, v float64) {
	p.gauge.WithLabelValues(alert).Set(v)
}

// Delete removes the series test_blocking_value{alert="<alert>"} from the exporter.
func (p *Prometheus) Delete(alert string) {
	p.gauge.DeleteLabelValues(alert)
}

// Stop ends the server (TERM, then KILL after 5 s); later calls do nothing. Its address refuses
// connections afterwards.
func (p *Prometheus) Stop() {
	p.stopOnce.Do(func() { p.proc.stop(5 * time.Second) })
}

// Log returns the server's log so far.
func (p *Prometheus) Log() string {
	data, _ := os.ReadFile(p.proc.logPath)
	return string(data)
}
