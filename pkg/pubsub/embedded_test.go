package pubsub_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestEmbeddedConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     pubsub.EmbeddedConfig
		wantErr string
	}{
		{"minimal", pubsub.EmbeddedConfig{StoreDir: "/tmp/x"}, ""},
		{"no store dir", pubsub.EmbeddedConfig{}, "store directory is required"},
		{"negative port", pubsub.EmbeddedConfig{StoreDir: "/tmp/x", Port: -1}, "out of range"},
		{"port too large", pubsub.EmbeddedConfig{StoreDir: "/tmp/x", Port: 70000}, "out of range"},
		{"negative max memory", pubsub.EmbeddedConfig{StoreDir: "/tmp/x", MaxMemory: -1}, "max memory"},
		{"negative max store", pubsub.EmbeddedConfig{StoreDir: "/tmp/x", MaxStore: -1}, "max store"},
		{"negative ready timeout", pubsub.EmbeddedConfig{StoreDir: "/tmp/x", ReadyTimeout: -time.Second}, "ready timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, pubsub.ErrInvalidConfig)
			require.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestStartEmbeddedPicksPortAndServes(t *testing.T) {
	srv := testenv.StartNATS(t)
	require.NotZero(t, srv.Port())
	require.Equal(t, fmt.Sprintf("nats://127.0.0.1:%d", srv.Port()), srv.ClientURL())
	require.True(t, srv.Server().JetStreamEnabled())

	nc, _ := testenv.ConnectNATS(t, srv.ClientURL())
	require.True(t, pubsub.Connected(nc))
}

// JetStream failing to start is reported at once, not after the ready
// timeout, and the process is not exited.
func TestStartEmbeddedBadStoreDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	start := time.Now()
	_, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{StoreDir: file, ReadyTimeout: time.Minute})
	require.ErrorIs(t, err, pubsub.ErrServerNotReady)
	require.Contains(t, err.Error(), file)
	require.Less(t, time.Since(start), 30*time.Second)
}

func TestEmbeddedShutdownTwice(t *testing.T) {
	srv := testenv.StartNATS(t)
	srv.Shutdown()
	srv.Shutdown()
}
