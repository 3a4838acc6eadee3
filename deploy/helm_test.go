package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The Helm chart (charts/edgedrain) is a second way to install what deploy/ describes. These tests
// lint and render it with the pinned helm (hack/helm.sh), pass every rendering through the API
// server's dry run, and require its objects to equal kustomize's for the base, the external-NATS
// overlay and each component, so that the two cannot drift apart.

// releaseName is the release the tests render; object names do not depend on it.
const releaseName = "edgedrain"

// shellImage stands for an image with /bin/sh and nsenter (e.g. built from the Dockerfile).
const shellImage = "registry.example/edgedrain-debian"

// chartCase is a set of chart values and, where there is one, the kustomize rendering it must equal.
type chartCase struct {
	name string
	set  []string                                                   // helm --set flags
	kust func(t *testing.T, c *testenv.Cluster) []byte              // kustomize's equivalent; nil: none
	more func(t *testing.T, rendered []byte, docs []map[string]any) // further checks of this case
}

const externalURL = "tls://nats.nats.svc:4222" // the URL deploy/overlays/external-nats names

var externalNATS = []string{"nats.external.enabled=true", "nats.external.url=" + externalURL}

func kustomize(dir string) func(*testing.T, *testenv.Cluster) []byte {
	return func(t *testing.T, c *testenv.Cluster) []byte { return kubectl(t, c, nil, "kustomize", dir) }
}

func kustomizeWith(dir, component string) func(*testing.T, *testenv.Cluster) []byte {
	return func(t *testing.T, c *testenv.Cluster) []byte { return withComponent(t, c, dir, component) }
}

// chartCases are the value sets every test renders.
func chartCases() []chartCase {
	return []chartCase{
		{name: "defaults", kust: kustomize("base"), more: checkKeysHooks},
		{name: "external-nats", set: externalNATS, kust: kustomize("overlays/external-nats")},
		{name: "orphan-deletion", set: []string{"orphanDeletion.enabled=true"}, kust: kustomizeWith("base", orphanDeletion)},
		{name: "external-nats+orphan-deletion", set: append([]string{"orphanDeletion.enabled=true"}, externalNATS...),
			kust: kustomizeWith("overlays/external-nats", orphanDeletion)},
		{name: "operator-access", set: []string{"operatorAccess.enabled=true"}, kust: kustomizeWith("base", "operator-access")},
		{name: "decommission", set: []string{"decommission.enabled=true"}, kust: kustomizeWith("base", "decommission")},
		{name: "longhorn-hold", set: []string{"longhornHold.enabled=true"}, kust: kustomizeWith("base", "longhorn-hold")},
		{name: "rebootMethod=command", set: []string{"agent.rebootMethod=command", "agent.commandImage.repository=ghcr.io/edgedrain/edgedrain"},
			kust: kustomizeDebianAgent},
		{name: "rebootMethod=command+image", set: []string{"agent.rebootMethod=command", "agent.commandImage.repository=" + shellImage},
			more: checkCommandMethod},
		{name: "settings", set: []string{
			"createNamespace=true", "signing.createKeys=false", // a pre-install hook runs before the chart's Namespace exists
			"image.digest=sha256:" + strings.Repeat("ab", 32),
			"image.pullPolicy=Always",
			"nats.embedded.storage.storageClassName=local-path",
			"coordinator.metricsPort=9190",
			"coordinator.extraArgs={--max-concurrent-drains=2,--log-level=debug}",
			"coordinator.extraEnv[0].name=GOMEMLIMIT", "coordinator.extraEnv[0].value=200MiB",
			"coordinator.nodeSelector.node-role\\.kubernetes\\.io/control-plane=",
			"agent.sentinels.update=/host/run/update-ready", "agent.commands.update=logind:reboot",
			"agent.extraArgs={--update-reboots,--command-timeout=30m}",
			"agent.extraEnv[0].name=GOMEMLIMIT", "agent.extraEnv[0].value=48MiB",
			"agent.nodeSelector.edgedrain\\.io/agent=enabled",
			"agent.priorityClassName=",
			"agent.metricsPort=9191",
			"networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
		}, more: checkSettings},
		{name: "no-networkpolicy", set: []string{"networkPolicy.enabled=false"}},
		{name: "own-keys", set: ownKeys, more: checkOwnKeys},
		{name: "store-not-kept", set: []string{"nats.embedded.storage.keepOnUninstall=false"}, kust: kustomize("base")},
		{name: "catch-shutdown", set: []string{"agent.catchShutdown=delay"}, kust: kustomizeWith("base", "catch-shutdown")},
		{name: "catch-shutdown=block", set: []string{"agent.catchShutdown=block", "agent.inhibitDelayMax=20m"}, more: checkCatchShutdown},
		{name: "non-root", set: []string{"agent.runAsUser=65532"}, kust: kustomizeWith("base", "non-root")},
		{name: "non-root+catch-shutdown", set: []string{"agent.runAsUser=65532", "agent.catchShutdown=delay"}, more: checkNonRoot},
	}
}

