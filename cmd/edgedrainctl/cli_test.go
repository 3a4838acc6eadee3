package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The command lines written for edgedrainctl before it moved to cobra and pflag still work: Go's
// single-dash long flags, --o for -o, the bus flags from their environment variables (the
// command line winning), and now also flags after the command.
func TestCommandLineCompatibility(t *testing.T) {
	url := bus(t)
	rows := func(t *testing.T, args ...string) []nodedrain.StatusView {
		t.Helper()
		out, errOut, code := ctlAs(t, args...)
		require.Equal(t, 0, code, errOut)
		var rows []nodedrain.StatusView
		require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
		return rows
	}
	for name, args := range map[string][]string{
		"single dash":             {"-nats-url", url, "-nats-user=" + busauth.OperatorUser, "-nats-password-file", operatorPW, "-timeout", "20s", "status", "-o", "json"},
		"--o":                     {"--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW, "status", "--o", "json"},
		"-o=json":                 {"--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW, "status", "-o=json"},
		"--output":                {"--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW, "status", "--output", "json"},
		"flags after the command": {"status", "-ojson", "--nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Len(t, rows(t, args...), 3)
		})
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("EDGEDRAIN_NATS_URL", "nats://127.0.0.1:1") // the flag wins
		t.Setenv("EDGEDRAIN_NATS_USER", busauth.OperatorUser)
		t.Setenv("EDGEDRAIN_NATS_PASSWORD_FILE", operatorPW)
		t.Setenv("EDGEDRAIN_OUTPUT", "yaml") // not a bus flag: no variable
		assert.Len(t, rows(t, "--nats-url", url, "status", "-o", "json"), 3)
	})
	t.Run("bad environment value", func(t *testing.T) {
		t.Setenv("EDGEDRAIN_TIMEOUT", "soon")
		_, errOut, code := ctlAs(t, "status")
		assert.Equal(t, 2, code)
		assert.Contains(t, errOut, "EDGEDRAIN_TIMEOUT")
	})
}

func TestHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage: edgedrainctl [flags] status", "[EDGEDRAIN_NATS_URL]", "\nKubernetes API flags", "--kubeconfig string", "-n, --namespace string"}},
		{[]string{"-help"}, []string{"Usage: edgedrainctl [flags] status"}},
		{[]string{"help", "status"}, []string{"Usage: edgedrainctl status [-o table|json]", "-o, --output string"}},
		{[]string{"status", "-h"}, []string{"Usage: edgedrainctl status [-o table|json]", "Global flags (see edgedrainctl --help):"}},
		{[]string{"withdraw", "--help"}, []string{"Usage: edgedrainctl withdraw NODE"}},
		{[]string{"keys", "init", "-h"}, []string{"Usage: edgedrainctl keys init [-n NAMESPACE]", "--secret string", "--namespace"}},
		{[]string{"keys", "help"}, []string{"only the ConfigMap:"}},
	} {
		out, errOut, code := ctlAs(t, tt.args...)
		assert.Equal(t, 0, code, "%q", tt.args)
		assert.Empty(t, out, "%q: help goes to stderr", tt.args)
		for _, w := range tt.want {
			assert.Contains(t, errOut, w, "%q", tt.args)
		}
	}
	// As a kubectl plugin the help names the plugin.
	saved := usageName
	t.Cleanup(func() { usageName = saved })
	usageName = "kubectl edgedrain"
	_, errOut, code := ctlAs(t, "check", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, errOut, "Usage: kubectl edgedrain check NODE")
}

func TestBadArguments(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "now"}, 1, `status: unexpected arguments ["now"]`},
		{[]string{"status", "--bogus"}, 1, "status: unknown flag: --bogus"},
		{[]string{"--bogus", "status"}, 2, "unknown flag: --bogus"},
		{[]string{"withdraw"}, 1, "withdraw: want exactly one NODE"},
		{[]string{"check"}, 2, "edgedrainctl check: want exactly one NODE, got 0"},
		{[]string{"keep-cordoned", "a", "b"}, 2, "edgedrainctl keep-cordoned: want exactly one NODE, got 2"},
		{[]string{"keys"}, 2, "Usage: edgedrainctl keys generate --out-dir DIR"},
		{[]string{"keys", "generate", "x"}, 2, `edgedrainctl keys: keys generate takes no arguments, got ["x"]`},
		{[]string{"keys", "init", "--secret", ""}, 2, "--secret and --configmap must not be empty"},
	} {
		_, errOut, code := ctlAs(t, tt.args...)
		assert.Equal(t, tt.code, code, "%q: %s", tt.args, errOut)
		assert.Contains(t, errOut, tt.want, "%q", tt.args)
	}
}

// Shell completion comes from cobra: the scripts, and the answers they (and kubectl, through
// kubectl_complete-edgedrain) ask for.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_edgedrainctl", "zsh": "#compdef edgedrainctl", "fish": "complete -c edgedrainctl"} {
		out, errOut, code := ctlAs(t, "completion", shell)
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, want, shell)
	}
	url := bus(t)
	complete := func(words ...string) string {
		t.Helper()
		out, _, code := ctlAs(t, completionArgs(words)...)
		require.Equal(t, 0, code)
		return out
	}
	assert.Regexp(t, `(?m)^keep-cordoned\t.*\n:4\n$`, complete("kee"))
	assert.Contains(t, complete("status", "-o", ""), "table\njson\n:4\n")
	assert.Contains(t, complete("status", "--"), "--watch\t")
	assert.Contains(t, complete("check", "x", "--volume-policy", ""), "wait\nevict\nallow\n")
	nodes := complete("-nats-url", url, "--nats-user", busauth.OperatorUser, "--nats-password-file", operatorPW, "withdraw", "edge-")
	assert.Equal(t, "edge-1.shop\nedge-2.shop\nedge-3.shop\n:4\n", nodes)
	t.Setenv("EDGEDRAIN_NATS_URL", url)
	t.Setenv("EDGEDRAIN_NATS_USER", busauth.OperatorUser)
	t.Setenv("EDGEDRAIN_NATS_PASSWORD_FILE", operatorPW)
	assert.Equal(t, "edge-2.shop\n:4\n", complete("check", "edge-2"), "the bus from the environment")
	assert.Equal(t, ":4\n", complete("check", "edge-2.shop", ""), "one NODE")
	assert.True(t, strings.HasSuffix(complete(""), ":4\n"))
}

// A kubeconfig that names localhost:8080 (kubectl proxy, a tunnel) is used; only none at all
// (and not in a pod) is "no configuration", which client-go would turn into that address.
func TestKubeconfigNamingLocalhost8080IsUsed(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://localhost:8080"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600))
	k := kubeFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
	*k.KubeConfig = path
	rc, err := restConfig(k, "test")
	require.NoError(t, err)
	assert.Equal(t, "http://localhost:8080", rc.Host)

	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", "")
	k = kubeFlags(pflag.NewFlagSet("t", pflag.ContinueOnError))
	_, err = restConfig(k, "test")
	assert.ErrorContains(t, err, "no configuration has been provided")
}

// cobra's own completion flags take the single-dash form too.
func TestCompletionFlagsTakeTheSingleDashForm(t *testing.T) {
	out, errOut, code := ctlAs(t, "completion", "zsh", "-no-descriptions")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "__completeNoDesc")
}
