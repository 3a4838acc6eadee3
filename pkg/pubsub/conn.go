package pubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/ratelog"
)

// DefaultReconnectWait is the pause between reconnect attempts when
// ConnectOptions.ReconnectWait is zero.
const DefaultReconnectWait = 2 * time.Second

// pingInterval is how often the client pings the server; two missed pongs
// mark a half-open connection as broken (about 40 s instead of the nats.go
// default of 4 minutes).
const pingInterval = 20 * time.Second

// ConnectOptions says how to reach a NATS server or cluster.
type ConnectOptions struct {
	// URLs lists the servers to connect to, e.g. "nats://nats:4222" or
	// "tls://nats-0.nats:4222". At least one is required.
	URLs []string
	// User and Password authenticate with a user name and password. Password
	// requires User.
	User, Password string
	// PasswordFile holds the password instead of Password (a mounted Secret);
	// it is read once, at Connect.
	PasswordFile string
	// CredsFile is a NATS credentials file (JWT and NKey seed). It cannot be
	// combined with User or Password.
	CredsFile string
	// TokenFile holds a bearer token (an agent's projected ServiceAccount
	// token). It is read again at every connect and reconnect, so a token the
	// kubelet rotated is used as soon as the server drops the old one. It
	// cannot be combined with User, Password or CredsFile.
	TokenFile string
	// InProcess connects to a server of this process without a network
	// connection (the coordinator to its embedded server); URLs are then not
	// needed.
	InProcess nats.InProcessConnProvider
	// InboxPrefix replaces nats.go's "_INBOX" prefix of reply subjects (an
	// agent may subscribe only under its own prefix); empty keeps the default.
	InboxPrefix string
	// TLSCAFile is a PEM bundle of CAs that sign the server certificate;
	// empty uses the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a client certificate and its key for
	// mutual TLS; set both or neither.
	TLSCertFile, TLSKeyFile string
	// Name identifies the connection in server monitoring, e.g.
	// "edgedrain-agent/node-1".
	Name string
	// ReconnectWait is the pause between reconnect attempts; zero means
	// DefaultReconnectWait, negative is invalid.
	ReconnectWait time.Duration
	// Logger receives connection events; nil discards them.
	Logger logrus.FieldLogger
}

// Validate reports the first problem with o, wrapping ErrInvalidConfig.
func (o ConnectOptions) Validate() error {
	if len(o.URLs) == 0 && o.InProcess == nil {
		return fmt.Errorf("nats connect: at least one URL is required: %w", ErrInvalidConfig)
	}
	for _, u := range o.URLs {
		if err := validateURL(u); err != nil {
			return fmt.Errorf("nats connect: url %q: %v: %w", redactURL(u), err, ErrInvalidConfig)
		}
	}
	if o.Password != "" && o.PasswordFile != "" {
		return fmt.Errorf("nats connect: password and password file are exclusive: %w", ErrInvalidConfig)
	}
	if (o.Password != "" || o.PasswordFile != "") && o.User == "" {
		return fmt.Errorf("nats connect: password set without user: %w", ErrInvalidConfig)
	}
	if o.CredsFile != "" && (o.User != "" || o.Password != "" || o.PasswordFile != "") {
		return fmt.Errorf("nats connect: credentials file and user/password are exclusive: %w", ErrInvalidConfig)
	}
	if o.TokenFile != "" && (o.User != "" || o.Password != "" || o.PasswordFile != "" || o.CredsFile != "") {
		return fmt.Errorf("nats connect: a token file cannot be combined with a user, password or credentials file: %w", ErrInvalidConfig)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return fmt.Errorf("nats connect: TLS certificate and key must be set together: %w", ErrInvalidConfig)
	}
	if o.ReconnectWait < 0 {
		return fmt.Errorf("nats connect: negative reconnect wait %s: %w", o.ReconnectWait, ErrInvalidConfig)
	}
	files := []struct{ what, path string }{
		{"credentials file", o.CredsFile},
		{"token file", o.TokenFile},
		{"password file", o.PasswordFile},
		{"TLS CA file", o.TLSCAFile},
		{"TLS certificate file", o.TLSCertFile},
		{"TLS key file", o.TLSKeyFile},
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if err := readable(f.path); err != nil {
			return fmt.Errorf("nats connect: %s: %v: %w", f.what, err, ErrInvalidConfig)
		}
	}
	return nil
}

