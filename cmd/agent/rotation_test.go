package main

import (
	"context"
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/sirupsen/logrus"
)

// testKey is a signing key of this test's own, with its public key in dir/<name>.pem.
func testKey(t *testing.T, dir, name string) *nodedrain.Signer {
	t.Helper()
	s := nodedrain.NewSigner(ed25519.NewKeyFromSeed([]byte(strings.Repeat(name[:1], ed25519.SeedSize))))
	pub, err := nodedrain.PublicKeyPEM(s.Public())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pub, 0o644))
	return s
}

// TestKeyRotationKeepsADrainUnderWay follows the rotation procedure of docs/status-signing.md
// while node A's drain is held by a budget and node B sits idle with a status: the new public
// key is added to the agents' trusted keys (a directory, as a ConfigMap is mounted), the
// coordinator restarts with the new private key (it signs A's and B's statuses anew as it
// resumes), the old public key is removed. A status signed with the old key is refused from
// then on, and A's reboot runs once, after the COMPLETE signed with the new key.
func TestKeyRotationKeepsADrainUnderWay(t *testing.T) {
	t.Parallel()
	s := newScene(t, "rotkey", 3)
	target := s.deploy("db", 2, 1)
	idle := s.nodes[slices.IndexFunc(s.nodes, func(n string) bool { return n != target })]
	unblock := s.blockEvictions("db", 2)
	dir := t.TempDir() // the trusted-keys ConfigMap, as mounted
	oldKey, newKey := testKey(t, dir, "old"), testKey(t, t.TempDir(), "new")
	log := logrus.New()
	trusted, err := cli.NewTrustedKeys(dir, time.Millisecond, log)
	require.NoError(t, err)
	withKey := func(k *nodedrain.Signer) func(*coordinator.Config) {
		return func(c *coordinator.Config) {
			c.Signer, c.TrustedKeys = k, trusted.Keys
			c.Limits.DrainAttemptTimeout = 5 * time.Minute
		}
	}
	stop := s.runCoordinator(withKey(oldKey))
	a := s.newAgent(target, "--trusted-keys", dir)
	a.start()
	req := s.deferReboot(a)
	s.waitBlocked(target, req.RequestID)
	ctx := context.Background()
	_, err = s.Statuses.Publish(ctx, idle, oldKey.Sign(nodedrain.NodeDrainStatus{Node: idle, Status: nodedrain.StatusNotRequested, Term: 1}))
	require.NoError(t, err)

	// 1. The new public key joins the trusted keys; the agent reads them again.
	newPub, err := nodedrain.PublicKeyPEM(newKey.Public())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "new.pem"), newPub, 0o644))
	require.Eventually(t, func() bool { return strings.Contains(a.proc.Log(), "the trusted keys changed") }, 30*time.Second,
		50*time.Millisecond, "the agent did not read the new trusted key")
	// 2. The coordinator restarts with the new private key.
	stop()
	s.runCoordinator(withKey(newKey))
	for _, node := range []string{target, idle} {
		require.Eventually(t, func() bool {
			st, _, err := s.Statuses.Get(ctx, node)
			return err == nil && st.SignedBy == newKey.KeyID()
		}, 15*time.Second, 50*time.Millisecond, "%s's status was not signed anew with the new key", node)
	}
	// 3. The old public key goes.
	require.NoError(t, os.Remove(filepath.Join(dir, "old.pem")))
	require.Eventually(t, func() bool { return strings.Count(a.proc.Log(), "the trusted keys changed") == 2 }, 30*time.Second,
		50*time.Millisecond, "the agent did not read the trusted keys without the old one")
	before := a.metric(refusedSeries("untrusted-key"))
	_, err = s.Statuses.Publish(ctx, target, oldKey.Sign(nodedrain.NodeDrainStatus{Node: target, RequestID: req.RequestID,
		Status: nodedrain.StatusComplete, Term: 1 << 30}))
	require.NoError(t, err)
	waitRefused(a, "untrusted-key", before)
	s.requireStillDeferred(a, req.RequestID)

	s.finishOnce(a, req.RequestID, unblock)
	last := s.Seen(target)[len(s.Seen(target))-1]
	require.Equal(t, newKey.KeyID(), last.SignedBy)
}

// TestUpgradeFromACoordinatorThatDoesNotSign: agents are upgraded first, while the old
// coordinator still publishes unsigned statuses (played by the test). The new agent refuses
// them, unsigned COMPLETE included, and holds its reboot; once the new coordinator runs, it
// takes the unsigned statuses for forgeries, drains the node itself and signs; the reboot runs
// once, after that COMPLETE. (Upgrading the coordinator first avoids the wait: older agents
// ignore the new fields.)
func TestUpgradeFromACoordinatorThatDoesNotSign(t *testing.T) {
	t.Parallel()
	s := newScene(t, "upgrade", 3)
	target := s.deploy("web", 2, 1)
	a := s.newAgent(target)
	a.start()
	req := s.deferReboot(a)
	ctx := context.Background()
	for _, st := range []nodedrain.DrainStatus{nodedrain.StatusRequested, nodedrain.StatusComplete} {
		before := a.metric(refusedSeries("unsigned"))
		_, err := s.Statuses.Publish(ctx, target, nodedrain.NodeDrainStatus{Node: target, RequestID: req.RequestID, Status: st,
			RequestedBy: nodedrain.RequesterDeviceOp, UpdatedAt: time.Now()})
		require.NoError(t, err)
		waitRefused(a, "unsigned", before)
		s.requireStillDeferred(a, req.RequestID)
	}
	s.runCoordinator(nil)
	complete := s.waitFor(target, drainTimeout, "a signed COMPLETE", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusComplete && st.RequestID == req.RequestID && st.SignedBy == testenv.Signer().KeyID()
	})
	runs := a.waitRuns(1, 10*time.Second)
	require.False(t, runs[0].at.Before(complete.UpdatedAt), "the reboot ran before the signed COMPLETE")
}

// An agent without a trusted key, or given a private key as one, or a directory holding no
// key, stops at start saying what to fix: it would otherwise take no status at all.
func TestAgentRefusesToStartWithoutTrustedKeys(t *testing.T) {
	dir := t.TempDir()
	private, _, err := nodedrain.GenerateSigningKey()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "signing.pem"), private, 0o600))
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no trusted keys"},
		{[]string{"--trusted-keys", filepath.Join(dir, "signing.pem")}, "private key among the trusted keys"},
		{[]string{"--trusted-keys", empty}, "no PEM \"PUBLIC KEY\""},
		{[]string{"--trusted-keys", filepath.Join(empty, "missing")}, "no such file"},
	} {
		cmd := exec.Command(agentBin, append([]string{"run", "--node-name", "n1", "--state-dir", t.TempDir(), "--socket", "",
			"--listen", "", "--nats-url", "nats://127.0.0.1:1"}, c.args...)...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "EDGEDRAIN_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "the agent started with %v: %s", c.args, out)
		require.Contains(t, string(out), c.want, "with %v", c.args)
	}
}
