package main

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// registerEmbeddedTLSFlags adds the flags of the embedded NATS listener's certificate, which fill
// cfg's TLS files. They are not --nats-tls-cert and --nats-tls-key: those are the client
// certificate of the shared NATS client flags (cli.NATSFlags).
func registerEmbeddedTLSFlags(fs *pflag.FlagSet, cfg *pubsub.EmbeddedConfig) {
	fs.StringVar(&cfg.TLSCertFile, "nats-listen-tls-cert", "",
		"with --nats-embedded: PEM certificate the listener serves (tls.crt of a kubernetes.io/tls Secret), with --nats-listen-tls-key; plain-text clients are then refused. Read again when the file changes")
	fs.StringVar(&cfg.TLSKeyFile, "nats-listen-tls-key", "",
		"with --nats-embedded: private key of --nats-listen-tls-cert (tls.key)")
}

// validateEmbeddedTLS checks the listener's TLS flags: both or neither, and only for the embedded
// server. StartEmbedded reports files that do not load.
func validateEmbeddedTLS(embedded bool, cfg pubsub.EmbeddedConfig) error {
	switch {
	case cfg.TLSCertFile == "" && cfg.TLSKeyFile == "":
		return nil
	case !embedded:
		return errors.New("--nats-listen-tls-cert and --nats-listen-tls-key need --nats-embedded (an external NATS server has its own TLS settings)")
	case cfg.TLSCertFile == "" || cfg.TLSKeyFile == "":
		return errors.New("--nats-listen-tls-cert and --nats-listen-tls-key must be set together")
	}
	return nil
}
