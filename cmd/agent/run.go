package main

import (
	"context"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

func run(ctx context.Context, o *options) error {
	log, err := cli.NewLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	nc, js, err := cli.ConnectBus(o.nats.Options("edgedrain-agent/"+o.cfg.Node), log)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := cli.NewRegistry()
	cfg := o.cfg
	cfg.JetStream, cfg.Logger, cfg.Metrics = js, log, agent.NewMetrics(reg)
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if err := cli.ServeEndpoints(ctx, o.listen, reg, a.Healthy, cli.NATSReady(nc), log); err != nil {
		return err
	}
	return a.Run(ctx)
}
