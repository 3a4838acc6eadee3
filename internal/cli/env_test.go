package cli

import (
	"bytes"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newFlags() (*flag.FlagSet, *string, *time.Duration) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	url := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	timeout := fs.Duration("api-unreachable-timeout", 5*time.Minute, "how long")
	return fs, url, timeout
}

func TestEnvName(t *testing.T) {
	assert.Equal(t, "EDGEDRAIN_NATS_URL", EnvName("nats-url"))
	assert.Equal(t, "EDGEDRAIN_MAX_CONCURRENT_DRAINS", EnvName("max-concurrent-drains"))
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		url     string
		timeout time.Duration
		wantErr string
	}{
		{name: "defaults", url: "nats://127.0.0.1:4222", timeout: 5 * time.Minute},
		{name: "env sets", env: map[string]string{"EDGEDRAIN_NATS_URL": "nats://a:1", "EDGEDRAIN_API_UNREACHABLE_TIMEOUT": "1m"},
			url: "nats://a:1", timeout: time.Minute},
		{name: "flag beats env", env: map[string]string{"EDGEDRAIN_NATS_URL": "nats://a:1"}, args: []string{"--nats-url=nats://b:2"},
			url: "nats://b:2", timeout: 5 * time.Minute},
		{name: "bad env value names the variable", env: map[string]string{"EDGEDRAIN_API_UNREACHABLE_TIMEOUT": "soon"},
			wantErr: "EDGEDRAIN_API_UNREACHABLE_TIMEOUT"},
		{name: "bad flag", args: []string{"--api-unreachable-timeout=soon"}, wantErr: "invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs, url, timeout := newFlags()
			err := Parse(fs, tt.args)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.url, *url)
			assert.Equal(t, tt.timeout, *timeout)
		})
	}
}

func TestUsageNamesEnvironmentVariables(t *testing.T) {
	fs, _, _ := newFlags()
	var out bytes.Buffer
	fs.SetOutput(&out)
	Usage(fs, "intro text")()
	assert.Contains(t, out.String(), "intro text")
	assert.Contains(t, out.String(), "--nats-url string   [EDGEDRAIN_NATS_URL]")
	assert.Contains(t, out.String(), `(default "5m0s")`)
}
