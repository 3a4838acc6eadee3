package pubsub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestConnectOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.pem")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	missing := filepath.Join(dir, "missing.pem")
	url := []string{"nats://127.0.0.1:4222"}

	tests := []struct {
		name    string
		opts    pubsub.ConnectOptions
		wantErr string // empty: valid
	}{
		{"minimal", pubsub.ConnectOptions{URLs: url}, ""},
		{"several urls and bare host:port", pubsub.ConnectOptions{URLs: []string{"nats://a:4222", "tls://b:4222", "c:4222"}}, ""},
		{"user and password", pubsub.ConnectOptions{URLs: url, User: "u", Password: "p"}, ""},
		{"mutual TLS", pubsub.ConnectOptions{URLs: url, TLSCAFile: file, TLSCertFile: file, TLSKeyFile: file}, ""},
		{"creds file", pubsub.ConnectOptions{URLs: url, CredsFile: file}, ""},
		{"no url", pubsub.ConnectOptions{}, "at least one URL"},
		{"empty url", pubsub.ConnectOptions{URLs: []string{" "}}, "empty"},
		{"bad scheme", pubsub.ConnectOptions{URLs: []string{"http://a:4222"}}, "unsupported scheme"},
		{"password without user", pubsub.ConnectOptions{URLs: url, Password: "p"}, "password set without user"},
		{"creds and user", pubsub.ConnectOptions{URLs: url, CredsFile: file, User: "u"}, "exclusive"},
		{"cert without key", pubsub.ConnectOptions{URLs: url, TLSCertFile: file}, "together"},
		{"key without cert", pubsub.ConnectOptions{URLs: url, TLSKeyFile: file}, "together"},
		{"unreadable CA", pubsub.ConnectOptions{URLs: url, TLSCAFile: missing}, "TLS CA file"},
		{"unreadable creds", pubsub.ConnectOptions{URLs: url, CredsFile: missing}, "credentials file"},
		{"directory as key", pubsub.ConnectOptions{URLs: url, TLSCertFile: file, TLSKeyFile: dir}, "is a directory"},
		{"negative reconnect wait", pubsub.ConnectOptions{URLs: url, ReconnectWait: -time.Second}, "negative reconnect wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, pubsub.ErrInvalidConfig), "%v", err)
			require.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestConnectRejectsInvalidOptions(t *testing.T) {
	_, err := pubsub.Connect(pubsub.ConnectOptions{})
	require.ErrorIs(t, err, pubsub.ErrInvalidConfig)
}

func TestConnectURLRedactsCredentials(t *testing.T) {
	err := pubsub.ConnectOptions{URLs: []string{"ftp://user:secret@host:4222"}}.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret")
}

// A program that starts before its NATS server gets a connection at once and
// is connected as soon as the server is up.
func TestConnectBeforeServerStarts(t *testing.T) {
	srv := testenv.StartNATS(t)
	cfg := srv.Config()
	srv.Shutdown()

	start := time.Now()
	nc, err := pubsub.Connect(pubsub.ConnectOptions{
		URLs:          []string{srv.ClientURL()},
		ReconnectWait: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.Less(t, time.Since(start), 5*time.Second, "Connect must not wait for the server")
	require.False(t, pubsub.Connected(nc))
	require.False(t, pubsub.Connected(nil))
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, pubsub.WaitConnected(short, nc), context.DeadlineExceeded)

	restarted, err := pubsub.StartEmbedded(cfg)
	require.NoError(t, err)
	t.Cleanup(restarted.Shutdown)
	require.NoError(t, pubsub.WaitConnected(testCtx(t), nc), "WaitConnected returns once the server is up")
	require.True(t, pubsub.Connected(nc))
}

// Each connection event is logged once, with the server URL.
func TestConnectLogsEventsOnce(t *testing.T) {
	srv := testenv.StartNATS(t)
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	nc, err := pubsub.Connect(pubsub.ConnectOptions{
		URLs:          []string{srv.ClientURL()},
		ReconnectWait: 20 * time.Millisecond,
		Logger:        logger,
	})
	require.NoError(t, err)
	count := func(msg string) int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Message == msg {
				n++
				require.Equal(t, srv.ClientURL(), e.Data["url"], msg)
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return count("nats connected") == 1 }, eventTimeout, 10*time.Millisecond)

	// Failed reconnect attempts (every 20 ms) while the server restarts are
	// not logged again.
	cfg := srv.Config()
	srv.Shutdown()
	require.Eventually(t, func() bool { return count("nats disconnected; reconnecting") == 1 }, eventTimeout, 10*time.Millisecond)
	srv, err = pubsub.StartEmbedded(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	require.Eventually(t, func() bool { return count("nats reconnected") == 1 }, eventTimeout, 10*time.Millisecond)

	nc.Close()
	require.Eventually(t, func() bool { return count("nats connection closed") == 1 }, eventTimeout, 10*time.Millisecond)
	require.Equal(t, 1, count("nats disconnected; reconnecting"))
	require.Equal(t, 1, count("nats connected"))
}
