package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func run(ctx context.Context, o *options) error {
	log, err := cli.NewLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	natsOpts := o.nats.Options("edgedrain-agent/" + o.cfg.Node)
	natsOpts.Logger = log.WithField("component", "nats")
	nc, err := pubsub.Connect(natsOpts)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := o.cfg
	cfg.JetStream, cfg.Logger, cfg.Metrics = js, log, agent.NewMetrics(reg)
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if o.listen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if err := a.Healthy(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !pubsub.Connected(nc) {
				http.Error(w, "not connected to NATS", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		if err := cli.Serve(ctx, o.listen, mux, log); err != nil {
			return err
		}
	}
	return a.Run(ctx)
}
