package main

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli"
)

func parse(t *testing.T, args ...string) (*options, error) {
	t.Helper()
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := registerFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	return o, o.validate()
}

func TestDefaultsAreValid(t *testing.T) {
	o, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, 1, o.cfg.MaxConcurrentDrains)
	assert.Equal(t, 10, o.cfg.Policy.CordonAttempts)
	assert.Equal(t, 5, o.cfg.Policy.DrainAttempts)
	assert.True(t, o.leaderElect)
}

func TestBadFlagsSayWhatIsWrong(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--max-concurrent-drains", "0"}, "max concurrent drains must be at least 1"},
		{[]string{"--drain-attempt-timeout", "0s"}, "drain attempt timeout must be positive"},
		{[]string{"--cordon-backoff", "20s"}, "cordon backoff 20s..10s"},
		{[]string{"--nats-url", "http://nats:4222"}, "nats"},
		{[]string{"--nats-embedded", "--nats-listen", "nope"}, "--nats-listen"},
		{[]string{"--node-selector", "a b c"}, "node selector"},
		{[]string{"--kube-api-qps", "0"}, "--kube-api-qps"},
		{[]string{"--api-unreachable-timeout", "-1s"}, "must not be negative"},
		{[]string{"--bus-check-interval", "0s"}, "--bus-check-interval 0s: must be positive"},
		{[]string{"--drain-attempts", "many"}, "invalid value"},
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

// README's configuration section must list every flag the coordinator has.
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	registerFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		assert.True(t, strings.Contains(string(readme), "`--"+f.Name+"`"), "README does not document --%s", f.Name)
	})
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
