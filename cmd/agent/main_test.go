package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

var (
	cluster  *testenv.Cluster
	agentBin string // the agent binary, built once for the package's process tests
)

func TestMain(m *testing.M) { testenv.MainWithBinary(m, &cluster, "./cmd/agent", &agentBin) }

// TestNoKubernetesClient keeps the agent free of client-go (DESIGN §4): it must hold no
// Kubernetes credentials and stay small.
func TestNoKubernetesClient(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	cmd := exec.Command("go", "list", "-deps", "./cmd/agent")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/edgedrain/edgedrain/pkg/nodedrain/agent", "go list output looks wrong")
	for _, d := range deps {
		assert.False(t, d == "k8s.io/client-go" || strings.HasPrefix(d, "k8s.io/client-go/"), "the agent links %s", d)
		assert.False(t, strings.HasPrefix(d, "github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"), "the agent links %s", d)
		assert.False(t, strings.HasPrefix(d, "k8s.io/kubectl"), "the agent links %s", d)
	}
}

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{name: "help", args: []string{"--help"}, wantCode: 0, wantErr: []string{"agent request reboot|shutdown|update",
			"COMPLETE for its current request", "[EDGEDRAIN_NODE_NAME]", "--force-status-file"}},
		{name: "help command", args: []string{"help"}, wantCode: 0, wantErr: []string{"Usage: agent [run]"}},
		{name: "request help", args: []string{"request", "--help"}, wantCode: 0, wantErr: []string{"--context"}},
		{name: "status help", args: []string{"status", "-h"}, wantCode: 0, wantErr: []string{"--json"}},
		{name: "node name required", args: []string{"--state-dir", dir}, wantCode: 2,
			wantErr: []string{"--node-name is required", "NODE_NAME"}},
		{name: "invalid node name", args: []string{"--node-name", "Edge_1"}, wantCode: 2, wantErr: []string{`invalid node name "Edge_1"`}},
		{name: "single-dash flags, as Go's flag package took them", args: []string{"-node-name", "Edge_1", "-listen=:0"}, wantCode: 2,
			wantErr: []string{`invalid node name "Edge_1"`}},
		{name: "single-dash help", args: []string{"-help"}, wantCode: 0, wantErr: []string{"Usage: agent [run]"}},
		{name: "run help", args: []string{"run", "-h"}, wantCode: 0, wantErr: []string{"Usage: agent [run]", "[EDGEDRAIN_NODE_NAME]"}},
		{name: "unknown flag", args: []string{"--nodename", "x"}, wantCode: 2, wantErr: []string{"agent: unknown flag: --nodename"}},
		{name: "request flag error", args: []string{"request", "reboot", "--timeout", "soon"}, wantCode: 2,
			wantErr: []string{`agent request: invalid argument "soon" for "--timeout"`}},
		{name: "request environment", env: map[string]string{"EDGEDRAIN_SOCKET": filepath.Join(dir, "env.sock")}, args: []string{"request", "update"},
			wantCode: 1, wantErr: []string{"env.sock"}},
		{name: "every problem at once", args: []string{"--node-name", "edge-1", "--sentinel-interval", "0", "--update-sentinel", "/x",
			"--force-status-poll", "5s", "--listen", "nowhere", "--log-format", "xml", "--drain-retry-backoff", "0", "--bus-check-interval", "-1s"},
			wantCode: 2, wantErr: []string{"sentinel interval (0s) must be positive", "update sentinel /x is set but no update command is",
				"override poll interval 5s", `--listen "nowhere"`, `--log-format "xml"`, "drain retry backoff", "--bus-check-interval -1s: must be positive"}},
		{name: "bad NATS settings", args: []string{"--node-name", "edge-1", "--nats-url", "http://x:1", "--nats-password", "p"},
			wantCode: 2, wantErr: []string{`unsupported scheme "http"`}},
		{name: "bad environment value names the variable", env: map[string]string{"EDGEDRAIN_REBOOT_TIMEOUT": "soon"},
			args: []string{"--node-name", "edge-1"}, wantCode: 2, wantErr: []string{"EDGEDRAIN_REBOOT_TIMEOUT"}},
		{name: "socket path too long", args: []string{"--node-name", "edge-1", "--socket", "/" + strings.Repeat("s", 120)},
			wantCode: 2, wantErr: []string{"longer than the 107 a unix socket allows"}},
		{name: "stray argument", args: []string{"--node-name", "edge-1", "now"}, wantCode: 2, wantErr: []string{`unexpected arguments ["now"]`}},
		{name: "unknown command", args: []string{"reboot"}, wantCode: 2, wantErr: []string{`unknown command "reboot"`}},
		{name: "request without operation", args: []string{"request"}, wantCode: 2, wantErr: []string{"want exactly one operation"}},
		{name: "request unknown operation", args: []string{"request", "poweroff"}, wantCode: 2, wantErr: []string{`unknown operation "poweroff"`}},
		{name: "request two operations", args: []string{"request", "reboot", "update"}, wantCode: 2, wantErr: []string{"want exactly one"}},
		{name: "request decommission parses and goes to the agent", args: []string{"request", "decommission", "--context", "disk failed",
			"--socket", filepath.Join(dir, "none.sock")}, wantCode: 1, wantErr: []string{"agent not reachable"}},
		{name: "help documents decommission", args: []string{"--help"}, wantCode: 0, wantErr: []string{"--decommission-command",
			"systemctl poweroff", "empty: decommission refused", "--decommission-sentinel", "agent request reboot|shutdown|update|decommission"}},
		{name: "decommission sentinel without its command", args: []string{"--node-name", "edge-1", "--decommission-sentinel", "/x"},
			wantCode: 2, wantErr: []string{"decommission sentinel /x is set but no decommission command is"}},
		{name: "request with no agent running", args: []string{"request", "reboot", "--context", "x", "--socket", filepath.Join(dir, "none.sock")},
			wantCode: 1, wantErr: []string{"agent not reachable", "is it running?"}},
		{name: "status with no agent running", args: []string{"status", "--socket", filepath.Join(dir, "none.sock")},
			wantCode: 1, wantErr: []string{"agent not reachable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := realMain(tt.args, &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code, "stderr: %s", stderr.String())
			for _, want := range tt.wantErr {
				assert.Contains(t, stderr.String(), want)
			}
		})
	}
}