// checkNonRoot: agent.runAsUser other than 0 runs the agent as that user, mounts only the host's
// /run/dbus and /run/edgedrain/sentinels of its /run (the reboot sentinel moved there), expects
// the state and override directories made on the host, and leaves logind's delay to the host's
// drop-in (deploy/host).
func checkNonRoot(t *testing.T, rendered []byte, _ []map[string]any) {
	var ds appsv1.DaemonSet
	decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &ds)
	ctr := ds.Spec.Template.Spec.Containers[0]
	sc := ctr.SecurityContext
	require.NotNil(t, sc.RunAsUser)
	assert.Equal(t, int64(65532), *sc.RunAsUser)
	assert.Equal(t, int64(65532), *sc.RunAsGroup)
	assert.True(t, *sc.RunAsNonRoot)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	env := envOf(ctr)
	assert.Equal(t, "/host/run/edgedrain/sentinels/reboot-required", env["EDGEDRAIN_REBOOT_SENTINEL"])
	assert.Equal(t, "unix:path=/host/run/dbus/system_bus_socket", env["DBUS_SYSTEM_BUS_ADDRESS"])
	assert.Equal(t, "delay", env["EDGEDRAIN_CATCH_SHUTDOWN"])
	assert.Equal(t, "0", env["EDGEDRAIN_INHIBIT_DELAY_MAX"], "the host's drop-in sets logind's delay")
	assert.NotContains(t, env, "EDGEDRAIN_LOGIND_CONF_DIR")
	hostPaths := map[string]corev1.HostPathType{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = *v.HostPath.Type
		}
	}
	assert.Equal(t, map[string]corev1.HostPathType{
		"/var/lib/edgedrain/agent": corev1.HostPathDirectory, "/persist/kube-status": corev1.HostPathDirectory,
		"/run/dbus": corev1.HostPathDirectory, "/run/edgedrain/sentinels": corev1.HostPathDirectory,
		"/proc/sys/kernel/random": corev1.HostPathDirectory,
	}, hostPaths, "no more of the host than that: not its /run, not its logind drop-ins")
	for _, m := range ctr.VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/host/") {
			assert.True(t, m.ReadOnly, "%s read-only", m.MountPath)
		}
	}
}

