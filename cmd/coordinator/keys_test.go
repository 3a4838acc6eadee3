package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// runCoordinator runs the coordinator binary to its exit, without the tests' key environment,
// and returns its output.
func runCoordinatorToExit(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(coordBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EDGEDRAIN_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the coordinator did not stop at start")
	}
	require.Error(t, err, "the coordinator started: %s", out)
	return string(out)
}

// A coordinator without a signing key, or whose key the trusted keys do not hold, or with a
// private key given as a trusted key, stops at start saying what to fix.
func TestCoordinatorRefusesToStartWithoutAUsableKey(t *testing.T) {
	dir := t.TempDir()
	private, public, err := nodedrain.GenerateSigningKey()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "signing.pem"), private, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "signing.pub"), public, 0o644))
	_, otherTrusted, err := testenv.KeyFiles()
	require.NoError(t, err)

	out := runCoordinatorToExit(t, "--listen", "")
	require.Contains(t, out, "no signing key")
	require.Contains(t, out, "docs/status-signing.md")
	out = runCoordinatorToExit(t, "--listen", "", "--signing-key", filepath.Join(dir, "signing.pem"))
	require.Contains(t, out, "no trusted keys")
	out = runCoordinatorToExit(t, "--listen", "", "--signing-key", filepath.Join(dir, "signing.pem"), "--trusted-keys", otherTrusted)
	require.Contains(t, out, "is not among the trusted keys")
	out = runCoordinatorToExit(t, "--listen", "", "--signing-key", filepath.Join(dir, "signing.pem"), "--trusted-keys", filepath.Join(dir, "signing.pem"))
	require.Contains(t, out, "private key among the trusted keys")
	out = runCoordinatorToExit(t, "--listen", "", "--signing-key", filepath.Join(dir, "signing.pub"), "--trusted-keys", dir)
	require.Contains(t, out, "no PEM \"PRIVATE KEY\" block")
	out = runCoordinatorToExit(t, "--listen", "", "--signing-key", "/dev/zero", "--trusted-keys", dir)
	require.Contains(t, out, "not a regular file")
}

// Two replicas with different keys: the second, which does not trust the key the active one
// signs with, stops at start naming both keys.
func TestReplicaWithAnotherKeyRefusesToStart(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ns := c.Namespace(t)
	bus := testenv.StartBus(t)
	first := testenv.StartProc(t, t.TempDir(), "coordinator-a", coordBin, nil,
		"--kubeconfig", c.Kubeconfig, "--nats-url", bus.NATS.ClientURL(), "--leader-election-namespace", ns, "--identity", "a",
		"--node-selector", testenv.GroupLabel+"=nobody", "--cluster-node-selector", testenv.GroupLabel+"=nobody", "--listen", "", "--log-format", "json")
	require.Eventually(t, func() bool {
		var term nodedrain.Term
		data, err := bus.JS.Conn().Request("$JS.API.DIRECT.GET.KV_"+nodedrain.StatusBucket+".$KV."+nodedrain.StatusBucket+"."+nodedrain.TermKey, nil, time.Second)
		if err != nil || len(data.Data) == 0 {
			return false
		}
		term, err = nodedrain.TermCodec{}.Decode(data.Data)
		return err == nil && term.KeyID == testenv.Signer().KeyID()
	}, 60*time.Second, 100*time.Millisecond, "the first replica wrote no term record naming its key\n%s", first.Tail(20))

	dir := t.TempDir()
	private, public, err := nodedrain.GenerateSigningKey()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "signing.pem"), private, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trusted.pem"), public, 0o644))
	out := runCoordinatorToExit(t, "--kubeconfig", c.Kubeconfig, "--nats-url", bus.NATS.ClientURL(), "--leader-election-namespace", ns,
		"--identity", "b", "--listen", "", "--signing-key", filepath.Join(dir, "signing.pem"), "--trusted-keys", filepath.Join(dir, "trusted.pem"))
	require.Contains(t, out, "coordinator a")
	require.Contains(t, out, testenv.Signer().KeyID())
	require.Contains(t, out, "which this replica does not trust")
}
