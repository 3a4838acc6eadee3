package busauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// DefaultAudience is the audience of agents' projected tokens: the API server refuses such a
// token for itself, so it opens nothing in the API, and edgedrain refuses any other audience.
const DefaultAudience = "edgedrain"

// The extras the API server adds to a TokenReview of a pod-bound ServiceAccount token.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// ErrRefused wraps every reason a credential is refused.
var ErrRefused = errors.New("bus credential refused")

// TokenConfig configures a TokenVerifier.
type TokenConfig struct {
	// Client makes the TokenReviews (and reads the bound pod when the review names no node).
	Client kubernetes.Interface
	// Audience the token must be issued for; empty means DefaultAudience.
	Audience string
	// Namespace and ServiceAccount are the agents' ServiceAccount; a token of any other is refused.
	Namespace, ServiceAccount string
	// CacheSize bounds the successful reviews kept (default 4096): enough for a fleet, bounded
	// against a client that presents many valid tokens.
	CacheSize int
	// FailureTTL is how long a refused token is refused without asking the API again (default
	// 2 s: a flood of one bad token costs one review per TTL; a token that becomes valid, e.g.
	// a pod just bound, is accepted soon after).
	FailureTTL time.Duration
	// Timeout bounds one review (default 5 s).
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// TokenVerifier checks agents' tokens with TokenReview and caches the answers.
type TokenVerifier struct {
	cfg   TokenConfig
	mu    sync.Mutex
	cache map[[32]byte]cached
	order [][32]byte // insertion order, oldest first, for eviction
}

type cached struct {
	id    Identity
	err   error
	until time.Time
}

// NewTokenVerifier checks cfg and returns a verifier.
func NewTokenVerifier(cfg TokenConfig) (*TokenVerifier, error) {
	if cfg.Client == nil {
		return nil, errors.New("token verifier: a Kubernetes client is required")
	}
	if cfg.Namespace == "" || cfg.ServiceAccount == "" {
		return nil, errors.New("token verifier: the agents' ServiceAccount namespace and name are required")
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 4096
	}
	if cfg.FailureTTL <= 0 {
		cfg.FailureTTL = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &TokenVerifier{cfg: cfg, cache: map[[32]byte]cached{}}, nil
}

// Verify returns the agent identity token proves, or an error wrapping ErrRefused that says
// why. The node is taken from the token's pod binding only.
func (v *TokenVerifier) Verify(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, fmt.Errorf("%w: empty token", ErrRefused)
	}
	now := v.cfg.Now()
	// What can be told without the API server is told first: a flood of garbage or expired
	// tokens costs no TokenReview.
	exp, err := precheck(token, v.cfg.Audience, now)
	if err != nil {
		return Identity{}, err
	}
	key := sha256.Sum256([]byte(token))
	v.mu.Lock()
	c, ok := v.cache[key]
	v.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.id, c.err
	}
	ctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	id, err := v.review(ctx, token, exp)
	switch {
	case err == nil:
		// However long the token claims to live (a kubelet's own TokenRequest may ask for hours),
		// an identity is good for at most maxIdentityLife: then the connection is closed and the
		// token reviewed again, so a deleted pod's token stops working soon.
		if limit := now.Add(maxIdentityLife); id.Expires.After(limit) {
			id.Expires = limit
		}
		v.remember(key, cached{id: id, until: id.Expires})
	case errors.Is(err, ErrRefused):
		v.remember(key, cached{err: err, until: now.Add(v.cfg.FailureTTL)})
	}
	// An error of the API itself is not cached: the next attempt asks again.
	return id, err
}

func (v *TokenVerifier) remember(key [32]byte, c cached) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.cache[key]; !ok {
		v.order = append(v.order, key)
	}
	v.cache[key] = c
	now := v.cfg.Now()
	for len(v.cache) > v.cfg.CacheSize && len(v.order) > 0 {
		oldest := v.order[0]
		v.order = v.order[1:]
		delete(v.cache, oldest)
	}
	// Drop expired entries from the front now and then, so the order list stays bounded too.
	for len(v.order) > 0 {
		if e, ok := v.cache[v.order[0]]; ok && now.Before(e.until) {
			break
		}
		delete(v.cache, v.order[0])
		v.order = v.order[1:]
	}
}