// checkCatchShutdown: agent.catchShutdown gives the agent its mode, the delay, the host's system
// bus and the host's logind drop-in directory (read-write, for its drop-in) — and nothing more.
func checkCatchShutdown(t *testing.T, rendered []byte, _ []map[string]any) {
	var ds appsv1.DaemonSet
	decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &ds)
	ctr := ds.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "block", env["EDGEDRAIN_CATCH_SHUTDOWN"])
	assert.Equal(t, "20m", env["EDGEDRAIN_INHIBIT_DELAY_MAX"])
	assert.Equal(t, "/host/etc/systemd/logind.conf.d", env["EDGEDRAIN_LOGIND_CONF_DIR"])
	assert.Equal(t, "unix:path=/host/run/dbus/system_bus_socket", env["DBUS_SYSTEM_BUS_ADDRESS"])
	var mounted bool
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == "/host/etc/systemd/logind.conf.d" {
			mounted = !m.ReadOnly
		}
	}
	assert.True(t, mounted, "the drop-in directory is mounted read-write")
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "logind-conf" {
			require.NotNil(t, v.HostPath)
			assert.Equal(t, "/etc/systemd/logind.conf.d", v.HostPath.Path)
		}
	}
	assert.False(t, ds.Spec.Template.Spec.HostPID, "no more privileges than logind's bus")
	assert.Equal(t, []corev1.Capability{"ALL"}, ctr.SecurityContext.Capabilities.Drop)
}

var helmBuild struct {
	sync.Once
	path string
	err  error
}

// helmBinary returns the pinned helm, built by hack/helm.sh on first use (cached afterwards
// outside the checkout). Like the cluster, it is not built under -short.
func helmBinary(t *testing.T) string {
	t.Helper()
	testenv.RequireCluster(t, cluster)
	helmBuild.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			helmBuild.err = err
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "hack", "helm.sh"))
		cmd.Stderr = os.Stderr // progress of a first build
		out, err := cmd.Output()
		if err != nil {
			helmBuild.err = fmt.Errorf("build helm (hack/helm.sh): %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		helmBuild.path = lines[len(lines)-1]
	})
	require.NoError(t, helmBuild.err)
	return helmBuild.path
}

// runHelm runs the pinned helm with a configuration of its own (no user's plugins, repositories
// or registry logins) and returns its standard output and error output.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	bin := helmBinary(t)
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// setFlags turns values into helm's --set flags.
func setFlags(set []string) []string {
	var out []string
	for _, s := range set {
		out = append(out, "--set", s)
	}
	return out
}

// helmTemplate renders the chart into the test namespace with the values set.
func helmTemplate(t *testing.T, set ...string) []byte {
	t.Helper()
	args := append([]string{"template", releaseName, "charts/edgedrain", "--namespace", namespace}, setFlags(set)...)
	out, stderr, err := runHelm(t, args...)
	require.NoError(t, err, "helm %v: %s", args, stderr)
	return []byte(out)
}

// The chart passes helm lint --strict with every value set the tests use.
func TestHelmLint(t *testing.T) {
	helmBinary(t)
	for _, tc := range chartCases() {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", "charts/edgedrain", "--namespace", namespace}, setFlags(tc.set)...)
			out, stderr, err := runHelm(t, args...)
			require.NoError(t, err, "helm lint: %s%s", out, stderr)
			assert.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
			assert.NotContains(t, out, "[WARNING]")
			assert.NotContains(t, out, "[ERROR]")
		})
	}
}

