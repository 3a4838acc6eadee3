package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// bus starts NATS as the coordinator does (anonymous clients refused; people's tools as the
// operator) with the two buckets holding a few nodes in different states, and returns the
// flags that reach it as the operator.
func bus(t *testing.T) string {
	t.Helper()
	coordPW, err := busauth.NewPassword()
	require.NoError(t, err)
	auth, err := busauth.New(busauth.Config{CoordinatorPassword: coordPW, OperatorPassword: "op-secret"})
	require.NoError(t, err)
	srv, err := pubsub.StartEmbedded(pubsub.EmbeddedConfig{StoreDir: t.TempDir(), Authentication: auth})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	operatorPW = filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(operatorPW, []byte("op-secret\n"), 0o600))
	_, js := testenv.ConnectNATSWith(t, pubsub.ConnectOptions{URLs: []string{srv.ClientURL()}, User: busauth.CoordinatorUser, Password: coordPW})
	ctx := context.Background()
	requests, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket}, nodedrain.RequestCodec{})
	require.NoError(t, err)
	statuses, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket}, nodedrain.StatusCodec{})
	require.NoError(t, err)
	coordStatuses = statuses
	now := time.Now()
	_, err = requests.Publish(ctx, "edge-1.shop", nodedrain.NodeDrainRequest{Node: "edge-1.shop", RequestID: "r1",
		RequestedAt: now.Add(-90 * time.Second), RequestedBy: nodedrain.RequesterUpdate, Context: "update v1.2.3"})
	require.NoError(t, err)
	_, err = statuses.Publish(ctx, "edge-1.shop", nodedrain.NodeDrainStatus{Node: "edge-1.shop", RequestID: "r1",
		Status: nodedrain.StatusCordoned, RequestedBy: nodedrain.RequesterUpdate, Attempt: 1, StartedAt: now.Add(-80 * time.Second),
		UpdatedAt: now, Message: "waiting for 1 volume(s) to be safe on other nodes", CordonedByUs: true,
		Blockers: []nodedrain.Blocker{{Kind: nodedrain.BlockerVolume, Namespace: "apps", Name: "pvc-x", Reason: "last healthy replica", Progress: 45}}})
	require.NoError(t, err)
	_, err = statuses.Publish(ctx, "edge-2.shop", nodedrain.NodeDrainStatus{Node: "edge-2.shop", Status: nodedrain.StatusNotRequested,
		UpdatedAt: now.Add(-3 * time.Hour), Message: "idle; node uncordoned"})
	require.NoError(t, err)
	// A request the coordinator has not answered yet.
	_, err = requests.Publish(ctx, "edge-3.shop", nodedrain.NodeDrainRequest{Node: "edge-3.shop", RequestID: "r3",
		RequestedAt: now.Add(-5 * time.Second), RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
	require.NoError(t, err)
	return srv.ClientURL()
}

// operatorPW is the operator's password file of the last bus started; coordStatuses its status
// bucket as the coordinator writes it.
var (
	operatorPW    string
	coordStatuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
)

// ctl runs edgedrainctl as the operator (args may override the credentials).
func ctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return ctlAs(t, append([]string{"--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW}, args...)...)
}

func ctlAs(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestStatusTable(t *testing.T) {
	url := bus(t)
	out, errOut, code := ctl(t, "--nats-url", url, "status")
	require.Equal(t, 0, code, errOut)
	lines := bytes.Split([]byte(out), []byte("\n"))
	assert.Regexp(t, `^NODE\s+STATUS\s+REQUESTER\s+ATTEMPT\s+AGE\s+MESSAGE`, string(lines[0]))
	assert.Regexp(t, `edge-1\.shop\s+CORDONED\s+UPDATE \(update v1\.2\.3\)\s+1\s+1m2\ds\s+waiting for 1 volume`, out)
	assert.Regexp(t, `blocked by volume apps/pvc-x \[45%\]\s+last healthy replica`, out)
	assert.Regexp(t, `edge-2\.shop\s+NOTREQUESTED\s+-\s+-\s+3h0m\s+idle`, out)
	assert.Regexp(t, `edge-3\.shop\s+UNKNOWN\s+DEVICEOP \(reboot\)\s+-\s+[5-9]s`, out)
}

func TestStatusJSON(t *testing.T) {
	url := bus(t)
	out, errOut, code := ctl(t, "--nats-url", url, "status", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var rows []nodedrain.StatusView
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3)
	assert.Equal(t, "edge-1.shop", rows[0].Status.Node)
	assert.Equal(t, nodedrain.StatusCordoned, rows[0].Status.Status)
	assert.Equal(t, 45, rows[0].Status.Blockers[0].Progress)
	require.NotNil(t, rows[0].Request)
	assert.Equal(t, "update v1.2.3", rows[0].Request.Context)
	assert.Nil(t, rows[1].Request)
	assert.Contains(t, out, `"Status": 5`, "statuses keep their wire numbers")
}

func TestWithdraw(t *testing.T) {
	url := bus(t)
	out, errOut, code := ctl(t, "--nats-url", url, "withdraw", "edge-3.shop")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "withdrew")
	out, _, _ = ctl(t, "--nats-url", url, "status", "-o", "json")
	var rows []nodedrain.StatusView
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	assert.Len(t, rows, 2, "edge-3 had only a request")
}

func TestBadInput(t *testing.T) {
	url := bus(t)
	tests := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"no command", []string{"--nats-url", url}, "Usage", 2},
		{"unknown command", []string{"--nats-url", url, "drain"}, `unknown command "drain"`, 1},
		{"bad output", []string{"--nats-url", url, "status", "-o", "yaml"}, `want table or json`, 1},
		{"bad node", []string{"--nats-url", url, "withdraw", "Node_1"}, "Node_1", 1},
		{"bad url", []string{"--nats-url", "http://x", "status"}, "nats", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := ctl(t, tt.args...)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, errOut, tt.want)
		})
	}
}

