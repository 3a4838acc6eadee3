package testenv

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func promAPI(t *testing.T, url string) v1.API {
	t.Helper()
	client, err := api.NewClient(api.Config{Address: url, Client: &http.Client{Timeout: 2 * time.Second}})
	require.NoError(t, err)
	return v1.NewAPI(client)
}

// alertStates returns the state of each active alert by name.
func alertStates(t *testing.T, a v1.API) map[string]v1.AlertState {
	t.Helper()
	res, err := a.Alerts(context.Background())
	require.NoError(t, err)
	out := map[string]v1.AlertState{}
	for _, al := range res.Alerts {
		out[string(al.Labels[model.AlertNameLabel])] = al.State
	}
	return out
}

// TestPrometheusScrapesTheGaugeAndEvaluatesRules checks the helper end to end: the value the test
// sets reaches a query, TestAlert fires and resolves with it, PendingAlert stays pending, and
// Stop leaves the address refusing connections.
func TestPrometheusScrapesTheGaugeAndEvaluatesRules(t *testing.T) {
	p := StartPrometheus(t, PrometheusOptions{})
	a := promAPI(t, p.URL)
	ctx := context.Background()
	p.WaitScraped(15 * time.Second)

	p.Set("TestAlert", 3)
	p.Set("PendingAlert", 1)
	require.Eventually(t, func() bool {
		v, _, _, err := a.Query(ctx, `test_blocking_value{alert="TestAlert"}`, time.Now())
		require.NoError(t, err)
		vec, ok := v.(model.Vector)
		return ok && len(vec) == 1 && vec[0].Value == 3
	}, 10*time.Second, 50*time.Millisecond, "the gauge's value never reached a query")

	require.Eventually(t, func() bool {
		s := alertStates(t, a)
		return s["TestAlert"] == v1.AlertStateFiring && s["PendingAlert"] == v1.AlertStatePending
	}, 10*time.Second, 50*time.Millisecond, "TestAlert not firing or PendingAlert not pending")

	p.Set("TestAlert", 0)
	require.Eventually(t, func() bool {
		_, active := alertStates(t, a)["TestAlert"]
		return !active
	}, 10*time.Second, 50*time.Millisecond, "TestAlert did not resolve")
	require.Equal(t, v1.AlertStatePending, alertStates(t, a)["PendingAlert"], "PendingAlert fired within the test")

	p.Stop()
	_, err := a.Alerts(ctx)
	require.ErrorContains(t, err, "connection refused")
	p.Stop() // a second Stop does nothing
}

// TestPrometheusCustomRules checks that PrometheusOptions.Rules replaces the default rules.
func TestPrometheusCustomRules(t *testing.T) {
	p := StartPrometheus(t, PrometheusOptions{Rules: `groups:
  - name: custom
    rules:
      - alert: CustomAlert
        expr: vector(1)
`})
	a := promAPI(t, p.URL)
	require.Eventually(t, func() bool {
		return alertStates(t, a)["CustomAlert"] == v1.AlertStateFiring
	}, 10*time.Second, 50*time.Millisecond, "CustomAlert never fired")
	rules, err := a.Rules(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, rules.Groups, 1)
	require.Equal(t, "custom", rules.Groups[0].Name, "the default rules were loaded as well")
}
