package busauth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

const agentSA = "edgedrain-agent"

// world is a namespace with two nodes, an agent pod on each, an Authenticator for them, and a
// bus (embedded or external) whose buckets the coordinator created.
type world struct {
	c        *testenv.Cluster
	ns       string
	nodes    []string
	pods     []*corev1.Pod
	verifier *busauth.TokenVerifier
	auth     *busauth.Authenticator
	reg      *prometheus.Registry
	url      string
	coordPW  string
	opPW     string
	coord    jetstream.JetStream
}

func newWorld(t *testing.T) *world {
	c := testenv.RequireCluster(t, cluster)
	w := &world{c: c, ns: c.Namespace(t), nodes: c.AddNodes(t, "busauth", 2), reg: prometheus.NewRegistry()}
	for i, n := range w.nodes {
		w.pods = append(w.pods, c.AgentPod(t, w.ns, agentSA, fmt.Sprintf("agent-%d", i), n))
	}
	var err error
	w.verifier, err = busauth.NewTokenVerifier(busauth.TokenConfig{Client: c.Client, Namespace: w.ns, ServiceAccount: agentSA})
	require.NoError(t, err)
	w.coordPW, err = busauth.NewPassword()
	require.NoError(t, err)
	w.opPW, err = busauth.NewPassword()
	require.NoError(t, err)
	w.auth, err = busauth.New(busauth.Config{Tokens: w.verifier, CoordinatorPassword: w.coordPW, OperatorPassword: w.opPW, Registerer: w.reg})
	require.NoError(t, err)
	return w
}

// startEmbedded serves the bus from an embedded server that authenticates in-process.
func (w *world) startEmbedded(t *testing.T) {
	e, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{StoreDir: t.TempDir(), Authentication: w.auth})
	require.NoError(t, err)
	t.Cleanup(e.Shutdown)
	w.url = e.ClientURL()
	w.openBuckets(t, nats.UserInfo(busauth.CoordinatorUser, w.coordPW))
}

// openBuckets connects as the coordinator and creates both buckets (as the engine does).
func (w *world) openBuckets(t *testing.T, creds nats.Option) {
	nc, err := nats.Connect(w.url, creds)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w.coord, err = jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	// History kept so that a test can look at every value an attack left.
	_, err = pubsub.OpenBucket(ctx, w.coord, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, History: 10}, nodedrain.RequestCodec{})
	require.NoError(t, err)
	_, err = pubsub.OpenBucket(ctx, w.coord, pubsub.BucketConfig{Name: nodedrain.StatusBucket}, nodedrain.StatusCodec{})
	require.NoError(t, err)
}

// client is a raw NATS connection that records the server's permission errors.
type client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	denied chan string
}

func (w *world) connect(t *testing.T, opts ...nats.Option) (*client, error) {
	cl := &client{denied: make(chan string, 64)}
	opts = append(opts, nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(err.Error(), "Permissions Violation") {
			select {
			case cl.denied <- err.Error():
			default:
			}
		}
	}))
	nc, err := nats.Connect(w.url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	cl.nc = nc
	cl.js, err = jetstream.New(nc)
	require.NoError(t, err)
	return cl, nil
}

// agent connects as the agent of node i with a fresh token bound to its pod.
func (w *world) agent(t *testing.T, i int) *client {
	tok := w.c.PodToken(t, w.pods[i], testenv.AgentAudience, 600)
	cl, err := w.connect(t, nats.Token(tok), nats.CustomInboxPrefix(nodedrain.AgentInboxPrefix(w.nodes[i])))
	require.NoError(t, err, "agent of %s with a valid token", w.nodes[i])
	return cl
}

// refused runs op and requires the server to report a permission violation naming subject.
func (cl *client) refused(t *testing.T, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	for len(cl.denied) > 0 {
		<-cl.denied
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := op(ctx)
	require.Error(t, err, "%s: the operation succeeded", what)
	select {
	case msg := <-cl.denied:
		require.Contains(t, msg, subject, "%s: refused for another subject", what)
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: failed with %v but the server reported no permission violation", what, err)
	}
}

// subRefused subscribes to subject and requires the server to refuse it.
func (cl *client) subRefused(t *testing.T, subject string) {
	t.Helper()
	for len(cl.denied) > 0 {
		<-cl.denied
	}
	sub, err := cl.nc.SubscribeSync(subject)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	select {
	case msg := <-cl.denied:
		require.Contains(t, msg, "Subscription to \""+subject+"\"")
	case <-time.After(2 * time.Second):
		t.Fatalf("subscribing to %s: the server reported no permission violation", subject)
	}
}
