package pubsub

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
)

// Defaults for EmbeddedConfig.
const (
	// DefaultEmbeddedHost is the listen address when EmbeddedConfig.Host is
	// empty: loopback only.
	DefaultEmbeddedHost = "127.0.0.1"
	// DefaultEmbeddedServerName is the server name when
	// EmbeddedConfig.ServerName is empty.
	DefaultEmbeddedServerName = "edgedrain"
	// DefaultReadyTimeout bounds how long StartEmbedded waits for the server
	// to accept connections when EmbeddedConfig.ReadyTimeout is zero.
	DefaultReadyTimeout = 10 * time.Second
)

// EmbeddedConfig configures an in-process NATS server with JetStream.
type EmbeddedConfig struct {
	// Host is the client listen address; empty means DefaultEmbeddedHost.
	// Use "0.0.0.0" to serve other machines.
	Host string
	// Port is the client port; zero picks a free port (read it back with
	// Embedded.Port or ClientURL), negative is invalid.
	Port int
	// StoreDir is the JetStream file store directory; required. Starting
	// again on the same directory keeps every bucket and its contents.
	StoreDir string
	// ServerName names the server; empty means DefaultEmbeddedServerName.
	ServerName string
	// Logger receives the server's log lines (notices at Info, warnings,
	// errors, debug); nil discards them.
	Logger logrus.FieldLogger
	// MaxMemory caps JetStream memory storage in bytes; zero lets the server
	// choose, negative is invalid.
	MaxMemory int64
	// MaxStore caps JetStream file storage in bytes; zero lets the server
	// choose, negative is invalid.
	MaxStore int64
	// ReadyTimeout bounds the wait for the server to accept connections;
	// zero means DefaultReadyTimeout, negative is invalid.
	ReadyTimeout time.Duration
	// Authentication decides every client connection and the permissions it
	// gets (the coordinator passes busauth's). Nil lets anyone connect with
	// every right: only tests and tools on loopback may do that.
	Authentication server.Authentication
	// TLSCertFile and TLSKeyFile are the PEM server certificate (with any
	// intermediates after it) and its private key, e.g. tls.crt and tls.key
	// of a kubernetes.io/tls Secret; set both or neither. With them the
	// listener speaks TLS only: plain-text clients are refused. The files are
	// read again at a handshake after they change (a renewed Secret); a
	// change that does not load keeps the certificate served before.
	TLSCertFile, TLSKeyFile string
}

// Validate reports the first problem with c, wrapping ErrInvalidConfig.
func (c EmbeddedConfig) Validate() error {
	switch {
	case strings.TrimSpace(c.StoreDir) == "":
		return fmt.Errorf("embedded nats: store directory is required: %w", ErrInvalidConfig)
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("embedded nats: port %d out of range: %w", c.Port, ErrInvalidConfig)
	case c.MaxMemory < 0:
		return fmt.Errorf("embedded nats: negative max memory %d: %w", c.MaxMemory, ErrInvalidConfig)
	case c.MaxStore < 0:
		return fmt.Errorf("embedded nats: negative max store %d: %w", c.MaxStore, ErrInvalidConfig)
	case c.ReadyTimeout < 0:
		return fmt.Errorf("embedded nats: negative ready timeout %s: %w", c.ReadyTimeout, ErrInvalidConfig)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return fmt.Errorf("embedded nats: TLS certificate and key must be set together: %w", ErrInvalidConfig)
	}
	return nil
}

// Embedded is a running in-process NATS server with JetStream.
type Embedded struct {
	srv      *server.Server
	cfg      EmbeddedConfig
	shutdown sync.Once
}

// StartEmbedded starts a NATS server with JetStream in this process and waits
// until it accepts client connections, at most cfg.ReadyTimeout. TLS files that
// cannot be read or do not hold a matching certificate and key are an error
// wrapping ErrInvalidConfig.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := &serverLogger{log: loggerOrDiscard(cfg.Logger).WithField("component", "nats-server")}
	var tlsConfig *tls.Config
	if cfg.TLSCertFile != "" {
		var err error
		if tlsConfig, err = serverTLS(cfg.TLSCertFile, cfg.TLSKeyFile, logger.log); err != nil {
			return nil, err
		}
	}
	if cfg.Host == "" {
		cfg.Host = DefaultEmbeddedHost
	}
	if cfg.ServerName == "" {
		cfg.ServerName = DefaultEmbeddedServerName
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		Host:               cfg.Host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		NoSigs:             true,
		// No monitoring, cluster, leafnode or gateway listeners.
		HTTPPort:                   0,
		CustomClientAuthentication: cfg.Authentication,
		TLSConfig:                  tlsConfig, // nil: plain text
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats on %s: %w", cfg.StoreDir, err)
	}
	srv.SetLoggerV2(logger, false, false, false)

	go srv.Start()

	if err := waitReady(srv, logger, cfg.ReadyTimeout); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats on %s:%d (store %s): %w", cfg.Host, cfg.Port, cfg.StoreDir, err)
	}
	if addr, ok := srv.Addr().(*net.TCPAddr); ok {
		cfg.Port = addr.Port
	}
	return &Embedded{srv: srv, cfg: cfg}, nil
}

// waitReady polls until the server listens with JetStream enabled, the server
// reports a fatal error, or timeout passes.
func waitReady(srv *server.Server, logger *serverLogger, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if msg := logger.fatal(); msg != "" {
			return fmt.Errorf("%w: %s", ErrServerNotReady, msg)
		}
		if srv.ReadyForConnections(50*time.Millisecond) && srv.JetStreamEnabled() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: not accepting connections after %s", ErrServerNotReady, timeout)
		}
	}
}

// ClientURL returns the URL clients in this process or on this machine
// connect to, e.g. "nats://127.0.0.1:4222", or "tls://…" when the listener
// speaks TLS (loopback when the server listens on all addresses).
func (e *Embedded) ClientURL() string {
	host := e.cfg.Host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "nats://"
	if e.cfg.TLSCertFile != "" {
		scheme = "tls://"
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(e.cfg.Port))
}

// Port returns the client port the server listens on (the picked one when
// EmbeddedConfig.Port was zero).
func (e *Embedded) Port() int { return e.cfg.Port }

// Config returns the effective configuration, with defaults filled in and Port
// set to the port in use, so that StartEmbedded(e.Config()) after Shutdown
// restarts the same server on the same address and store.
func (e *Embedded) Config() EmbeddedConfig { return e.cfg }

// Server returns the underlying nats-server for advanced use.
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server and waits until it has stopped and released its
// store; it is safe to call more than once.
func (e *Embedded) Shutdown() {
	e.shutdown.Do(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	})
}

// serverLogger routes nats-server log lines to logrus. Fatal lines are logged
// as errors and remembered instead of exiting the process.
type serverLogger struct {
	log logrus.FieldLogger

	mu       sync.Mutex
	fatalMsg string
}

var _ server.Logger = (*serverLogger)(nil)

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Infof(format, v...) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warnf(format, v...) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log.Errorf(format, v...) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Debugf(format, v...) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log.Debugf(format, v...) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	l.mu.Lock()
	if l.fatalMsg == "" {
		l.fatalMsg = msg
	}
	l.mu.Unlock()
}

func (l *serverLogger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalMsg
}