// Cached reports how many answers the cache holds (for tests and metrics).
func (v *TokenVerifier) Cached() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.cache)
}

func (v *TokenVerifier) review(ctx context.Context, token string, exp time.Time) (Identity, error) {
	tr, err := v.cfg.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{v.cfg.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		reason := st.Error
		if reason == "" {
			reason = "not authenticated"
		}
		return Identity{}, fmt.Errorf("%w: the API server did not accept the token for audience %q: %s", ErrRefused, v.cfg.Audience, reason)
	}
	if !slices.Contains(st.Audiences, v.cfg.Audience) {
		return Identity{}, fmt.Errorf("%w: token audiences %v do not include %q", ErrRefused, st.Audiences, v.cfg.Audience)
	}
	want := "system:serviceaccount:" + v.cfg.Namespace + ":" + v.cfg.ServiceAccount
	if st.User.Username != want {
		return Identity{}, fmt.Errorf("%w: token of %q, agents use %q", ErrRefused, st.User.Username, want)
	}
	pod, uid := first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID])
	if pod == "" || uid == "" {
		return Identity{}, fmt.Errorf("%w: token of %s is not bound to a pod (a plain ServiceAccount token?)", ErrRefused, want)
	}
	node := first(st.User.Extra[extraNodeName])
	if node == "" {
		if node, err = v.nodeOfPod(ctx, pod, types.UID(uid)); err != nil {
			return Identity{}, err
		}
	}
	return Identity{Role: RoleAgent, Node: node, Subject: v.cfg.Namespace + "/" + pod, Expires: exp}, nil
}

// nodeOfPod reads the node of the pod a token is bound to (for API servers whose reviews do
// not name the node): the pod must still be the one the token was issued for.
func (v *TokenVerifier) nodeOfPod(ctx context.Context, name string, uid types.UID) (string, error) {
	pod, err := v.cfg.Client.CoreV1().Pods(v.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: pod %s/%s the token is bound to is gone", ErrRefused, v.cfg.Namespace, name)
	}
	if err != nil {
		return "", fmt.Errorf("reading the pod %s/%s the token is bound to: %w", v.cfg.Namespace, name, err)
	}
	if pod.UID != uid {
		return "", fmt.Errorf("%w: pod %s/%s was replaced since the token was issued", ErrRefused, v.cfg.Namespace, name)
	}
	if pod.Spec.NodeName == "" {
		return "", fmt.Errorf("%w: pod %s/%s is not scheduled to a node", ErrRefused, v.cfg.Namespace, name)
	}
	return pod.Spec.NodeName, nil
}

// clockLeeway is how far past its expiry (by this clock) a token is still sent to the API server,
// whose clock decides: clocks of a coordinator and an API server differ a little.
const clockLeeway = time.Minute

// maxIdentityLife bounds how long one review admits an agent.
const maxIdentityLife = 10 * time.Minute

type claims struct {
	Exp int64 `json:"exp"`
	Aud any   `json:"aud"` // a string or a list of strings
}

// readClaims reads a JWT's claims without checking its signature (the API server does).
func readClaims(token string) (claims, bool) {
	var c claims
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(raw, &c) != nil {
		return c, false
	}
	return c, true
}

// precheck refuses, without asking the API server, a token that is not a JWT, has expired or
// was not issued for audience, and returns its expiry. The review still decides every token that
// passes (the claims are read unverified; the expiry is used only once the review accepted them).
func precheck(token, audience string, now time.Time) (time.Time, error) {
	c, ok := readClaims(token)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: not a ServiceAccount token (JWT)", ErrRefused)
	}
	exp := time.Unix(c.Exp, 0)
	switch {
	case c.Exp == 0:
		return time.Time{}, fmt.Errorf("%w: token has no expiry", ErrRefused)
	case !now.Before(exp.Add(clockLeeway)):
		return time.Time{}, fmt.Errorf("%w: token expired at %s", ErrRefused, exp.UTC().Format(time.RFC3339))
	}
	switch aud := c.Aud.(type) {
	case string:
		if aud == audience {
			return exp, nil
		}
	case []any:
		if slices.Contains(aud, any(audience)) {
			return exp, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: token not issued for audience %q", ErrRefused, audience)
}

func first(v authenticationv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