// Connect validates opts and connects to NATS. It returns at once even when no
// server is reachable yet: the connection keeps retrying in the background,
// forever, and requests made meanwhile fail at once until it is up (there is
// no reconnect buffer); WaitConnected waits for it.
// Disconnects, reconnects and the final close are logged once each.
func Connect(opts ConnectOptions) (*nats.Conn, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := loggerOrDiscard(opts.Logger)
	wait := opts.ReconnectWait
	if wait == 0 {
		wait = DefaultReconnectWait
	}
	servers := make([]string, len(opts.URLs))
	for i, u := range opts.URLs {
		servers[i] = redactURL(u)
	}
	configured := strings.Join(servers, ",")

	// The URL of the server we were last connected to, for the disconnect
	// log line (nats.go no longer reports it once disconnected).
	var lastURL atomic.Pointer[string]
	remember := func(nc *nats.Conn) string {
		u := nc.ConnectedUrlRedacted()
		lastURL.Store(&u)
		return u
	}
	natsOpts := []nats.Option{
		nats.Name(opts.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(wait),
		// No reconnect buffer: a write made while disconnected fails at once instead of landing
		// whenever the connection is back, long after its writer gave up on it (a coordinator
		// that lost its Lease meanwhile must not have a status land behind its successor's back).
		nats.ReconnectBufSize(-1),
		// A refusal may pass (a token the kubelet has not rotated yet, an API server that could
		// not review it): keep trying, never give up after two refusals as nats.go would.
		nats.IgnoreAuthErrorAbort(),
		nats.PingInterval(pingInterval),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.WithField("url", remember(nc)).Info("nats connected")
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // the closed handler reports it
			}
			u := configured
			if p := lastURL.Load(); p != nil && *p != "" {
				u = *p
			}
			entry := log.WithField("url", u)
			if err != nil {
				entry = entry.WithError(err)
			}
			entry.Warn("nats disconnected; reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.WithField("url", remember(nc)).Info("nats reconnected")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			defer lastErrs.Delete(nc)
			entry := log.WithField("url", configured)
			if err := nc.LastError(); err != nil {
				entry = entry.WithError(err)
			}
			entry.Info("nats connection closed")
		}),
		nats.ReconnectErrHandler(func(nc *nats.Conn, err error) { lastErrs.Store(nc, err) }),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			lastErrs.Store(nc, err)
			entry := log.WithField("url", nc.ConnectedUrlRedacted()).WithError(err)
			if sub != nil {
				entry = entry.WithField("subject", sub.Subject)
			}
			// Ordered consumers report inactivity every few seconds while the
			// server is away; watchers recover from it on their own.
			if errors.Is(err, nats.ErrConsumerNotActive) {
				entry.Debug("nats async error")
				return
			}
			entry.Warn("nats async error")
		}),
	}
	if opts.PasswordFile != "" {
		raw, err := os.ReadFile(opts.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("nats connect: password file: %w", err)
		}
		opts.Password = strings.TrimSpace(string(raw))
	}
	if opts.User != "" {
		natsOpts = append(natsOpts, nats.UserInfo(opts.User, opts.Password))
	}
	if opts.CredsFile != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(opts.CredsFile))
	}
	if opts.TokenFile != "" {
		natsOpts = append(natsOpts, nats.TokenHandler(tokenReader(opts.TokenFile, log)))
	}
	if opts.InProcess != nil {
		natsOpts = append(natsOpts, nats.InProcessServer(opts.InProcess))
	}
	if opts.InboxPrefix != "" {
		natsOpts = append(natsOpts, nats.CustomInboxPrefix(opts.InboxPrefix))
	}
	if opts.TLSCAFile != "" {
		natsOpts = append(natsOpts, nats.RootCAs(opts.TLSCAFile))
	}
	if opts.TLSCertFile != "" {
		natsOpts = append(natsOpts, nats.ClientCert(opts.TLSCertFile, opts.TLSKeyFile))
	}

	nc, err := nats.Connect(strings.Join(opts.URLs, ","), natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", configured, err)
	}
	// The connect handler logs a successful connection (also a late one).
	if !nc.IsConnected() {
		log.WithField("url", configured).Warn("nats not reachable yet; retrying in the background")
	}
	return nc, nil
}

// tokenReader returns the token in path, read afresh at each call (every connect attempt). A
// file that cannot be read is logged and presents no token, so the server refuses the attempt
// and the next one reads the file again.
func tokenReader(path string, log logrus.FieldLogger) func() string {
	var warnings ratelog.Limiter
	return func() string {
		raw, err := os.ReadFile(path)
		if err != nil {
			warnings.Logger("token-unreadable", log).WithError(err).Warn("nats token file unreadable; connecting without a token")
			return ""
		}
		return strings.TrimSpace(string(raw))
	}
}

// lastErrs holds the last error each connection made by Connect met (nats.go forgets a refused
// reconnect attempt's), for WaitConnected to say why it gave up.
var lastErrs sync.Map

// WaitConnected waits until nc is connected, or ctx ends (its error then, with the
// connection's last error, e.g. an authorization violation).
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	status := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(status)
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			last := nc.LastError()
			if e, ok := lastErrs.Load(nc); ok && last == nil {
				last, _ = e.(error)
			}
			if last != nil {
				// Say why (a refusal names the credentials as the problem).
				return fmt.Errorf("nats: not connected (last error: %v): %w", last, ctx.Err())
			}
			return fmt.Errorf("nats: not connected: %w", ctx.Err())
		case <-status:
		case <-time.After(100 * time.Millisecond): // a connect that happened before the listener
		}
	}
	return nil
}

// Connected reports whether nc is currently connected to a server; it is
// false for a nil connection and while reconnecting.
func Connected(nc *nats.Conn) bool {
	return nc != nil && nc.IsConnected()
}

func validateURL(raw string) error {
	s := strings.TrimSpace(raw)
	if s == "" {
		return errors.New("empty")
	}
	if !strings.Contains(s, "://") {
		// nats.go accepts bare host:port.
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("unsupported scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("missing host")
	}
	return nil
}

// redactURL hides any user information in a server URL for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = url.User("redacted")
	return u.String()
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

func loggerOrDiscard(l logrus.FieldLogger) logrus.FieldLogger {
	if l != nil {
		return l
	}
	d := logrus.New()
	d.Out = io.Discard
	d.Level = logrus.PanicLevel
	return d
}
