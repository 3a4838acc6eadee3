package pubsub_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

// startTLS starts an embedded server whose listener serves files.
func startTLS(t *testing.T, files testenv.TLSFiles) *pubsub.Embedded {
	t.Helper()
	srv, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{Host: "127.0.0.1", StoreDir: t.TempDir(),
		TLSCertFile: files.CertFile, TLSKeyFile: files.KeyFile})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	return srv
}

// dialTLS connects to srv trusting caFile (empty: the system roots) and reports whether the
// connection came up within a few seconds, with the client's last error if not.
func dialTLS(t *testing.T, srv *pubsub.Embedded, caFile string) (*nats.Conn, error) {
	t.Helper()
	nc, err := pubsub.Connect(pubsub.ConnectOptions{URLs: []string{srv.ClientURL()}, TLSCAFile: caFile,
		Name: t.Name(), ReconnectWait: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := pubsub.WaitConnected(ctx, nc); err != nil {
		if last := nc.LastError(); last != nil {
			err = last
		}
		return nc, err
	}
	return nc, nil
}

// A client that trusts the CA reaches the embedded server over tls:// and uses a bucket.
func TestEmbeddedTLSRoundTrip(t *testing.T) {
	files := testenv.WriteServerTLS(t, loopback)
	srv := startTLS(t, files)
	require.True(t, strings.HasPrefix(srv.ClientURL(), "tls://127.0.0.1:"), srv.ClientURL())

	nc, err := dialTLS(t, srv, files.CAFile)
	require.NoError(t, err)
	state, err := nc.TLSConnectionState()
	require.NoError(t, err)
	assert.True(t, state.HandshakeComplete)

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	b, err := pubsub.OpenBucket[record](testCtx(t), js, pubsub.BucketConfig{Name: "tls"}, nil)
	require.NoError(t, err)
	publish(t, b, "node-1.example", 7)
	got, _, err := b.Get(testCtx(t), "node-1.example")
	require.NoError(t, err)
	assert.Equal(t, record{N: 7, S: "node-1.example"}, got)
}

// A client speaking plain NATS gets the INFO that demands TLS and is then cut off: its commands
// are never answered.
func TestEmbeddedTLSRefusesPlainText(t *testing.T) {
	srv := startTLS(t, testenv.WriteServerTLS(t, loopback))
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port())), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	info, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, info, `"tls_required":true`)

	_, err = io.WriteString(conn, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\nSUB > 1\r\n")
	require.NoError(t, err)
	rest, err := io.ReadAll(conn) // ends when the server closes the connection
	if err != nil {
		var ne net.Error
		require.ErrorAs(t, err, &ne, "the server closed or reset the connection, not the deadline")
		require.False(t, ne.Timeout(), "the server kept the plain-text connection open")
	}
	assert.NotContains(t, string(rest), "PONG")
}

// A client that does not trust the certificate's CA does not connect.
func TestEmbeddedTLSRefusesUntrustingClient(t *testing.T) {
	srv := startTLS(t, testenv.WriteServerTLS(t, loopback))
	other := testenv.WriteServerTLS(t, loopback)
	for name, caFile := range map[string]string{"system roots": "", "another CA": other.CAFile} {
		t.Run(name, func(t *testing.T) {
			nc, err := dialTLS(t, srv, caFile)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "x509")
			assert.False(t, nc.IsConnected())
		})
	}
}

// A renewed certificate is served from the next handshake on, without a restart; files that
// do not load keep the one served before.
func TestEmbeddedTLSServesRenewedCertificate(t *testing.T) {
	files := testenv.WriteServerTLS(t, loopback)
	srv := startTLS(t, files)
	oldCA := filepath.Join(t.TempDir(), "old-ca.crt")
	copyFile(t, files.CAFile, oldCA)
	_, err := dialTLS(t, srv, oldCA)
	require.NoError(t, err)

	files.Rewrite(t, loopback) // a new issuer, as a renewal with a new CA
	_, err = dialTLS(t, srv, files.CAFile)
	require.NoError(t, err, "the renewed certificate is served")
	_, err = dialTLS(t, srv, oldCA)
	require.Error(t, err, "the old certificate is no longer served")

	require.NoError(t, os.WriteFile(files.CertFile, []byte("half written"), 0o600))
	_, err = dialTLS(t, srv, files.CAFile)
	require.NoError(t, err, "a broken renewal keeps the last good certificate")
}

func TestEmbeddedTLSBadFiles(t *testing.T) {
	good := testenv.WriteServerTLS(t, loopback)
	other := testenv.WriteServerTLS(t, loopback)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o600))
	empty := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name      string
		cert, key string
		wantErr   string
	}{
		{"certificate without key", good.CertFile, "", "set together"},
		{"key without certificate", "", good.KeyFile, "set together"},
		{"missing certificate", missing, good.KeyFile, missing},
		{"missing key", good.CertFile, missing, missing},
		{"certificate is a directory", dir, good.KeyFile, "is a directory"},
		{"garbage certificate", garbage, good.KeyFile, "certificate"},
		{"empty certificate", empty, good.KeyFile, "PEM"},
		{"garbage key", good.CertFile, garbage, "key"},
		{"the key of another certificate", good.CertFile, other.KeyFile, "does not match"},
		{"certificate and key swapped", good.KeyFile, good.CertFile, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{Host: "127.0.0.1", StoreDir: t.TempDir(),
				TLSCertFile: tt.cert, TLSKeyFile: tt.key})
			if err == nil {
				srv.Shutdown()
			}
			require.ErrorIs(t, err, pubsub.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// The coordinator's own client may join its embedded server in-process, without the listener
// and so without a certificate naming 127.0.0.1.
func TestEmbeddedTLSInProcessClient(t *testing.T) {
	srv := startTLS(t, testenv.WriteServerTLS(t, nil, "nats.example"))
	nc, err := nats.Connect("", nats.InProcessServer(srv.Server()))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = pubsub.OpenBucket[record](testCtx(t), js, pubsub.BucketConfig{Name: "inproc"}, nil)
	require.NoError(t, err)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, data, 0o600))
}
