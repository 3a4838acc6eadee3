package main

import (
	"context"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// bus is the embedded bus of one edgedrain run: the coordinator's connection and the one the
// request is published on.
type bus struct {
	coordinator, requester jetstream.JetStream
	close                  func()
}

// openBus starts the embedded server as the coordinator does. Open: anyone may connect (how
// edgedrain ran before bus authentication; for comparison). Secured: the coordinator connects
// in-process with its password, and the request comes from the target's agent, authenticated
// with a token bound to its DaemonSet pod and held to its node's keys.
// start is called once the agent's identity is made, before the server starts.
func (b *bench) openBus(ctx context.Context, s *setup, secured bool, start func()) (*bus, error) {
	dir, err := os.MkdirTemp("", "edgedrain-bench-nats-")
	if err != nil {
		return nil, err
	}
	var closers []func()
	out := &bus{close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	closers = append(closers, func() { _ = os.RemoveAll(dir) })
	fail := func(err error) (*bus, error) { out.close(); return nil, err }
	cfg := pubsub.EmbeddedConfig{StoreDir: dir}
	coordOpts := pubsub.ConnectOptions{}
	var token string
	if secured {
		if err := testenv.CreateAgentDaemonSet(ctx, b.c.Client, s.ns, "edgedrain-agent", s.group); err != nil {
			return fail(err)
		}
		pod, err := testenv.AgentPodOn(ctx, b.c.Client, s.ns, s.target, time.Minute)
		if err != nil {
			return fail(err)
		}
		if token, err = testenv.RequestPodToken(ctx, b.c.Client, pod, busauth.DefaultAudience, 600); err != nil {
			return fail(err)
		}
		verifier, err := busauth.NewTokenVerifier(busauth.TokenConfig{Client: b.c.Client, Namespace: s.ns, ServiceAccount: "edgedrain-agent"})
		if err != nil {
			return fail(err)
		}
		password, err := busauth.NewPassword()
		if err != nil {
			return fail(err)
		}
		if cfg.Authentication, err = busauth.New(busauth.Config{Tokens: verifier, CoordinatorPassword: password}); err != nil {
			return fail(err)
		}
		coordOpts.User, coordOpts.Password = busauth.CoordinatorUser, password
	}
	start()
	srv, err := pubsub.StartEmbedded(cfg)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, srv.Shutdown)
	coordOpts.URLs = []string{srv.ClientURL()}
	if secured {
		coordOpts.URLs, coordOpts.InProcess = nil, srv.Server()
	}
	if out.coordinator, err = connectJS(coordOpts, &closers); err != nil {
		return fail(err)
	}
	out.requester = out.coordinator
	if secured {
		nc, err := nats.Connect(srv.ClientURL(), nats.Token(token), nats.CustomInboxPrefix(nodedrain.AgentInboxPrefix(s.target)))
		if err != nil {
			return fail(err)
		}
		closers = append(closers, nc.Close)
		if out.requester, err = jetstream.New(nc); err != nil {
			return fail(err)
		}
	}
	return out, nil
}

func connectJS(opts pubsub.ConnectOptions, closers *[]func()) (jetstream.JetStream, error) {
	nc, err := pubsub.Connect(opts)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, nc.Close)
	return jetstream.New(nc)
}
