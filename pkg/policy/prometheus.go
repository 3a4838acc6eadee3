package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Blocker kinds of the Prometheus check; nodedrain's decoders accept kinds they do not know.
const (
	// BlockerAlert is a firing Prometheus alert; the blocker's Name is its alertname.
	BlockerAlert nodedrain.BlockerKind = "Alert"
	// BlockerQuery is a blocking PromQL query that returned a result; the Name is the expression.
	BlockerQuery nodedrain.BlockerKind = "Query"
	// BlockerPrometheus is a Prometheus that could not be asked: the check fails closed (FailClosed).
	BlockerPrometheus nodedrain.BlockerKind = "Prometheus"
)

const (
	maxExprLen   = 120 // runes of a query expression shown as a blocker's Name
	maxLabelsLen = 120 // runes of the labels shown in a reason
	maxAlertTags = 4   // labels shown for a firing alert
	maxReasonLen = 300 // runes of a FailClosed reason
)

// alertLabelOrder is which labels of a firing alert say most about it; they are shown first.
var alertLabelOrder = []string{"severity", "instance", "node", "namespace", "pod", "job"}

// PromChecker asks one Prometheus server for the cluster-wide blockers of a maintenance policy:
// firing alerts and blocking queries. It is safe for concurrent use.
type PromChecker struct {
	url     string // redacted: for messages
	timeout time.Duration
	alerts  *AlertFilter
	queries []string
	api     v1.API
}

// NewPromChecker checks cfg and returns a checker for it. cfg.URL is the server's base URL
// (http or https, no query); cfg.Timeout bounds each request (0: DefaultPrometheusTimeout,
// negative: invalid); no query may be empty. A cfg without alerts and queries is valid: its
// Check asks nothing and returns nothing.
func NewPromChecker(cfg Prometheus) (*PromChecker, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("prometheus url: %w", err)
	}
	redacted := u.Redacted()
	switch {
	case cfg.URL == "":
		return nil, errors.New("prometheus url: required")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("prometheus url %s: scheme %q, want http or https", redacted, u.Scheme)
	case u.Host == "":
		return nil, fmt.Errorf("prometheus url %s: no host", redacted)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("prometheus url %s: want the server's base URL, without query or fragment", redacted)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("prometheus %s: timeout %s is negative", redacted, cfg.Timeout)
	}
	queries := make([]string, len(cfg.Queries))
	for i, q := range cfg.Queries {
		queries[i] = strings.TrimSpace(q)
		if queries[i] == "" {
			return nil, fmt.Errorf("prometheus %s: query %d is empty", redacted, i+1)
		}
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultPrometheusTimeout
	}
	// Its own transport (proxy settings from the environment, as usual), the timeout on the whole
	// request: a server that accepts and never answers costs one timeout, not a hang.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	client, err := api.NewClient(api.Config{
		Address: strings.TrimRight(cfg.URL, "/"),
		Client:  &http.Client{Transport: transport, Timeout: timeout},
	})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", redacted, err)
	}
	return &PromChecker{
		url:     redacted,
		timeout: timeout,
		alerts:  cfg.Alerts,
		queries: queries,
		api:     v1.NewAPI(client),
	}, nil
}

// Check returns the cluster-wide blockers now: one per firing alert (each label set of a rule is
// one alert) that passes the alert filter, pending alerts not blocking, sorted by alertname; then
// one per query whose result at the current time is not empty, in the configured order. It makes
// one request for the alerts and one per query, in turn, each bounded by the timeout.
//
// A query's result is empty when it is a vector or matrix without series. A scalar or string
// result always counts as a result, whatever its value, so such a query always blocks: PromQL
// filters series, not scalars (a scalar comparison needs bool and returns 0 or 1), and a blocking
// query is meant to be written as a filter such as `up{job="longhorn"} == 0`; the reason says so.
// Warnings from Prometheus (a remote read that failed, say) mean the result may be incomplete: an
// empty result with warnings is an error, a non-empty one blocks anyway.
//
// Any failure (connection refused, no answer within the timeout, an HTTP or API error, a query
// Prometheus refuses) is an error naming the URL and what failed, with no blockers: callers fail
// closed on it (FailClosed). At most nodedrain.MaxBlockers are returned.
func (c *PromChecker) Check(ctx context.Context) ([]nodedrain.Blocker, error) {
	var alerts []nodedrain.Blocker
	if c.alerts != nil {
		var err error
		if alerts, err = c.firingAlerts(ctx); err != nil {
			return nil, err
		}
	}
	var queries []nodedrain.Blocker
	for _, q := range c.queries {
		b, ok, err := c.query(ctx, q)
		if err != nil {
			return nil, err
		}
		if ok {
			queries = append(queries, b)
		}
	}
	alerts = capBlockers(alerts, max(nodedrain.MaxBlockers-len(queries), 1), func(more int) nodedrain.Blocker {
		return nodedrain.Blocker{Kind: BlockerAlert, Name: fmt.Sprintf("and %d more", more), Reason: "alerts firing"}
	})
	return capBlockers(append(alerts, queries...), nodedrain.MaxBlockers, func(more int) nodedrain.Blocker {
		return nodedrain.Blocker{Kind: BlockerQuery, Name: fmt.Sprintf("and %d more", more), Reason: "queries returned series"}
	}), nil
}

