package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newFlags() (*pflag.FlagSet, *string, *time.Duration) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	url := fs.String("nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	timeout := fs.Duration("api-unreachable-timeout", 5*time.Minute, "how long")
	BindEnv(fs)
	return fs, url, timeout
}

func TestEnvName(t *testing.T) {
	assert.Equal(t, "EDGEDRAIN_NATS_URL", EnvName("nats-url"))
	assert.Equal(t, "EDGEDRAIN_MAX_CONCURRENT_DRAINS", EnvName("max-concurrent-drains"))
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		url     string
		timeout time.Duration
		wantErr string
	}{
		{name: "defaults", url: "nats://127.0.0.1:4222", timeout: 5 * time.Minute},
		{name: "env sets", env: map[string]string{"EDGEDRAIN_NATS_URL": "nats://a:1", "EDGEDRAIN_API_UNREACHABLE_TIMEOUT": "1m"},
			url: "nats://a:1", timeout: time.Minute},
		{name: "flag beats env", env: map[string]string{"EDGEDRAIN_NATS_URL": "nats://a:1"}, args: []string{"--nats-url=nats://b:2"},
			url: "nats://b:2", timeout: 5 * time.Minute},
		{name: "flag given as its default still beats env", env: map[string]string{"EDGEDRAIN_NATS_URL": "nats://a:1"},
			args: []string{"--nats-url", "nats://127.0.0.1:4222"}, url: "nats://127.0.0.1:4222", timeout: 5 * time.Minute},
		{name: "single dash, as Go's flag package took it", args: []string{"-nats-url", "nats://c:3", "-api-unreachable-timeout=2m"},
			url: "nats://c:3", timeout: 2 * time.Minute},
		{name: "underscores", args: []string{"--api_unreachable_timeout=3m"}, url: "nats://127.0.0.1:4222", timeout: 3 * time.Minute},
		{name: "bad env value names the variable", env: map[string]string{"EDGEDRAIN_API_UNREACHABLE_TIMEOUT": "soon"},
			wantErr: "EDGEDRAIN_API_UNREACHABLE_TIMEOUT"},
		{name: "bad flag", args: []string{"--api-unreachable-timeout=soon"}, wantErr: "invalid argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs, url, timeout := newFlags()
			fs.SetNormalizeFunc(NormalizeFunc(nil))
			err := Parse(fs, tt.args)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.url, *url)
			assert.Equal(t, tt.timeout, *timeout)
		})
	}
}

// Only flags bound to the environment read it.
func TestUnboundFlagsIgnoreEnvironment(t *testing.T) {
	t.Setenv("EDGEDRAIN_OUTPUT", "json")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "table", "")
	require.NoError(t, Parse(fs, nil))
	assert.Equal(t, "table", *out)
}

// testTree is a small program: a root with persistent flags and a subcommand with its own.
func testTree(got *[]string) *cobra.Command {
	root := &cobra.Command{Use: "prog", Long: "Usage: prog [flags] sub ARG\n\nIntro text."}
	root.PersistentFlags().String("nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	root.PersistentFlags().Duration("timeout", 10*time.Second, "give up after this long")
	BindEnv(root.PersistentFlags())
	kube := pflag.NewFlagSet("kube", pflag.ContinueOnError)
	kube.StringP("namespace", "n", "", "namespace")
	kube.String("kubeconfig", "", "kubeconfig file")
	Group(kube, "Kubernetes flags:")
	root.PersistentFlags().AddFlagSet(kube)
	sub := &cobra.Command{Use: "sub ARG", Long: "Usage: prog sub ARG", RunE: func(cmd *cobra.Command, args []string) error {
		if err := ApplyEnv(cmd.Flags()); err != nil {
			return err
		}
		*got = append([]string{}, args...)
		cmd.Flags().Visit(func(f *pflag.Flag) { *got = append(*got, f.Name+"="+f.Value.String()) })
		return nil
	}}
	sub.Flags().StringP("output", "o", "table", "output: table or json")
	sub.Flags().Bool("watch", false, "draw again")
	root.AddCommand(sub)
	Setup(root, map[string]string{"o": "output", "n": "namespace"})
	return root
}

func TestGoStyleArgs(t *testing.T) {
	root := testTree(new([]string))
	tests := []struct{ in, want []string }{
		{[]string{"-nats-url", "-x", "sub", "-o", "-watch"}, []string{"--nats-url", "-x", "sub", "-o", "-watch"}},
		{[]string{"-timeout=5s", "sub", "a", "-watch", "-output=json"}, []string{"--timeout=5s", "sub", "a", "--watch", "--output=json"}},
		{[]string{"sub", "-n", "-watch", "-ojson", "-o=json", "-kubeconfig", "f"}, []string{"sub", "-n", "-watch", "-ojson", "-o=json", "--kubeconfig", "f"}},
		{[]string{"sub", "-help"}, []string{"sub", "--help"}},
		{[]string{"sub", "-bogus", "--", "-watch"}, []string{"sub", "-bogus", "--", "-watch"}},
		{[]string{"__complete", "-nats-url", "u", "sub", "-wat"}, []string{"__complete", "--nats-url", "u", "sub", "-wat"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, GoStyleArgs(root, tt.in), "%q", tt.in)
	}
}

func TestExecute(t *testing.T) {
	t.Setenv("EDGEDRAIN_TIMEOUT", "1m")
	var got []string
	var out, errOut bytes.Buffer
	_, err := Execute(context.Background(), testTree(&got), []string{"-nats-url", "nats://x:1", "sub", "a", "-watch", "--o", "json", "--n=ns"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	assert.Equal(t, []string{"a", "namespace=ns", "nats-url=nats://x:1", "output=json", "timeout=1m0s", "watch=true"}, got)

	_, err = Execute(context.Background(), testTree(&got), []string{"sub", "--bogus"}, &out, &errOut)
	assert.Equal(t, 2, ExitCode(err, 1), "a flag error is a usage error")
	assert.Contains(t, Message(err), "unknown flag: --bogus")
}

func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	_, err := Execute(context.Background(), testTree(new([]string)), []string{"--help"}, &out, &errOut)
	require.NoError(t, err)
	assert.Empty(t, out.String(), "help goes to stderr, as Go's flag package wrote it")
	help := errOut.String()
	assert.True(t, strings.HasPrefix(help, "Usage: prog [flags] sub ARG\n\nIntro text.\n\nFlags:\n"), help)
	assert.Contains(t, help, "  --nats-url string   [EDGEDRAIN_NATS_URL]\n      NATS server URL (default \"nats://127.0.0.1:4222\")\n")
	assert.Contains(t, help, "\nKubernetes flags:\n  --kubeconfig string\n      kubeconfig file\n  -n, --namespace string\n")
	assert.Contains(t, help, "taken from the environment variable shown in brackets")
	assert.NotContains(t, help, "--help")

	errOut.Reset()
	_, err = Execute(context.Background(), testTree(new([]string)), []string{"sub", "-h"}, &out, &errOut)
	require.NoError(t, err)
	help = errOut.String()
	assert.Contains(t, help, "Usage: prog sub ARG\n\nFlags:\n  -o, --output string\n      output: table or json (default \"table\")\n")
	assert.Contains(t, help, "Global flags (see prog --help):\n  --kubeconfig, --namespace, --nats-url, --timeout\n")
	assert.NotContains(t, help, "environment variable shown")
}
