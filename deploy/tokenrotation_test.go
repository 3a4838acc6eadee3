package deploy_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tokenExpiry reads a JWT's exp claim (unverified: the test only asks when the kubelet's token
// stops being accepted).
func tokenExpiry(t *testing.T, jwt string) time.Time {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(jwt), ".")
	require.Len(t, parts, 3, "not a JWT")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct {
		Exp int64 `json:"exp"`
	}
	require.NoError(t, json.Unmarshal(payload, &claims))
	return time.Unix(claims.Exp, 0)
}

// TestAgentKeepsTheBusAcrossTokenRotations: the agent shows the bus its pod's projected token
// (audience edgedrain, expirationSeconds 600, the API's shortest), which the real kubelet renews
// at 80 % of its life. The agent stays ready across two renewals; by then the token it started
// with has expired, and the bus server is restarted (the coordinator's pod deleted), so the
// agent is ready again only if it connects with the token the kubelet wrote last. About 20
// minutes: it runs in parallel with the package's other tests.
func TestAgentKeepsTheBusAcrossTokenRotations(t *testing.T) {
	t.Parallel()
	in := installOnRealNodes(t, helmInstall)
	ctx := context.Background()
	node := in.rc.Nodes[0]
	pod, ok := in.agentPod(ctx, node.Name)
	require.True(t, ok)
	// A projected volume is a memory file system the kubelet mounts inside the node.
	path, err := node.Seen(filepath.Join("/var/lib/kubelet/pods", string(pod.UID), "volumes/kubernetes.io~projected/bus-token/token"))
	require.NoError(t, err)
	read := func() string {
		b, err := os.ReadFile(path)
		require.NoError(t, err, "the agent's projected token on the node's disk")
		return string(b)
	}

	first := read()
	last, renewed := first, []time.Time{}
	start := time.Now()
	var notReady []time.Time
	until(t, 25*time.Minute, "two renewals of the agent's token by the kubelet", func(ctx context.Context) bool {
		if !in.agentReady(node.Name)(ctx) {
			notReady = append(notReady, time.Now())
		}
		if tok := read(); tok != last {
			last, renewed = tok, append(renewed, time.Now())
			t.Logf("token renewed by the kubelet %s after the install's agents were ready", time.Since(start).Round(time.Second))
		}
		return len(renewed) >= 2
	}, in.describe)
	require.Empty(t, notReady, "the agent was not ready while its token was renewed")
	expired := tokenExpiry(t, first)
	require.True(t, time.Now().After(expired), "the first token (expires %s) has not expired yet: the reconnect below would not tell tokens apart", expired)

	coords, err := in.rc.Client.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=edgedrain-coordinator"})
	require.NoError(t, err)
	require.Len(t, coords.Items, 1)
	require.NoError(t, in.rc.Client.CoreV1().Pods(in.ns).Delete(ctx, coords.Items[0].Name, metav1.DeleteOptions{}))
	restarted := time.Now()
	// Readiness alone could miss a short outage (the probe's period): the agent's own log says
	// when it got the bus back.
	logs := filepath.Join("/var/log/pods", in.ns+"_"+pod.Name+"_"+string(pod.UID), "agent")
	until(t, 3*time.Minute, "the agent connected to the restarted bus server", func(context.Context) bool {
		return loggedSince(t, node.Path, logs, `"msg":"nats reconnected"`, restarted)
	}, in.describe)
	until(t, 3*time.Minute, "the agent ready again on its renewed token", in.agentReady(node.Name), in.describe)
	t.Logf("agent ready again %s after its bus server was restarted, on the token renewed %s after the first",
		time.Since(restarted).Round(time.Millisecond), renewed[1].Sub(start).Round(time.Second))
}

// loggedSince reports whether a container log directory of the node (the kubelet's
// /var/log/pods/<ns>_<pod>_<uid>/<container>) has a line containing msg written after since.
func loggedSince(t *testing.T, onNode func(string) (string, error), dir, msg string, since time.Time) bool {
	t.Helper()
	onDisk, err := onNode(dir)
	require.NoError(t, err)
	files, _ := filepath.Glob(filepath.Join(onDisk, "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			// The kubelet's CRI log format: <RFC 3339 time> <stream> <tag> <the line>.
			at, rest, ok := strings.Cut(line, " ")
			when, err := time.Parse(time.RFC3339Nano, at)
			if ok && err == nil && when.After(since) && strings.Contains(rest, msg) {
				return true
			}
		}
	}
	return false
}