// firingAlerts returns a blocker for each firing alert that passes the filter, sorted.
func (c *PromChecker) firingAlerts(ctx context.Context) ([]nodedrain.Blocker, error) {
	res, err := c.api.Alerts(ctx)
	if err != nil {
		return nil, c.fail(ctx, "read alerts", err)
	}
	var out []nodedrain.Blocker
	for _, a := range res.Alerts {
		if a.State != v1.AlertStateFiring {
			continue
		}
		name := string(a.Labels[model.AlertNameLabel])
		if !c.alerts.Matches(name) {
			continue
		}
		if name == "" {
			name = "(no alertname)"
		}
		reason := "alert firing"
		if tags := alertTags(a.Labels); tags != "" {
			reason += " " + tags
		}
		out = append(out, nodedrain.Blocker{Kind: BlockerAlert, Name: name, Reason: reason})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Reason < out[j].Reason
	})
	return out, nil
}

// query runs expr at the current time; ok says whether its result blocks.
func (c *PromChecker) query(ctx context.Context, expr string) (b nodedrain.Blocker, ok bool, err error) {
	what := fmt.Sprintf("query %q", exprName(expr))
	v, warnings, _, err := c.api.Query(ctx, expr, time.Now(), v1.WithTimeout(c.timeout))
	if err != nil {
		return b, false, c.fail(ctx, what, err)
	}
	var reason string
	switch r := v.(type) {
	case model.Vector:
		if len(r) > 0 {
			sort.Slice(r, func(i, j int) bool { return r[i].Metric.Before(r[j].Metric) })
			reason = fmt.Sprintf("returned %d series, e.g. %s %s", len(r), shorten(r[0].Metric.String(), maxLabelsLen), r[0].Value)
		}
	case model.Matrix:
		if len(r) > 0 {
			sort.Slice(r, func(i, j int) bool { return r[i].Metric.Before(r[j].Metric) })
			reason = fmt.Sprintf("returned %d series, e.g. %s", len(r), shorten(r[0].Metric.String(), maxLabelsLen))
		}
	case *model.Scalar:
		reason = fmt.Sprintf("returned the scalar %s; a scalar always blocks: write the query as a filter of series", r.Value)
	case *model.String:
		reason = fmt.Sprintf("returned the string %q; a string always blocks: write the query as a filter of series",
			shorten(r.Value, maxLabelsLen))
	default:
		return b, false, &checkError{url: c.url, what: what, desc: fmt.Sprintf("unexpected result type %T", v)}
	}
	if reason == "" {
		if len(warnings) > 0 {
			return b, false, &checkError{url: c.url, what: what, desc: "no series, but with warnings (the result may be incomplete): " +
				shorten(strings.Join(warnings, "; "), maxReasonLen)}
		}
		return b, false, nil
	}
	return nodedrain.Blocker{Kind: BlockerQuery, Name: exprName(expr), Reason: reason}, true, nil
}

// fail describes err, from asking Prometheus for what, as an error naming the server.
func (c *PromChecker) fail(ctx context.Context, what string, err error) error {
	desc := err.Error()
	var ue *url.Error
	var apiErr *v1.Error
	switch {
	case ctx.Err() != nil:
		desc = "interrupted: " + ctx.Err().Error()
	case errors.As(err, &ue) && ue.Timeout():
		desc = fmt.Sprintf("no answer within %s", c.timeout)
	case errors.As(err, &ue):
		desc = ue.Err.Error() // the URL is named already
	case errors.As(err, &apiErr) && apiErr.Type == v1.ErrTimeout:
		desc = fmt.Sprintf("timed out within %s in Prometheus: %s", c.timeout, apiErr.Msg)
	}
	return &checkError{url: c.url, what: what, desc: desc, err: err}
}

// checkError is a failed request to Prometheus: what was asked and what went wrong.
type checkError struct {
	url, what, desc string
	err             error
}

func (e *checkError) Error() string {
	return fmt.Sprintf("prometheus %s: %s: %s", e.url, e.what, e.desc)
}

func (e *checkError) Unwrap() error { return e.err }

// FailClosed is the blocker to report when the Prometheus check failed with err (not nil): the
// drain waits, and the status says why.
func FailClosed(err error) nodedrain.Blocker {
	return nodedrain.Blocker{
		Kind:   BlockerPrometheus,
		Name:   "prometheus",
		Reason: "cannot check blockers, failing closed: " + shorten(fmt.Sprint(err), maxReasonLen),
	}
}

// alertTags renders up to maxAlertTags labels of a firing alert (the telling ones first, then
// the rest by name; never alertname), sorted by name, within maxLabelsLen runes.
func alertTags(ls model.LabelSet) string {
	var names []string
	seen := map[string]bool{string(model.AlertNameLabel): true}
	for _, n := range alertLabelOrder {
		if _, ok := ls[model.LabelName(n)]; ok {
			names = append(names, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range ls {
		if !seen[string(n)] {
			rest = append(rest, string(n))
		}
	}
	sort.Strings(rest)
	names = append(names, rest...)
	if len(names) > maxAlertTags {
		names = names[:maxAlertTags]
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%q", n, ls[model.LabelName(n)])
	}
	if len(parts) == 0 {
		return ""
	}
	return shorten("{"+strings.Join(parts, ", ")+"}", maxLabelsLen)
}

// exprName is a query as a blocker's Name: whitespace collapsed, at most maxExprLen runes.
func exprName(expr string) string {
	return shorten(strings.Join(strings.Fields(expr), " "), maxExprLen)
}

// shorten cuts s to n runes, the last one an ellipsis when cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
