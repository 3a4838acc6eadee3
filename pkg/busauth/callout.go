package busauth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// CalloutSubject is where a NATS server configured for auth callout asks who a client is.
const CalloutSubject = "$SYS.REQ.USER.AUTH"

// calloutQueue makes each request answered by one coordinator replica.
const calloutQueue = "edgedrain-auth-callout"

// globalAccount is the account of a server configured without accounts; the issued users
// join it (in operator mode the issuer account decides instead).
const globalAccount = "$G"

// LoadIssuer reads the account NKey seed ("SA...") whose public key the server names as the
// auth callout issuer.
func LoadIssuer(path string) (nkeys.KeyPair, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth callout issuer seed: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(raw))))
	if err != nil {
		return nil, fmt.Errorf("auth callout issuer seed %s: %w", path, err)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("auth callout issuer seed %s: not an account seed (SA...)", path)
	}
	return kp, nil
}

// ServeCallout answers the server's auth callout requests on nc (which must connect as one of
// the callout's auth_users) with a's decisions until the subscription is closed. Each answer is
// a user JWT, signed by issuer, carrying the identity's permissions and its token's expiry.
func (a *Authenticator) ServeCallout(nc *nats.Conn, issuer nkeys.KeyPair) (*nats.Subscription, error) {
	return nc.QueueSubscribe(CalloutSubject, calloutQueue, func(m *nats.Msg) {
		resp, err := a.answer(m, issuer)
		if err != nil {
			a.log.WithError(err).Warn("auth callout request not answered")
			return
		}
		if err := m.Respond(resp); err != nil {
			a.log.WithError(err).Warn("auth callout answer not sent")
		}
	})
}

func (a *Authenticator) answer(m *nats.Msg, issuer nkeys.KeyPair) ([]byte, error) {
	if m.Header.Get("Nats-Server-Xkey") != "" {
		return nil, errors.New("the server encrypts callout requests (xkey); edgedrain does not: remove xkey from auth_callout")
	}
	req, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		return nil, fmt.Errorf("decoding the request: %w", err)
	}
	o := req.ConnectOptions
	creds := Credentials{User: o.Username, Password: o.Password, Token: o.Token}
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	id, err := a.Authenticate(context.Background(), creds, req.ClientInformation.Host)
	if err != nil {
		// The client sees only "authorization violation"; the reason is in our log and metric.
		resp.Error = "refused by edgedrain"
	} else if resp.Jwt, err = userJWT(req.UserNkey, id, issuer); err != nil {
		return nil, err
	}
	token, err := resp.Encode(issuer)
	if err != nil {
		return nil, fmt.Errorf("signing the answer: %w", err)
	}
	return []byte(token), nil
}

func userJWT(userNkey string, id Identity, issuer nkeys.KeyPair) (string, error) {
	uc := jwt.NewUserClaims(userNkey)
	uc.Name = id.String()
	uc.Audience = globalAccount
	if !id.Expires.IsZero() {
		uc.Expires = id.Expires.Unix()
	}
	p := PermissionsFor(id)
	uc.Pub.Allow.Add(p.Publish...)
	uc.Sub.Allow.Add(p.Subscribe...)
	token, err := uc.Encode(issuer)
	if err != nil {
		return "", fmt.Errorf("signing the user of %s: %w", id, err)
	}
	return token, nil
}