// Without the operator's credentials the bus refuses edgedrainctl, and it says so.
func TestRefusedWithoutOperatorCredentials(t *testing.T) {
	url := bus(t)
	_, errOut, code := ctlAs(t, "--timeout", "2s", "--nats-url", url, "status")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "Authorization Violation")
	wrong := filepath.Join(t.TempDir(), "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte("nope"), 0o600))
	_, errOut, code = ctlAs(t, "--timeout", "2s", "--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", wrong, "withdraw", "edge-3.shop")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "Authorization Violation")
}

func TestNoCoordinatorYet(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, errOut, code := ctlAs(t, "--nats-url", srv.ClientURL(), "status")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "has a coordinator run on this bus?")
}

// The fleet view: a hub NATS server with a leaf node per site, each site's JetStream in a domain
// of its own (its buckets stay on the site); edgedrainctl on the hub reads the sites' statuses
// with --js-domain, one SITE column. A site that does not answer is named and fails the
// command, and the others are still shown.
func TestStatusAcrossSites(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := testenv.BuildNATSServer(ctx, dir)
	require.NoError(t, err)
	leafPort := testenv.FreePort(t)
	hub := testenv.StartNATSServer(t, bin, "hub", func(store string) string {
		return fmt.Sprintf("jetstream { store_dir: %q, domain: hub }\nleafnodes { listen: \"127.0.0.1:%d\" }", store, leafPort)
	})
	for i, site := range []string{"shop-a", "shop-b"} {
		url := testenv.StartNATSServer(t, bin, site, func(store string) string {
			return fmt.Sprintf("jetstream { store_dir: %q, domain: %s }\nleafnodes { remotes: [ { url: \"nats-leaf://127.0.0.1:%d\" } ] }",
				store, site, leafPort)
		})
		// The site's coordinator writes its buckets on the site's server.
		_, js := testenv.ConnectNATS(t, url)
		_, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket}, nodedrain.RequestCodec{})
		require.NoError(t, err)
		statuses, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket}, nodedrain.StatusCodec{})
		require.NoError(t, err)
		node := fmt.Sprintf("edge-%d", i+1)
		_, err = statuses.Publish(ctx, node, nodedrain.NodeDrainStatus{Node: node, Status: nodedrain.StatusCordoned, RequestID: "r",
			Attempt: 1, UpdatedAt: time.Now(), Message: "evicting pods"})
		require.NoError(t, err)
	}
	var out, errOut string
	var code int
	require.Eventually(t, func() bool { // the leaf connections come up
		out, errOut, code = ctlAs(t, "--nats-url", hub, "status", "--js-domain", "shop-a,shop-b")
		return code == 0
	}, 30*time.Second, 200*time.Millisecond, "%s", errOut)
	assert.Regexp(t, `^SITE\s+NODE\s+STATUS`, out)
	assert.Regexp(t, `shop-a\s+edge-1\s+CORDONED`, out)
	assert.Regexp(t, `shop-b\s+edge-2\s+CORDONED`, out)

	out, errOut, code = ctlAs(t, "--nats-url", hub, "--timeout", "5s", "status", "--js-domain", "shop-a,shop-gone")
	assert.Equal(t, 1, code)
	assert.Regexp(t, `shop-a\s+edge-1\s+CORDONED`, out, "the sites that answer are shown")
	assert.Contains(t, errOut, "site shop-gone")

	_, errOut, code = ctlAs(t, "--nats-url", hub, "status", "--js-domain", "shop a")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "--js-domain")
}

