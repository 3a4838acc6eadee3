package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
)

// NewLogger returns a logrus logger writing format ("text" or "json") at level.
func NewLogger(format, level string) (*logrus.Logger, error) {
	log := logrus.New()
	switch format {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: want panic, fatal, error, warn, info, debug or trace", level)
	}
	log.SetLevel(lvl)
	return log, nil
}

// Serve serves handler on addr until ctx ends, then shuts down gracefully. It returns once the
// listener is open (or failed to open); serving errors after that are logged.
func Serve(ctx context.Context, addr string, handler http.Handler, log logrus.FieldLogger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("HTTP server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.WithField("addr", l.Addr().String()).Info("serving /metrics, /healthz, /readyz")
	return nil
}
