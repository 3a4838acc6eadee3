package agent

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"time"
)

// The API-unreachable rule lets a node go down without its drain finishing, when the coordinator
// has not reached the Kubernetes API for --api-unreachable-timeout: a reboot may be the cure. That
// is right only if the outage is everyone's. A coordinator cut off alone (its own network, its
// node's) sees the same outage while the cluster is healthy; the node's agent then tells them
// apart by asking the API itself, before it acts on such a COMPLETE (nodedrain's APIUnreachable).

// APIProbe reports whether the Kubernetes API answers from this node.
type APIProbe func(ctx context.Context) bool

// apiProbeTimeout bounds one probe: as the coordinator's own probe of /readyz.
const apiProbeTimeout = 3 * time.Second

// InClusterAPIURL is the API server's /readyz as a pod sees it (KUBERNETES_SERVICE_HOST and
// _PORT); "" outside a cluster.
func InClusterAPIURL() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return "https://" + net.JoinHostPort(host, port) + "/readyz"
}

// HTTPAPIProbe probes url: any HTTP answer, whatever its status (401, 403, 503 from an API
// server not ready), means the API server answers, as for the coordinator's probe; only a
// transport error or no answer within apiProbeTimeout means it does not. The server's
// certificate is not verified: the probe sends no credentials, and a forged answer can only
// hold the operation back (the agent then does not act on the rule's COMPLETE), never let it run.
func HTTPAPIProbe(url string) APIProbe {
	client := &http.Client{Timeout: apiProbeTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above: fail-safe
		Proxy:           nil,
	}}
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return true
	}
}

// outageNotEveryones reports whether e, a confirmation read, is a COMPLETE of the API-unreachable
// rule while this node reaches the API: the coordinator alone is cut off.
func (e EvStatusRead) outageNotEveryones() bool {
	return e.Status != nil && e.Status.Status.Clears() && e.Status.APIUnreachable && e.APIReachable
}
