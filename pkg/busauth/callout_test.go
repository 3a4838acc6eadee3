package busauth_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
)

// The same attacks against an external nats-server process configured for auth callout, which
// the coordinator's Authenticator answers.
func TestCalloutBusRefusesAttacks(t *testing.T) {
	w := newWorld(t)
	w.startExternal(t)
	attackSuite(t, w)
}

// startExternal runs nats-server (built from its Go module) with JetStream and auth callout to
// an issuer whose seed only the coordinator holds, and connects the coordinator as the
// callout's auth user.
func (w *world) startExternal(t *testing.T) {
	issuer, err := nkeys.CreateAccount()
	require.NoError(t, err)
	issuerPub, err := issuer.PublicKey()
	require.NoError(t, err)
	port := freePort(t)
	dir := t.TempDir()
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
server_name: external-1
jetstream { store_dir: %q }
authorization {
  timeout: 5s
  users: [ { user: %q, password: %q } ]
  auth_callout { issuer: %q, auth_users: [ %q ] }
}
`, port, filepath.Join(dir, "js"), busauth.CoordinatorUser, w.coordPW, issuerPub, busauth.CoordinatorUser)
	confPath := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	proc := testenv.StartProc(t, dir, "nats-server", natsServerBin, nil, "-c", confPath)
	w.url = fmt.Sprintf("nats://127.0.0.1:%d", port)

	var nc *nats.Conn
	require.Eventually(t, func() bool {
		nc, err = nats.Connect(w.url, nats.UserInfo(busauth.CoordinatorUser, w.coordPW))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "nats-server did not start\n%s", proc.Tail(20))
	t.Cleanup(nc.Close)
	_, err = w.auth.ServeCallout(nc, issuer)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	w.openBuckets(t, nats.UserInfo(busauth.CoordinatorUser, w.coordPW))
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