// Every rendering of the chart passes the API server's dry run and has what
// TestManifestsPassServerSideDryRun requires of kustomize's: both workloads, the coordinator's
// role, the NetworkPolicy, the bus identity, and each optional feature exactly when enabled.
func TestHelmTemplatePassesServerSideDryRun(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ensureNamespace(t, c)
	for _, tc := range chartCases() {
		t.Run(tc.name, func(t *testing.T) {
			rendered := helmTemplate(t, tc.set...)
			// As Helm 4 applies: server-side, which also refuses what client-side apply lets
			// through, such as an environment variable given twice.
			out := string(kubectl(t, c, rendered, "apply", "--server-side", "--field-manager=helm", "--dry-run=server", "-f", "-"))
			text := string(rendered)
			enabled := func(s string) bool { return slices.Contains(tc.set, s) }
			assert.Contains(t, out, "deployment.apps/edgedrain-coordinator")
			assert.Contains(t, out, "daemonset.apps/edgedrain-agent")
			assert.Contains(t, out, "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator")
			assert.Equal(t, !enabled("networkPolicy.enabled=false"),
				strings.Contains(out, "networkpolicy.networking.k8s.io/edgedrain-coordinator"))
			orphans := enabled("orphanDeletion.enabled=true")
			assert.Equal(t, orphans, strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator-orphan-deletion"))
			assert.Equal(t, orphans, strings.Contains(text, "EDGEDRAIN_DELETE_DRAINED_ORPHANS"))
			decommission := enabled("decommission.enabled=true")
			assert.Equal(t, decommission, strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator-decommission"))
			assert.Equal(t, decommission, strings.Contains(text, "EDGEDRAIN_ALLOW_DECOMMISSION"))
			hold := enabled("longhornHold.enabled=true")
			assert.Equal(t, hold, strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator-longhorn-hold"))
			assert.Equal(t, hold, strings.Contains(text, "EDGEDRAIN_LONGHORN_HOLD_REPLICAS"))
			// Bus identity (DESIGN §10): agents carry a pod-bound token of edgedrain's audience
			// and no credentials; the coordinator may review tokens.
			assert.Contains(t, text, "audience: edgedrain")
			assert.Contains(t, text, "EDGEDRAIN_NATS_TOKEN_FILE")
			assert.Contains(t, text, "tokenreviews")
			assert.NotContains(t, text, "EDGEDRAIN_NATS_CREDS")
			assert.Equal(t, enabled("operatorAccess.enabled=true"), strings.Contains(text, "EDGEDRAIN_OPERATOR_PASSWORD_FILE"))
			external := enabled("nats.external.enabled=true")
			assert.Equal(t, external, strings.Contains(text, "EDGEDRAIN_AUTH_CALLOUT_ISSUER_SEED_FILE"))
			assert.Equal(t, !external, strings.Contains(out, "persistentvolumeclaim/edgedrain-nats"))
			assert.Equal(t, !external, strings.Contains(out, "service/edgedrain-nats "))
			keys := !enabled("signing.createKeys=false")
			assert.Equal(t, keys, strings.Contains(out, "job.batch/edgedrain-keys"))
			assert.Equal(t, keys, strings.Contains(out, "role.rbac.authorization.k8s.io/edgedrain-keys"))
			assert.Contains(t, text, "EDGEDRAIN_SIGNING_KEY")
			assert.Contains(t, text, "EDGEDRAIN_TRUSTED_KEYS")
			assert.Equal(t, !external && !enabled("nats.embedded.storage.keepOnUninstall=false"),
				strings.Contains(text, "helm.sh/resource-policy: keep"), "helm uninstall keeps the bus's store unless told otherwise")
			if tc.more != nil {
				tc.more(t, rendered, documents(t, rendered))
			}
		})
	}
}

// checkCommandMethod: rebootMethod=command restores the nsenter path: the host's PID namespace,
// a privileged container, systemctl through nsenter, and the image with a shell.
func checkCommandMethod(t *testing.T, rendered []byte, _ []map[string]any) {
	var ds appsv1.DaemonSet
	decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &ds)
	pod := ds.Spec.Template.Spec
	assert.True(t, pod.HostPID)
	ctr := pod.Containers[0]
	assert.Equal(t, shellImage+":v0.1.0-debian", ctr.Image, "the appVersion's -debian tag on the shell image")
	var coord appsv1.Deployment
	decodeKind(t, rendered, "Deployment", "edgedrain-coordinator", &coord)
	assert.Equal(t, "ghcr.io/edgedrain/edgedrain:v0.1.0", coord.Spec.Template.Spec.Containers[0].Image,
		"the coordinator keeps edgedrain's own image")
	require.NotNil(t, ctr.SecurityContext)
	require.NotNil(t, ctr.SecurityContext.Privileged)
	assert.True(t, *ctr.SecurityContext.Privileged)
	env := envOf(ctr)
	assert.Equal(t, "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl reboot", env["EDGEDRAIN_REBOOT_COMMAND"])
	assert.Equal(t, "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl poweroff", env["EDGEDRAIN_SHUTDOWN_COMMAND"])
	assert.NotContains(t, env, "DBUS_SYSTEM_BUS_ADDRESS")
}

// checkSettings: each value of the "settings" case lands where it should.
func checkSettings(t *testing.T, rendered []byte, docs []map[string]any) {
	var ns corev1.Namespace
	decodeKind(t, rendered, "Namespace", namespace, &ns)
	var coord appsv1.Deployment
	var agent appsv1.DaemonSet
	var np networkingv1.NetworkPolicy
	var pvc corev1.PersistentVolumeClaim
	var metricsSvc corev1.Service
	decodeKind(t, rendered, "Deployment", "edgedrain-coordinator", &coord)
	decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &agent)
	decodeKind(t, rendered, "NetworkPolicy", "edgedrain-coordinator", &np)
	decodeKind(t, rendered, "PersistentVolumeClaim", "edgedrain-nats", &pvc)
	decodeKind(t, rendered, "Service", "edgedrain-coordinator-metrics", &metricsSvc)

	digest := "ghcr.io/edgedrain/edgedrain@sha256:" + strings.Repeat("ab", 32)
	cc, ac := coord.Spec.Template.Spec.Containers[0], agent.Spec.Template.Spec.Containers[0]
	for _, ctr := range []corev1.Container{cc, ac} {
		assert.Equal(t, digest, ctr.Image, "a digest alone pins the image without a tag")
		assert.Equal(t, corev1.PullAlways, ctr.ImagePullPolicy)
	}
	require.NotNil(t, pvc.Spec.StorageClassName)
	assert.Equal(t, "local-path", *pvc.Spec.StorageClassName)

	assert.Equal(t, []string{"--max-concurrent-drains=2", "--log-level=debug"}, cc.Args)
	cenv := envOf(cc)
	assert.Equal(t, "200MiB", cenv["GOMEMLIMIT"])
	assert.Equal(t, ":9190", cenv["EDGEDRAIN_LISTEN"], "the coordinator listens on the port it declares")
	assert.Equal(t, map[string]string{"node-role.kubernetes.io/control-plane": ""}, coord.Spec.Template.Spec.NodeSelector)
	assert.Equal(t, int32(9190), containerPort(t, cc, "metrics"))
	assert.Equal(t, int32(9190), metricsSvc.Spec.Ports[0].Port)

	aenv := envOf(ac)
	assert.Equal(t, "/host/run/update-ready", aenv["EDGEDRAIN_UPDATE_SENTINEL"])
	assert.Equal(t, "/host/run/reboot-required", aenv["EDGEDRAIN_REBOOT_SENTINEL"], "the default sentinel stays")
	assert.Equal(t, "logind:reboot", aenv["EDGEDRAIN_UPDATE_COMMAND"])
	assert.NotContains(t, aenv, "EDGEDRAIN_DECOMMISSION_COMMAND", "no decommission command unless given")
	assert.Equal(t, []string{"--update-reboots", "--command-timeout=30m"}, ac.Args)
	assert.Equal(t, "48MiB", aenv["GOMEMLIMIT"])
	assert.Equal(t, ":9191", aenv["EDGEDRAIN_LISTEN"])
	assert.Equal(t, int32(9191), containerPort(t, ac, "metrics"))
	assert.Equal(t, map[string]string{"edgedrain.io/agent": "enabled"}, agent.Spec.Template.Spec.NodeSelector)
	assert.Empty(t, agent.Spec.Template.Spec.PriorityClassName)

	require.Len(t, np.Spec.Ingress, 2)
	metrics := np.Spec.Ingress[1]
	require.Len(t, metrics.Ports, 1)
	assert.Equal(t, int32(9190), metrics.Ports[0].Port.IntVal, "the policy opens the metrics port the coordinator serves")
	require.Len(t, metrics.From, 1)
	require.NotNil(t, metrics.From[0].NamespaceSelector)
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "monitoring"}, metrics.From[0].NamespaceSelector.MatchLabels)
	for _, doc := range docs {
		labels := nested(doc, "metadata", "labels")
		assert.Equal(t, "edgedrain", labels["app.kubernetes.io/part-of"], "%s has the part-of label", objectKey(doc))
		assert.Equal(t, releaseName, labels["app.kubernetes.io/instance"], "%s has the release label", objectKey(doc))
	}
}

