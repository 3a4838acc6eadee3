package busauth

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeReviews answers TokenReviews like an API server whose reviews may omit the node name,
// and counts them.
type fakeReviews struct {
	reviews  int
	withNode bool
	refuse   bool
}

func jwtExpiring(at time.Time, n int) string {
	claims := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d,"aud":["edgedrain"],"n":%d}`, at.Unix(), n))
	return "eyJhbGciOiJFUzI1NiJ9." + claims + ".c2ln"
}

func newFakeVerifier(t *testing.T, f *fakeReviews, now *time.Time, pods ...runtime.Object) *TokenVerifier {
	client := fake.NewSimpleClientset(pods...)
	client.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.reviews++
		tr := &authenticationv1.TokenReview{}
		if f.refuse {
			tr.Status.Error = "invalid bearer token"
			return true, tr, nil
		}
		tr.Status.Authenticated = true
		tr.Status.Audiences = []string{DefaultAudience}
		tr.Status.User = authenticationv1.UserInfo{Username: "system:serviceaccount:edge:agent", Extra: map[string]authenticationv1.ExtraValue{
			extraPodName: {"agent-x"}, extraPodUID: {"uid-1"}}}
		if f.withNode {
			tr.Status.User.Extra[extraNodeName] = authenticationv1.ExtraValue{"from-review"}
		}
		return true, tr, nil
	})
	v, err := NewTokenVerifier(TokenConfig{Client: client, Namespace: "edge", ServiceAccount: "agent", CacheSize: 2,
		FailureTTL: 2 * time.Second, Now: func() time.Time { return *now }})
	require.NoError(t, err)
	return v
}

func agentPod(uid, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "agent-x", UID: "uid-1"}, Spec: corev1.PodSpec{NodeName: node}}
}

func TestNodeComesFromTheBindingNeverTheClient(t *testing.T) {
	now := time.Now()
	ctx := context.Background()
	// The review names the node: it wins (the pod is not even read).
	v := newFakeVerifier(t, &fakeReviews{withNode: true}, &now, agentPod("uid-1", "from-pod"))
	id, err := v.Verify(ctx, jwtExpiring(now.Add(time.Hour), 1))
	require.NoError(t, err)
	assert.Equal(t, "from-review", id.Node)
	// It does not: the bound pod's node, if the pod is still the one the token was bound to.
	v = newFakeVerifier(t, &fakeReviews{}, &now, agentPod("uid-1", "from-pod"))
	id, err = v.Verify(ctx, jwtExpiring(now.Add(time.Hour), 1))
	require.NoError(t, err)
	assert.Equal(t, "from-pod", id.Node)
	replaced := agentPod("", "from-pod")
	replaced.UID = "uid-2"
	v = newFakeVerifier(t, &fakeReviews{}, &now, replaced)
	_, err = v.Verify(ctx, jwtExpiring(now.Add(time.Hour), 1))
	require.ErrorIs(t, err, ErrRefused, "a pod of the same name created since")
	v = newFakeVerifier(t, &fakeReviews{}, &now)
	_, err = v.Verify(ctx, jwtExpiring(now.Add(time.Hour), 1))
	require.ErrorIs(t, err, ErrRefused, "the pod is gone")
}

func TestPrecheckSparesTheAPIAndIdentitiesAreShortLived(t *testing.T) {
	now := time.Now()
	ctx := context.Background()
	f := &fakeReviews{withNode: true}
	v := newFakeVerifier(t, f, &now)
	for name, tok := range map[string]string{
		"garbage":        "not-a-jwt",
		"expired":        jwtExpiring(now.Add(-clockLeeway-time.Second), 1),
		"other audience": "eyJhbGciOiJFUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d,"aud":"api"}`, now.Add(time.Hour).Unix())) + ".c2ln",
	} {
		_, err := v.Verify(ctx, tok)
		require.ErrorIs(t, err, ErrRefused, name)
	}
	assert.Zero(t, f.reviews, "refused without a TokenReview")
	id, err := v.Verify(ctx, jwtExpiring(now.Add(24*time.Hour), 2))
	require.NoError(t, err)
	assert.Equal(t, now.Add(maxIdentityLife), id.Expires, "a long-lived token admits for 10 minutes at a time")
}

func TestReviewsAreCachedUntilExpiryAndRefusalsBriefly(t *testing.T) {
	now := time.Now()
	ctx := context.Background()
	f := &fakeReviews{withNode: true}
	v := newFakeVerifier(t, f, &now)
	tok := jwtExpiring(now.Add(time.Minute), 1)
	for range 3 {
		_, err := v.Verify(ctx, tok)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, f.reviews, "a valid token is reviewed once while valid")
	now = now.Add(61*time.Second + clockLeeway)
	_, err := v.Verify(ctx, tok)
	require.ErrorIs(t, err, ErrRefused, "expired: refused without asking")
	assert.Equal(t, 1, f.reviews)

	f.refuse = true
	bad := jwtExpiring(now.Add(time.Hour), 2)
	for range 3 {
		_, err := v.Verify(ctx, bad)
		require.ErrorIs(t, err, ErrRefused)
	}
	assert.Equal(t, 2, f.reviews, "a refusal is remembered for a moment")
	now = now.Add(3 * time.Second)
	_, err = v.Verify(ctx, bad)
	require.ErrorIs(t, err, ErrRefused)
	assert.Equal(t, 3, f.reviews, "and asked again after it")

	f.refuse = false
	for i := range 10 {
		_, err := v.Verify(ctx, jwtExpiring(now.Add(time.Hour), 10+i))
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, v.Cached(), 2, "the cache stays within its bound")
}