func TestNodeNameFromDownwardAPI(t *testing.T) {
	t.Setenv("NODE_NAME", "edge-7.shop")
	var stderr bytes.Buffer
	o := registerRunFlags(newFlagSet(&stderr))
	require.NoError(t, o.validate())
	assert.Equal(t, "edge-7.shop", o.cfg.Node)
}

func TestDecommissionCommandIsOffByDefault(t *testing.T) {
	var stderr bytes.Buffer
	fs := newFlagSet(&stderr)
	o := registerRunFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name", "edge-1"}))
	require.NoError(t, o.validate())
	assert.NotContains(t, o.cfg.Commands, agent.OpDecommission)
	assert.Equal(t, agent.DefaultRebootCommand, o.cfg.Commands[agent.OpReboot])

	fs = newFlagSet(&stderr)
	o = registerRunFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name", "edge-1", "--decommission-command", "systemctl poweroff"}))
	require.NoError(t, o.validate())
	assert.Equal(t, "systemctl poweroff", o.cfg.Commands[agent.OpDecommission])
}

// Flags may follow the positional arguments (`agent request update --context x`), and a value
// that looks like a flag is a value; Go-style single-dash long flags still parse.
func TestFlagsAfterArguments(t *testing.T) {
	var stderr bytes.Buffer
	fs := newFlagSet(&stderr)
	ctx := fs.String("context", "", "")
	js := fs.Bool("json", false, "")
	require.NoError(t, cli.Parse(fs, []string{"--json", "update", "--context", "v1.2.3 --not-a-flag"}))
	assert.Equal(t, []string{"update"}, fs.Args())
	assert.Equal(t, "v1.2.3 --not-a-flag", *ctx)
	assert.True(t, *js)

	fs = newFlagSet(&stderr)
	ctx = fs.String("context", "", "")
	js = fs.Bool("json", false, "")
	require.NoError(t, cli.Parse(fs, []string{"-json=false", "update", "-context", "-x"}))
	assert.Equal(t, []string{"update"}, fs.Args())
	assert.Equal(t, "-x", *ctx)
	assert.False(t, *js)
}

func newFlagSet(w *bytes.Buffer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(w)
	return fs
}

// Where there is no shell (edgedrain's image has none), a shell command is refused at start,
// naming the logind commands; the logind commands need no shell.
func TestShellCommandsNeedAShell(t *testing.T) {
	saved := shell
	t.Cleanup(func() { shell = saved })
	shell = filepath.Join(t.TempDir(), "sh")
	var stderr bytes.Buffer
	fs := newFlagSet(&stderr)
	o := registerRunFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name", "edge-1"}))
	require.NoError(t, o.validate(), "the defaults are logind commands")

	fs = newFlagSet(&stderr)
	o = registerRunFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name", "edge-1", "--shutdown-command", "systemctl poweroff"}))
	err := o.validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--shutdown-command "systemctl poweroff" needs `+shell+", which is missing here")
	assert.Contains(t, err.Error(), "use logind:reboot or logind:poweroff")
}
