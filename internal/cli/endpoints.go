package cli

import (
	"context"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// ConnectBus connects to NATS (retrying in the background while the server is away) and opens a
// JetStream context. Close the connection when done.
func ConnectBus(opts pubsub.ConnectOptions, log logrus.FieldLogger) (*nats.Conn, jetstream.JetStream, error) {
	opts.Logger = log.WithField("component", "nats")
	nc, err := pubsub.Connect(opts)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// NewRegistry returns a Prometheus registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ServeEndpoints serves /metrics from reg, /healthz (healthy) and /readyz (ready) on addr until
// ctx ends; a nil check always answers ok. An empty addr serves nothing.
func ServeEndpoints(ctx context.Context, addr string, reg *prometheus.Registry, healthy, ready func() error, log logrus.FieldLogger) error {
	if addr == "" {
		return nil
	}
	check := func(f func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if f != nil {
				if err := f(); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", check(healthy))
	mux.HandleFunc("/readyz", check(ready))
	return Serve(ctx, addr, mux, log)
}

// NATSReady is a readiness check: connected to NATS.
func NATSReady(nc *nats.Conn) func() error {
	return func() error {
		if !pubsub.Connected(nc) {
			return fmt.Errorf("not connected to NATS")
		}
		return nil
	}
}
