package refpages

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Recorder is a prometheus.Registerer that registers each collector with a registry and keeps
// it, so that Metrics can list the vectors too: a vector without a child is not gathered.
type Recorder struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

// NewRecorder returns a Recorder registering with reg.
func NewRecorder(reg *prometheus.Registry) *Recorder { return &Recorder{reg: reg} }

// Register registers c with the registry and keeps it.
func (r *Recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers cs, panicking on an error as prometheus.Registry.MustRegister does.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c.
func (r *Recorder) Unregister(c prometheus.Collector) bool {
	r.collectors = slices.DeleteFunc(r.collectors, func(x prometheus.Collector) bool { return x == c })
	return r.reg.Unregister(c)
}

// Metric is one metric family as /metrics serves it.
type Metric struct {
	Name, Type, Help string
	Labels           []string
	Buckets          []float64 // a histogram's upper bounds, +Inf left out
}

// runtimePrefixes are the families of the Go runtime and process collectors (cli.NewRegistry):
// client_golang's, varying with the Go version and the platform, and not listed one by one.
var runtimePrefixes = []string{"go_", "process_"}

// Metrics gives every vector registered through r a child, so that it is gathered, gathers the
// registry and returns its families by name, leaving out the Go runtime's and the process's.
func (r *Recorder) Metrics() ([]Metric, error) {
	for _, c := range r.collectors {
		if err := touch(c); err != nil {
			return nil, err
		}
	}
	families, err := r.reg.Gather()
	if err != nil {
		return nil, err
	}
	var out []Metric
	for _, f := range families {
		if slices.ContainsFunc(runtimePrefixes, func(p string) bool { return strings.HasPrefix(f.GetName(), p) }) {
			continue
		}
		m := Metric{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		if len(f.GetMetric()) > 0 {
			first := f.GetMetric()[0]
			for _, l := range first.GetLabel() {
				m.Labels = append(m.Labels, l.GetName())
			}
			for _, b := range first.GetHistogram().GetBucket() {
				m.Buckets = append(m.Buckets, b.GetUpperBound())
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// touch gives a vector a child (label values "x"), trying each number of labels: the vector's
// labels are not exported, only its refusal of the wrong number.
func touch(c prometheus.Collector) error {
	var get func(...string) error
	switch v := c.(type) {
	case *prometheus.CounterVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	case *prometheus.GaugeVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	case *prometheus.HistogramVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	case *prometheus.SummaryVec:
		get = func(l ...string) error { _, err := v.GetMetricWithLabelValues(l...); return err }
	default:
		return nil // a single metric, always gathered
	}
	for n := 0; n <= 16; n++ {
		values := make([]string, n)
		for i := range values {
			values[i] = "x"
		}
		if get(values...) == nil {
			return nil
		}
	}
	return fmt.Errorf("%T: no number of labels up to 16 accepted", c)
}

// Section is the metrics of one program.
type Section struct {
	Title, Intro string
	Metrics      []Metric
}

// MetricsPage renders the metrics page.
func MetricsPage(from, intro string, sections []Section) []byte {
	var b bytes.Buffer
	b.WriteString(Header(from))
	b.WriteString("# Metrics\n\n" + intro + "\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", s.Title, s.Intro)
		b.WriteString("| Metric | Type | Labels | Help |\n|---|---|---|---|\n")
		var histograms []Metric
		for _, m := range s.Metrics {
			labels := "—"
			if len(m.Labels) > 0 {
				labels = "`" + strings.Join(m.Labels, "`, `") + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, labels, cell(m.Help))
			if len(m.Buckets) > 0 {
				histograms = append(histograms, m)
			}
		}
		if len(histograms) > 0 {
			b.WriteString("\nHistogram buckets (upper bounds; +Inf besides):\n\n")
			for _, m := range histograms {
				bounds := make([]string, len(m.Buckets))
				for i, v := range m.Buckets {
					bounds[i] = strconv.FormatFloat(v, 'g', -1, 64)
				}
				fmt.Fprintf(&b, "- `%s`: %s\n", m.Name, strings.Join(bounds, ", "))
			}
		}
	}
	return b.Bytes()
}

// cell makes s fit a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}
