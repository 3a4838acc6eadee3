package deploy_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// The agent reboots through logind on the host's D-Bus and so runs with no privileges but root's
// uid: not privileged, not in the host's PID namespace, no capabilities, a read-only root; the
// bus socket it is told to use is on its mount of the host's /run, its boot ID is the host's (read
// only), and its local socket has a writable directory; it reads the trusted public keys and holds no Secret, so never the
// coordinator's signing key. So in the kustomize base, its external-NATS overlay and the Helm
// chart's defaults; the nsenter-reboot component alone brings the old privileges back.
func TestAgentRunsWithoutPrivileges(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	for name, rendered := range map[string][]byte{
		"base":          kubectl(t, c, nil, "kustomize", "base"),
		"external-nats": kubectl(t, c, nil, "kustomize", "overlays/external-nats"),
		"helm defaults": helmTemplate(t),
	} {
		t.Run(name, func(t *testing.T) {
			var ds appsv1.DaemonSet
			decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &ds)
			pod := ds.Spec.Template.Spec
			assert.False(t, pod.HostPID || pod.HostNetwork || pod.HostIPC, "no host namespaces")
			require.Len(t, pod.Containers, 1)
			ctr := pod.Containers[0]
			sc := ctr.SecurityContext
			require.NotNil(t, sc)
			assert.True(t, sc.Privileged == nil || !*sc.Privileged, "not privileged")
			require.NotNil(t, sc.AllowPrivilegeEscalation)
			assert.False(t, *sc.AllowPrivilegeEscalation)
			require.NotNil(t, sc.ReadOnlyRootFilesystem)
			assert.True(t, *sc.ReadOnlyRootFilesystem)
			require.NotNil(t, sc.Capabilities)
			assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			assert.Empty(t, sc.Capabilities.Add)
			require.NotNil(t, sc.RunAsUser)
			assert.Equal(t, int64(0), *sc.RunAsUser, "logind lets root reboot without a prompt")
			require.NotNil(t, sc.SeccompProfile)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
			require.NotNil(t, sc.AppArmorProfile, "dbus-daemon enforcing AppArmor refuses the runtime's default profile")
			assert.Equal(t, corev1.AppArmorProfileTypeUnconfined, sc.AppArmorProfile.Type)

			env := envOf(ctr)
			assert.Equal(t, agent.LogindReboot, env["EDGEDRAIN_REBOOT_COMMAND"])
			assert.Equal(t, agent.LogindPowerOff, env["EDGEDRAIN_SHUTDOWN_COMMAND"])
			socket, ok := strings.CutPrefix(env["DBUS_SYSTEM_BUS_ADDRESS"], "unix:path=")
			require.True(t, ok, "DBUS_SYSTEM_BUS_ADDRESS %q", env["DBUS_SYSTEM_BUS_ADDRESS"])
			hostPaths := map[string]string{}
			for _, v := range pod.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = v.HostPath.Path
				}
			}
			var onHostRun, socketDir, bootID bool
			for _, m := range ctr.VolumeMounts {
				if hostPaths[m.Name] == "/proc/sys/kernel/random" && env["EDGEDRAIN_BOOT_ID_FILE"] == m.MountPath+"/boot_id" {
					bootID = true
					assert.True(t, m.ReadOnly, "the host's /proc/sys/kernel/random is mounted read-only")
				}
				if hostPaths[m.Name] == "/run" && strings.HasPrefix(socket, m.MountPath+"/") {
					onHostRun = true
					assert.True(t, m.ReadOnly, "the host's /run is mounted read-only")
					assert.Equal(t, "/run/dbus/system_bus_socket", "/run"+strings.TrimPrefix(socket, m.MountPath),
						"the host's system bus socket")
				}
				if m.MountPath == "/run/edgedrain" && !m.ReadOnly {
					socketDir = true
				}
			}
			assert.True(t, onHostRun, "the D-Bus socket %s is not on a mount of the host's /run", socket)
			assert.True(t, socketDir, "no writable /run/edgedrain for the agent's socket (%s)", agent.DefaultSocket)
			assert.True(t, bootID, "EDGEDRAIN_BOOT_ID_FILE %q is not the host's boot ID (a read-only mount of its /proc/sys/kernel/random): "+
				"in a sandboxed runtime the container's own changes with every pod restart", env["EDGEDRAIN_BOOT_ID_FILE"])
			assertAgentTrustsWithoutSigning(t, pod)
		})
	}
	t.Run("nsenter-reboot", func(t *testing.T) {
		var ds appsv1.DaemonSet
		decodeKind(t, withComponent(t, c, "base", "nsenter-reboot"), "DaemonSet", "edgedrain-agent", &ds)
		pod := ds.Spec.Template.Spec
		assert.True(t, pod.HostPID)
		ctr := pod.Containers[0]
		require.NotNil(t, ctr.SecurityContext.Privileged)
		assert.True(t, *ctr.SecurityContext.Privileged)
		env := envOf(ctr)
		assert.True(t, strings.HasPrefix(env["EDGEDRAIN_REBOOT_COMMAND"], "nsenter --target 1 "), env["EDGEDRAIN_REBOOT_COMMAND"])
		assert.True(t, strings.HasPrefix(env["EDGEDRAIN_SHUTDOWN_COMMAND"], "nsenter --target 1 "), env["EDGEDRAIN_SHUTDOWN_COMMAND"])
		assert.NotContains(t, env, "DBUS_SYSTEM_BUS_ADDRESS")
		assertAgentTrustsWithoutSigning(t, pod)
	})
}
