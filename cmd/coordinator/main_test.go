package main

import (
	"context"
	"io"
	"strings"
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli"
)

// parse runs the coordinator's command line args up to the point where it would run.
func parse(t *testing.T, args ...string) (*options, error) {
	t.Helper()
	var got *options
	_, err := cli.Execute(context.Background(), newCommand(func(_ context.Context, o *options) error {
		got = o
		return nil
	}), args, io.Discard, io.Discard)
	return got, err
}

func TestDefaultsAreValid(t *testing.T) {
	o, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, 1, o.cfg.MaxConcurrentDrains)
	assert.Equal(t, 10, o.cfg.Limits.CordonAttempts)
	assert.Equal(t, 5, o.cfg.Limits.DrainAttempts)
	assert.True(t, o.leaderElect)
}

func TestBadFlagsSayWhatIsWrong(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--max-concurrent-drains", "0"}, "max concurrent drains must be at least 1"},
		{[]string{"-max-concurrent-drains", "0"}, "max concurrent drains must be at least 1"}, // Go's single dash
		{[]string{"--max-concurrent-drains=1", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"--nodeselector", "a"}, "unknown flag: --nodeselector"},
		{[]string{"--drain-attempt-timeout", "0s"}, "drain attempt timeout must be positive"},
		{[]string{"--cordon-backoff", "20s"}, "cordon backoff 20s..10s"},
		{[]string{"--nats-url", "http://nats:4222"}, "nats"},
		{[]string{"--nats-embedded", "--nats-listen", "nope"}, "--nats-listen"},
		{[]string{"--node-selector", "a b c"}, "node selector"},
		{[]string{"--kube-api-qps", "0"}, "--kube-api-qps"},
		{[]string{"--api-unreachable-timeout", "-1s"}, "must not be negative"},
		{[]string{"--bus-check-interval", "0s"}, "--bus-check-interval 0s: must be positive"},
		{[]string{"--drain-attempts", "many"}, `invalid argument "many" for "--drain-attempts"`},
		{[]string{"--eviction-requests", "maybe"}, `eviction requests "maybe": want auto, on or off`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parse(t, tt.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	t.Setenv("EDGEDRAIN_MAX_CONCURRENT_DRAINS", "2")
	t.Setenv("EDGEDRAIN_NATS_EMBEDDED", "true")
	o, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, 2, o.cfg.MaxConcurrentDrains)
	assert.True(t, o.natsEmbedded)
}

// An alpha API's deprecation warning comes back on every request (one per pod evicted with
// EvictionRequests): it is logged once.
func TestAPIWarningsAreLoggedOnce(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	w := &warnOnce{log: log, seen: map[string]bool{}}
	for i := 0; i < 1000; i++ {
		w.HandleWarningHeader(299, "", "lifecycle.k8s.io/v1alpha1 EvictionRequest is deprecated in v1.40+")
	}
	w.HandleWarningHeader(299, "", "another")
	w.HandleWarningHeader(199, "", "not a warning of the API server")
	require.Len(t, hook.AllEntries(), 2)
	assert.Equal(t, "lifecycle.k8s.io/v1alpha1 EvictionRequest is deprecated in v1.40+", hook.AllEntries()[0].Data["warning"])
}

// The exit status says what went wrong: 0 for --help (written to stderr), 2 for a usage error.
func TestExitStatus(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Usage: coordinator [flags]"},
		{[]string{"-h"}, 0, "[EDGEDRAIN_MAX_CONCURRENT_DRAINS]"},
		{[]string{"-help"}, 0, "Usage: coordinator [flags]"},
		{[]string{"--bogus"}, 2, "coordinator: unknown flag: --bogus"},
		{[]string{"--listen=:0", "x"}, 2, `coordinator: unexpected arguments ["x"]`},
	} {
		var out, errOut strings.Builder
		code := execute(context.Background(), tt.args, &out, &errOut)
		assert.Equal(t, tt.code, code, "%q", tt.args)
		assert.Empty(t, out.String(), "%q", tt.args)
		assert.Contains(t, errOut.String(), tt.want, "%q", tt.args)
	}
}