// Installed on PATH as kubectl-edgedrain, edgedrainctl is a kubectl plugin: kubectl lists it and
// `kubectl edgedrain status` runs it (kubectl from the local cluster's pinned binaries), with
// its usage naming the plugin.
func TestKubectlPlugin(t *testing.T) {
	url := bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bins, err := testenv.BuildClusterBinaries(ctx)
	require.NoError(t, err)
	dir := t.TempDir()
	built, err := testenv.BuildGo(ctx, "./cmd/edgedrainctl", dir)
	require.NoError(t, err)
	require.NoError(t, os.Rename(built, filepath.Join(dir, PluginName)))
	require.NoError(t, os.Link(filepath.Join(dir, PluginName), filepath.Join(dir, CompletionName)))
	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(bins, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := kubectl("plugin", "list")
	require.NoError(t, err, out)
	assert.Contains(t, out, filepath.Join(dir, PluginName))
	out, err = kubectl("edgedrain", "--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW, "status")
	require.NoError(t, err, out)
	assert.Regexp(t, `edge-1\.shop\s+CORDONED\s+UPDATE`, out)
	out, _ = kubectl("edgedrain", "--help")
	assert.Contains(t, out, "Usage: kubectl edgedrain [flags] status")

	// Shell completion through kubectl (kubectl_complete-edgedrain, cobra's answer): commands
	// (each with its description after a tab), then the bus's node names.
	out, err = kubectl("__complete", "edgedrain", "st")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^status\t`, out)
	assert.NotContains(t, out, "withdraw")
	out, err = kubectl("__complete", "edgedrain", "keys", "")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^generate\t.*\ninit\t`, out)
	assert.Contains(t, out, ":4")
	out, err = kubectl("__completeNoDesc", "edgedrain", "keys", "")
	require.NoError(t, err, out)
	assert.Contains(t, out, "generate\ninit\n")
	out, err = kubectl("__complete", "edgedrain", "--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW,
		"withdraw", "edge-")
	require.NoError(t, err, out)
	for _, node := range []string{"edge-1.shop", "edge-2.shop", "edge-3.shop"} {
		assert.Contains(t, out, node+"\n")
	}
	out, err = kubectl("__complete", "edgedrain", "status", "-o", "")
	require.NoError(t, err, out)
	assert.Contains(t, out, "table\njson\n")
}

// status --watch draws the table again, in place, when a status changes, and ends cleanly when
// interrupted, well past --timeout (which bounds only the connection and the first table).
func TestStatusWatch(t *testing.T) {
	url := bus(t)
	var out syncWriter
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW,
			"--timeout", "2s", "status", "--watch"}, &out, &out)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "edge-2.shop  NOTREQUESTED") }, 10*time.Second, 20*time.Millisecond,
		"no first table:\n%s", out.String())
	time.Sleep(2500 * time.Millisecond) // past --timeout: the watch must outlive it
	_, err := coordStatuses.Publish(context.Background(), "edge-2.shop", nodedrain.NodeDrainStatus{Node: "edge-2.shop",
		Status: nodedrain.StatusCordoned, RequestID: "r2", Attempt: 1, UpdatedAt: time.Now(), Message: "evicting pods"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := out.String()
		i := strings.LastIndex(s, clearScreen)
		return i >= 0 && regexp.MustCompile(`edge-2\.shop\s+CORDONED`).MatchString(s[i:])
	}, 10*time.Second, 20*time.Millisecond, "the table was not drawn again:\n%s", out.String())
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, out.String())
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch did not end when interrupted")
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