// envOf maps a container's plain environment variables to their values.
func envOf(ctr corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

func containerPort(t *testing.T, ctr corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range ctr.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", ctr.Name, name)
	return 0
}

// In another namespace everything follows the release's: the namespaced objects, the
// ServiceAccount subjects of the bindings, and the agents' URL of the embedded bus.
func TestHelmReleaseNamespace(t *testing.T) {
	const other = "maintenance"
	args := []string{"template", releaseName, "charts/edgedrain", "--namespace", other,
		"--set", "orphanDeletion.enabled=true", "--set", "decommission.enabled=true"}
	out, stderr, err := runHelm(t, args...)
	require.NoError(t, err, "helm %v: %s", args, stderr)
	docs := documents(t, []byte(out))
	require.NotEmpty(t, docs)
	subjectsSeen := 0
	for _, doc := range docs {
		ns, _ := nested(doc, "metadata")["namespace"].(string)
		switch doc["kind"] {
		case "ClusterRole", "ClusterRoleBinding":
			assert.Empty(t, ns, "%s is cluster-scoped", objectKey(doc))
		default:
			assert.Equal(t, other, ns, "%s", objectKey(doc))
		}
		subjects, _ := doc["subjects"].([]any)
		for _, s := range subjects {
			assert.Equal(t, other, s.(map[string]any)["namespace"], "a subject of %s", objectKey(doc))
			subjectsSeen++
		}
	}
	assert.Equal(t, 7, subjectsSeen, "the coordinator's four bindings, the two components' and the keys Job's")
	var ds appsv1.DaemonSet
	decodeKind(t, []byte(out), "DaemonSet", "edgedrain-agent", &ds)
	assert.Equal(t, "nats://edgedrain-nats:4222", envOf(ds.Spec.Template.Spec.Containers[0])["EDGEDRAIN_NATS_URL"],
		"the embedded bus's Service in the agent's own namespace")
}

// An upgrade from external NATS to the embedded bus and back, as Helm 4 applies it (server-side,
// one field manager), changes the coordinator's strategy between RollingUpdate and Recreate. A
// rollingUpdate left to the API server's defaults belongs to no manager and would stay beside
// Recreate, which the API server refuses: the chart gives it, and so owns and removes it.
func TestHelmUpgradeBetweenExternalAndEmbeddedNATS(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	const ns = "edgedrain-upgrade"
	_, err := c.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_ = c.Client.AppsV1().Deployments(ns).Delete(context.Background(), "edgedrain-coordinator", metav1.DeleteOptions{})
	})
	apply := func(dryRun bool, set ...string) {
		args := append([]string{"template", releaseName, "charts/edgedrain", "--namespace", ns}, setFlags(set)...)
		out, stderr, err := runHelm(t, args...)
		require.NoError(t, err, "helm %v: %s", args, stderr)
		var deploy []byte
		for _, doc := range documents(t, []byte(out)) {
			if doc["kind"] == "Deployment" {
				deploy, err = json.Marshal(doc)
				require.NoError(t, err)
			}
		}
		kubectl(t, c, deploy, "apply", "--server-side", "--field-manager=helm", "--dry-run="+map[bool]string{true: "server", false: "none"}[dryRun], "-f", "-")
	}
	apply(false, externalNATS...)
	apply(false) // to the embedded bus
	apply(true, externalNATS...)
}

