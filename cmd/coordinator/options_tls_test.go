package main

import (
	"io"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestEmbeddedTLSFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCert string
		wantKey  string
		wantErr  string
	}{
		{"none", nil, "", "", ""},
		{"both", []string{"--nats-embedded", "--nats-listen-tls-cert", "/tls/tls.crt", "--nats-listen-tls-key", "/tls/tls.key"},
			"/tls/tls.crt", "/tls/tls.key", ""},
		{"certificate alone", []string{"--nats-embedded", "--nats-listen-tls-cert", "/tls/tls.crt"}, "/tls/tls.crt", "", "set together"},
		{"key alone", []string{"--nats-embedded", "--nats-listen-tls-key", "/tls/tls.key"}, "", "/tls/tls.key", "set together"},
		{"without the embedded server", []string{"--nats-listen-tls-cert", "/tls/tls.crt", "--nats-listen-tls-key", "/tls/tls.key"},
			"/tls/tls.crt", "/tls/tls.key", "need --nats-embedded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var client cli.NATSFlags
			client.Register(fs) // no clash with the client's --nats-tls-cert and --nats-tls-key
			embedded := fs.Bool("nats-embedded", false, "")
			var cfg pubsub.EmbeddedConfig
			registerEmbeddedTLSFlags(fs, &cfg)
			require.NoError(t, cli.Parse(fs, tt.args))
			assert.Equal(t, tt.wantCert, cfg.TLSCertFile)
			assert.Equal(t, tt.wantKey, cfg.TLSKeyFile)
			err := validateEmbeddedTLS(*embedded, cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}
