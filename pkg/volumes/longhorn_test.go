package volumes

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// A Longhorn source started while the API server does not answer (a coordinator started during
// an outage, or with its path to the API cut) waits for it, and starts once it answers, instead of
// failing the coordinator's start.
func TestLonghornStartWaitsForTheAPIServer(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ensureLonghornNamespace(t, c.Client)
	u, err := url.Parse(c.Admin.Host)
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	rc := rest.CopyConfig(c.Admin)
	rc.Host = "https://" + proxy.Addr()
	dyn, err := dynamic.NewForConfig(rc)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	require.NoError(t, err)
	proxy.Cut()
	l := NewLonghorn(dyn, disc, lhNS, logrus.New().WithField("test", t.Name()))
	started := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { started <- l.Start(ctx) }()
	select {
	case err := <-started:
		t.Fatalf("Start returned while the API server did not answer: %v", err)
	case <-time.After(2 * time.Second):
	}
	require.NoError(t, proxy.Restore())
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return once the API server answered")
	}
	require.Eventually(t, l.HasSynced, 30*time.Second, 50*time.Millisecond, "its caches never filled")
	assert.True(t, l.Available(), "Longhorn's CRDs are served: the source is available")
}