// NOTES.txt names the images rendered and logind only when the agents reboot through it, and
// says whether helm uninstall keeps the bus's store.
func TestHelmNotes(t *testing.T) {
	helmBinary(t)
	for _, tc := range []struct {
		set       []string
		want, not []string
	}{
		{nil, []string{"the agents ghcr.io/edgedrain/edgedrain:v0.1.0.", "through systemd-logind", "helm uninstall keeps the PVC"}, nil},
		{[]string{"agent.rebootMethod=command", "agent.commandImage.repository=" + shellImage},
			[]string{"the agents " + shellImage + ":v0.1.0-debian.", "systemctl reboot\", privileged"}, []string{"logind"}},
		{[]string{"agent.commands.reboot=/sbin/reboot", "agent.commandImage.repository=" + shellImage},
			[]string{`reboot with the shell command "/sbin/reboot".`}, []string{"logind"}},
		{[]string{"nats.embedded.storage.keepOnUninstall=false"}, []string{"helm uninstall deletes the PVC"}, []string{"keeps"}},
		{nil, []string{"the hook Job edgedrain-keys created them if missing. helm uninstall leaves\nboth"}, nil},
		{ownKeys, []string{"the Secret site-signing-key (signing.pem)", "ConfigMap site-trusted-keys (*.pem): create both"},
			[]string{"edgedrain-keys"}},
	} {
		args := append([]string{"install", releaseName, "charts/edgedrain", "--namespace", namespace, "--dry-run=client"}, setFlags(tc.set)...)
		out, stderr, err := runHelm(t, args...)
		require.NoError(t, err, "helm %v: %s", args, stderr)
		_, notes, ok := strings.Cut(out, "\nNOTES:\n")
		require.True(t, ok, "helm install printed no notes: %s", out)
		for _, w := range tc.want {
			assert.Contains(t, notes, w, "%v", tc.set)
		}
		for _, n := range tc.not {
			assert.NotContains(t, notes, n, "%v", tc.set)
		}
	}
}

