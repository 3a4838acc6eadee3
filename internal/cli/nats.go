package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// NATSFlags are the bus connection flags both programs share.
type NATSFlags struct {
	URLs, User, Password, PasswordFile, Creds, TokenFile, TLSCA, TLSCert, TLSKey string
}

// Register adds the flags to fs.
func (n *NATSFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&n.URLs, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	fs.StringVar(&n.User, "nats-user", "", "NATS user (with --nats-password)")
	fs.StringVar(&n.Password, "nats-password", "", "NATS password; prefer the environment variable to the command line")
	fs.StringVar(&n.PasswordFile, "nats-password-file", "", "file holding the NATS password (e.g. mounted from a Secret); instead of --nats-password")
	fs.StringVar(&n.Creds, "nats-creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&n.TokenFile, "nats-token-file", "", "file holding a bearer token for NATS, read again at every reconnect (agents: their projected ServiceAccount token)")
	fs.StringVar(&n.TLSCA, "nats-tls-ca", "", "CA bundle that signs the NATS server's certificate")
	fs.StringVar(&n.TLSCert, "nats-tls-cert", "", "client certificate for NATS (with --nats-tls-key)")
	fs.StringVar(&n.TLSKey, "nats-tls-key", "", "client key for NATS")
}

// Options returns the connection options for a client named name.
func (n *NATSFlags) Options(name string) pubsub.ConnectOptions {
	var urls []string
	for _, u := range strings.Split(n.URLs, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return pubsub.ConnectOptions{URLs: urls, User: n.User, Password: n.Password, PasswordFile: n.PasswordFile,
		CredsFile: n.Creds, TokenFile: n.TokenFile,
		TLSCAFile: n.TLSCA, TLSCertFile: n.TLSCert, TLSKeyFile: n.TLSKey, Name: name}
}

// SplitHostPort splits "host:port" and checks the port.
func SplitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q: want 0..65535", p)
	}
	return host, port, nil
}
