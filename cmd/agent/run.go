package main

import (
	"context"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

func run(ctx context.Context, o *options) error {
	log, err := cli.NewLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	trusted, err := cli.NewTrustedKeys(o.trusted, 0, log)
	if err != nil {
		return err
	}
	natsOpts := o.nats.Options("edgedrain-agent/" + o.cfg.Node)
	// The bus lets an agent subscribe only under its node's inbox prefix (DESIGN §10).
	natsOpts.InboxPrefix = nodedrain.AgentInboxPrefix(o.cfg.Node)
	nc, js, err := cli.ConnectBus(natsOpts, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := cli.NewRegistry()
	cfg := o.cfg
	cfg.JetStream, cfg.Logger, cfg.Metrics = js, log, agent.NewMetrics(reg)
	cfg.TrustedKeys = trusted.Keys
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	warnWithoutLogind(cfg, log)
	probe := cli.NewBusProbe(nc, js, reg, cli.AgentBusMetric, log)
	go probe.Run(ctx, o.busCheck)
	if err := cli.ServeEndpoints(ctx, o.listen, reg, a.Healthy, probe.Ready, log); err != nil {
		return err
	}
	return a.Run(ctx)
}

// warnWithoutLogind says at start, rather than at the first reboot, when a logind command is
// configured but logind cannot be reached; the agent still starts (the bus may come later, and
// the command is retried until it works).
func warnWithoutLogind(cfg agent.Config, log logrus.FieldLogger) {
	var ops []string
	for _, op := range agent.Operations {
		if agent.IsLogindCommand(cfg.Commands[op]) {
			ops = append(ops, string(op))
		}
	}
	if len(ops) == 0 {
		return
	}
	if err := agent.LogindAvailable(cfg.SystemBus, 5*time.Second); err != nil {
		log.WithError(err).Warnf("the %s through logind will fail until logind answers", strings.Join(ops, " and "))
	}
}