// Wrong values fail helm template with a message that names the value: a missing external NATS
// URL (the templates' required), values of the wrong type or outside their set
// (values.schema.json), a shell command without an image that has a shell, and what the agent
// would refuse at start or server-side apply at install: a sentinel without its command, logind
// commands where the agent does not wait for the node to go down, extraEnv names the chart sets.
func TestHelmChartRefusesBadValues(t *testing.T) {
	helmBinary(t)
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"external NATS without a URL", []string{"nats.external.enabled=true"},
			"nats.external.url is required with nats.external.enabled=true"},
		{"unknown catch-shutdown mode", []string{"agent.catchShutdown=maybe"},
			"at '/agent/catchShutdown': value must be one of 'off', 'delay', 'block', false"},
		{"inhibit delay not a duration", []string{"agent.inhibitDelayMax=ten minutes"}, "at '/agent/inhibitDelayMax'"},
		{"unknown reboot method", []string{"agent.rebootMethod=kexec"},
			"at '/agent/rebootMethod': value must be one of 'logind', 'command'"},
		{"bucket replicas not a number", append([]string{"nats.external.bucketReplicas=three"}, externalNATS...),
			"at '/nats/external/bucketReplicas': got string, want integer"},
		{"network policy switch not a boolean", []string{"networkPolicy.enabled=yes"},
			"at '/networkPolicy/enabled': got string, want boolean"},
		{"misspelt value", []string{"nats.extrnal.enabled=true"},
			"at '/nats': additional properties 'extrnal' not allowed"},
		{"URL of another scheme", append(externalNATS, "nats.external.url=http://nats:8222"),
			"at '/nats/external/url'"},
		{"command method without a shell image", []string{"agent.rebootMethod=command"},
			"needs an image with /bin/sh (and nsenter for rebootMethod=command)"},
		{"shell update command without a shell image", []string{"agent.commands.update=/usr/local/bin/update"},
			"set agent.commandImage.repository"},
		{"command image that is the chart's image", []string{"agent.rebootMethod=command",
			"agent.commandImage.repository=ghcr.io/edgedrain/edgedrain", "agent.commandImage.tag=v0.1.0"},
			"agent.commandImage resolves to ghcr.io/edgedrain/edgedrain:v0.1.0, the chart's image, which has no /bin/sh"},
		{"sentinel without its command", []string{"agent.sentinels.update=/host/run/update-ready"},
			"agent.sentinels.update is set (/host/run/update-ready) but no update command is"},
		{"logind update command without --update-reboots", []string{"agent.commands.update=logind:reboot",
			"agent.extraArgs={--update-reboots=false}"}, "add --update-reboots to agent.extraArgs"},
		{"logind decommission command", []string{"agent.commands.decommission=logind:poweroff", "agent.extraArgs={--update-reboots}"},
			"the agent refuses logind commands for a decommission"},
		{"unknown logind command", []string{"agent.commands.shutdown=logind:halt"}, "the logind commands are logind:reboot and logind:poweroff"},
		{"non-root agent with nsenter", []string{"agent.runAsUser=65532", "agent.rebootMethod=command", "agent.commandImage.repository=" + shellImage},
			"agent.runAsUser other than 0 needs agent.rebootMethod=logind"},
		{"non-root agent with a sentinel it cannot see", []string{"agent.runAsUser=65532", "agent.sentinels.reboot=/host/run/my-reboot"},
			"only the host's /run/edgedrain/sentinels is mounted"},
		{"negative uid", []string{"agent.runAsUser=-1"}, "at '/agent/runAsUser'"},
		{"agent extraEnv of the chart's EDGEDRAIN_ name", []string{"agent.extraEnv[0].name=EDGEDRAIN_LOG_FORMAT", "agent.extraEnv[0].value=text"},
			"agent.extraEnv: EDGEDRAIN_LOG_FORMAT: EDGEDRAIN_ variables are the chart's"},
		{"agent extraEnv of a flag's EDGEDRAIN_ name", []string{"agent.extraEnv[0].name=EDGEDRAIN_COMMAND_TIMEOUT", "agent.extraEnv[0].value=30m"},
			"give the flag in agent.extraArgs instead (e.g. --command-timeout=30m"},
		{"agent extraEnv of the bus address", []string{"agent.extraEnv[0].name=DBUS_SYSTEM_BUS_ADDRESS", "agent.extraEnv[0].value=x"},
			"agent.extraEnv: DBUS_SYSTEM_BUS_ADDRESS is set by the chart itself"},
		{"coordinator extraEnv of an EDGEDRAIN_ name", []string{"coordinator.extraEnv[0].name=EDGEDRAIN_LOG_LEVEL", "coordinator.extraEnv[0].value=debug"},
			"give the flag in coordinator.extraArgs instead (e.g. --log-level=debug"},
		{"coordinator extraEnv of the pod's name", []string{"coordinator.extraEnv[0].name=POD_NAME", "coordinator.extraEnv[0].value=x"},
			"coordinator.extraEnv: POD_NAME is set by the chart itself"},
		{"extraEnv name given twice", []string{"agent.extraEnv[0].name=TZ", "agent.extraEnv[0].value=UTC",
			"agent.extraEnv[1].name=TZ", "agent.extraEnv[1].value=CET"}, "agent.extraEnv: TZ is given twice"},
		{"misspelt resources", []string{"agent.resources.limit.memory=1Gi"},
			"at '/agent/resources': additional properties 'limit' not allowed"},
		{"storage size not a quantity", []string{"nats.embedded.storage.size=1GB"}, "at '/nats/embedded/storage/size'"},
		{"createKeys with createNamespace", []string{"createNamespace=true"},
			"install with --create-namespace instead of createNamespace=true, or set signing.createKeys=false"},
		{"signing Secret name not a name", []string{"signing.secretName=Signing_Key"}, "at '/signing/secretName'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", releaseName, "charts/edgedrain", "--namespace", namespace}, setFlags(tc.set)...)
			out, stderr, err := runHelm(t, args...)
			require.Error(t, err, "helm template accepted the values: %s", out)
			assert.Contains(t, stderr, tc.want)
			assert.Empty(t, out, "nothing rendered")
		})
	}
}
