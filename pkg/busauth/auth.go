package busauth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// The user names of the two password identities.
const (
	CoordinatorUser = "edgedrain-coordinator"
	OperatorUser    = "edgedrain-operator"
)

// Credentials is the client side of what a connection presents.
type Credentials struct {
	User, Password, Token string
}

// Config configures an Authenticator.
type Config struct {
	// Tokens checks agents' tokens; nil refuses every token.
	Tokens *TokenVerifier
	// CoordinatorPassword admits user CoordinatorUser with every right (the embedded server's
	// own coordinator connection); empty admits nobody under that name.
	CoordinatorPassword string
	// OperatorPassword admits user OperatorUser with the operator's rights; empty: no operator.
	OperatorPassword string
	// Timeout bounds one decision (TokenReview included); default 5 s.
	Timeout time.Duration
	Logger  logrus.FieldLogger
	// Registerer receives the decision counter; nil: not exported.
	Registerer prometheus.Registerer
}

// Authenticator decides who a connecting client is.
type Authenticator struct {
	cfg       Config
	log       logrus.FieldLogger
	decisions *prometheus.CounterVec
	refusals  ratelog.Limiter
}

// New returns an Authenticator for cfg.
func New(cfg Config) (*Authenticator, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		l := logrus.New()
		l.Out = discard{}
		log = l
	}
	a := &Authenticator{cfg: cfg, log: log.WithField("component", "bus-auth"),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgedrain_bus_auth_decisions_total",
			Help: "Bus connections decided by the coordinator, by role (agent, operator, coordinator, none) and result (accepted, refused, error).",
		}, []string{"role", "result"})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(a.decisions); err != nil {
			return nil, fmt.Errorf("bus auth metrics: %w", err)
		}
	}
	return a, nil
}

// NewPassword returns a random password (for the embedded server's own coordinator user).
func NewPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Authenticate decides creds. A refusal wraps ErrRefused; any other error means the decision
// could not be made (the API did not answer) and the client is refused for now too.
func (a *Authenticator) Authenticate(ctx context.Context, creds Credentials, remote string) (Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	id, err := a.decide(ctx, creds)
	role, result := id.Role.String(), "accepted"
	switch {
	case errors.Is(err, ErrRefused):
		role, result = "none", "refused"
	case err != nil:
		role, result = "none", "error"
	}
	a.decisions.WithLabelValues(role, result).Inc()
	entry := a.log.WithField("remote", remote)
	if err == nil {
		entry.WithField("identity", id.String()).Debug("bus client accepted")
	} else {
		// Refusals are logged as a sample (a hostile client may retry without end); the metric
		// counts every one.
		a.refusals.Logger("refused", entry).WithError(err).Warn("bus client refused")
	}
	return id, err
}

func (a *Authenticator) decide(ctx context.Context, creds Credentials) (Identity, error) {
	switch {
	case creds.Token != "" && (creds.User != "" || creds.Password != ""):
		return Identity{}, fmt.Errorf("%w: both a token and a user name", ErrRefused)
	case creds.Token != "":
		if a.cfg.Tokens == nil {
			return Identity{}, fmt.Errorf("%w: agent tokens are not accepted here", ErrRefused)
		}
		return a.cfg.Tokens.Verify(ctx, creds.Token)
	case creds.User == CoordinatorUser && passwordOK(a.cfg.CoordinatorPassword, creds.Password):
		return Identity{Role: RoleCoordinator, Subject: creds.User}, nil
	case creds.User == OperatorUser && passwordOK(a.cfg.OperatorPassword, creds.Password):
		return Identity{Role: RoleOperator, Subject: creds.User}, nil
	case creds.User != "":
		return Identity{}, fmt.Errorf("%w: wrong user name or password for %q", ErrRefused, creds.User)
	}
	return Identity{}, fmt.Errorf("%w: anonymous clients are not allowed", ErrRefused)
}

func passwordOK(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// Check implements nats-server's server.Authentication for the embedded server: it is called
// for every client connection and registers the client with its identity's permissions. An
// agent's connection is closed when its token expires; it reconnects with the rotated one.
func (a *Authenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o == nil {
		return false
	}
	id, err := a.Authenticate(context.Background(), Credentials{User: o.Username, Password: o.Password, Token: o.Token}, c.RemoteAddress().String())
	if err != nil {
		return false
	}
	c.RegisterUser(&server.User{Username: id.String(), Permissions: serverPermissions(PermissionsFor(id)), ConnectionDeadline: id.Expires})
	return true
}

func serverPermissions(p Permissions) *server.Permissions {
	if p.Publish == nil && p.Subscribe == nil {
		return nil
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.Publish},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
