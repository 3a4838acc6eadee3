package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/pkg/busauth"
)

// authOptions say who may use the bus (DESIGN §10).
type authOptions struct {
	agentSA              string
	audience             string
	operatorPasswordFile string
	calloutIssuerFile    string
}

func registerAuthFlags(fs *pflag.FlagSet, a *authOptions) {
	fs.StringVar(&a.agentSA, "agent-service-account", envOr("POD_NAMESPACE", "edgedrain-system")+"/edgedrain-agent",
		"NAMESPACE/NAME of the agents' ServiceAccount: an agent connects with a projected token of it, bound to its pod, and may speak only for the pod's node")
	fs.StringVar(&a.audience, "agent-token-audience", busauth.DefaultAudience,
		"audience the agents' projected tokens must be issued for (the DaemonSet's serviceAccountToken audience)")
	fs.StringVar(&a.operatorPasswordFile, "operator-password-file", "",
		"file holding the password of the bus user "+busauth.OperatorUser+" (people's tools: read every key, withdraw any request); empty: no operator access")
	fs.StringVar(&a.calloutIssuerFile, "auth-callout-issuer-seed-file", "",
		"external NATS only: account NKey seed (SA...) whose public key the server's auth_callout names as issuer; the coordinator then answers the server's callouts with the same rules as the embedded server. It must connect as one of the callout's auth_users")
}

func (a authOptions) validate(embedded bool) error {
	var errs []error
	if _, _, err := a.agentAccount(); err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(a.audience) == "" {
		errs = append(errs, errors.New("--agent-token-audience must not be empty"))
	}
	if embedded && a.calloutIssuerFile != "" {
		errs = append(errs, errors.New("--auth-callout-issuer-seed-file is for an external NATS server; the embedded one authenticates in-process"))
	}
	for _, f := range []struct{ flag, path string }{{"--operator-password-file", a.operatorPasswordFile}, {"--auth-callout-issuer-seed-file", a.calloutIssuerFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	return errors.Join(errs...)
}

func (a authOptions) agentAccount() (namespace, name string, err error) {
	ns, n, ok := strings.Cut(a.agentSA, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("--agent-service-account %q: want NAMESPACE/NAME", a.agentSA)
	}
	return ns, n, nil
}

// authenticator builds the bus's gatekeeper; coordinatorPassword admits this process's own
// connection to an embedded server (empty for an external one).
func (a authOptions) authenticator(client kubernetes.Interface, reg prometheus.Registerer, log logrus.FieldLogger, coordinatorPassword string) (*busauth.Authenticator, error) {
	ns, name, err := a.agentAccount()
	if err != nil {
		return nil, err
	}
	tokens, err := busauth.NewTokenVerifier(busauth.TokenConfig{Client: client, Audience: a.audience, Namespace: ns, ServiceAccount: name})
	if err != nil {
		return nil, err
	}
	cfg := busauth.Config{Tokens: tokens, CoordinatorPassword: coordinatorPassword, Logger: log, Registerer: reg}
	if a.operatorPasswordFile != "" {
		raw, err := os.ReadFile(a.operatorPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--operator-password-file: %w", err)
		}
		if cfg.OperatorPassword = strings.TrimSpace(string(raw)); cfg.OperatorPassword == "" {
			return nil, fmt.Errorf("--operator-password-file %s is empty", a.operatorPasswordFile)
		}
	}
	return busauth.New(cfg)
}

// calloutIssuer loads the issuer seed, if any.
func (a authOptions) calloutIssuer() (nkeys.KeyPair, error) {
	if a.calloutIssuerFile == "" {
		return nil, nil
	}
	return busauth.LoadIssuer(a.calloutIssuerFile)
}
