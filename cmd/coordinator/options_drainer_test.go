package main

import (
	"io"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// parseDrainer parses args into a default volumes.Config through registerDrainerFlags alone.
func parseDrainer(t *testing.T, args ...string) (volumes.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := volumes.DefaultConfig()
	registerDrainerFlags(fs, &cfg)
	cli.BindEnv(fs)
	if err := cli.Parse(fs, args); err != nil {
		return cfg, err
	}
	return cfg, cfg.ValidateSettings()
}

func TestDrainerFlagDefaultsAreStrict(t *testing.T) {
	cfg, err := parseDrainer(t)
	require.NoError(t, err)
	assert.Equal(t, volumes.DefaultDrainerPolicy(), cfg.Drainers)
	assert.Empty(t, cfg.Drainers.Namespaces)
	assert.Equal(t, "edgedrain.io/drainers=allowed", cfg.Drainers.NamespaceSelector)
	assert.Equal(t, "default", cfg.Drainers.ServiceAccount)
	assert.False(t, cfg.DeleteDrainedOrphans)
}

func TestDrainerFlagsSet(t *testing.T) {
	cfg, err := parseDrainer(t, "--drainer-namespaces", "shop, media", "--drainer-namespaces", "edge",
		"--drainer-namespace-selector", "", "--drainer-service-account", "drainer",
		"--drainer-allow-service-account-token", "--drainer-allow-privileged", "--drainer-allow-host-path",
		"--drainer-allow-host-namespaces", "--delete-drained-orphans")
	require.NoError(t, err)
	assert.Equal(t, volumes.DrainerPolicy{Namespaces: []string{"shop", "media", "edge"}, ServiceAccount: "drainer",
		AllowServiceAccountToken: true, AllowPrivileged: true, AllowHostPath: true, AllowHostNamespaces: true}, cfg.Drainers)
	assert.True(t, cfg.DeleteDrainedOrphans)
}

func TestDrainerNamespacesFromEnvironment(t *testing.T) {
	t.Setenv("EDGEDRAIN_DRAINER_NAMESPACES", "*")
	cfg, err := parseDrainer(t)
	require.NoError(t, err)
	assert.Equal(t, []string{volumes.AllNamespaces}, cfg.Drainers.Namespaces)
}

func TestBadDrainerFlagsSayWhatIsWrong(t *testing.T) {
	for flagName, want := range map[string]string{
		"--drainer-namespaces=Bad_Name":       `drainer namespace "Bad_Name"`,
		"--drainer-namespace-selector=a in (": "drainer namespace selector",
		"--drainer-service-account=":          `drainer ServiceAccount ""`,
	} {
		t.Run(flagName, func(t *testing.T) {
			_, err := parseDrainer(t, flagName)
			require.ErrorIs(t, err, volumes.ErrInvalidConfig)
			assert.Contains(t, err.Error(), want)
		})
	}
}
