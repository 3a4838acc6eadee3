package deploy_test

import (
	"context"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The status-signing key (docs/status-signing.md): the coordinator mounts the private key's
// Secret and the trusted keys' ConfigMap, the agents the ConfigMap only, and the Job
// edgedrain-keys creates both with a Role that reaches no other Secret.

const (
	signingSecret = "edgedrain-signing-key"
	trustedKeys   = "edgedrain-trusted-keys"
)

// ownKeys: keys made by the operator, under names of their own.
var ownKeys = []string{"signing.createKeys=false", "signing.secretName=site-signing-key", "signing.configMapName=site-trusted-keys"}

// volumeMountedAt returns the volume of ctr mounted at exactly dir.
func volumeMountedAt(t *testing.T, pod corev1.PodSpec, ctr corev1.Container, dir string) (corev1.Volume, corev1.VolumeMount) {
	t.Helper()
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == dir {
			for _, v := range pod.Volumes {
				if v.Name == m.Name {
					return v, m
				}
			}
		}
	}
	t.Fatalf("container %s mounts nothing at %s", ctr.Name, dir)
	return corev1.Volume{}, corev1.VolumeMount{}
}

// checkSigningMounts: the coordinator reads its private key from the Secret, read-only and
// readable by its uid only through fsGroup, and both workloads the trusted keys from the
// ConfigMap's directory, which the kubelet updates (no subPath, which it would not).
func checkSigningMounts(t *testing.T, rendered []byte, secret, configMap string) {
	var coord appsv1.Deployment
	var agent appsv1.DaemonSet
	decodeKind(t, rendered, "Deployment", "edgedrain-coordinator", &coord)
	decodeKind(t, rendered, "DaemonSet", "edgedrain-agent", &agent)
	pod, ctr := coord.Spec.Template.Spec, coord.Spec.Template.Spec.Containers[0]
	env := envOf(ctr)
	keyFile := env["EDGEDRAIN_SIGNING_KEY"]
	require.NotEmpty(t, keyFile)
	v, m := volumeMountedAt(t, pod, ctr, path.Dir(keyFile))
	require.NotNil(t, v.Secret, "the signing key is not from a Secret")
	assert.Equal(t, secret, v.Secret.SecretName)
	assert.Equal(t, "signing.pem", path.Base(keyFile), "keys init stores the key under signing.pem")
	require.NotNil(t, v.Secret.DefaultMode)
	assert.Equal(t, int32(0o400), *v.Secret.DefaultMode)
	assert.True(t, m.ReadOnly)
	assert.Empty(t, m.SubPath)
	sc := pod.SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.RunAsUser)
	assert.NotZero(t, *sc.RunAsUser)
	require.NotNil(t, sc.FSGroup, "a 0400 Secret file is root's: only fsGroup lets the non-root coordinator read it")
	assert.Equal(t, *sc.RunAsUser, *sc.FSGroup, "the file's group is the coordinator's")

	for name, p := range map[string]struct {
		pod corev1.PodSpec
		ctr corev1.Container
	}{"coordinator": {pod, ctr}, "agent": {agent.Spec.Template.Spec, agent.Spec.Template.Spec.Containers[0]}} {
		dir := envOf(p.ctr)["EDGEDRAIN_TRUSTED_KEYS"]
		require.NotEmpty(t, dir, name)
		v, m := volumeMountedAt(t, p.pod, p.ctr, dir)
		require.NotNil(t, v.ConfigMap, "%s: the trusted keys are not from a ConfigMap", name)
		assert.Equal(t, configMap, v.ConfigMap.Name, name)
		assert.True(t, m.ReadOnly, name)
		assert.Empty(t, m.SubPath, "%s: a subPath mount is never updated, and a rotation would need a restart", name)
	}
}

// assertAgentTrustsWithoutSigning: the agent has the trusted keys and no Secret at all, so
// neither the signing key nor any other: an agent that is taken over cannot sign statuses.
func assertAgentTrustsWithoutSigning(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	for _, v := range pod.Volumes {
		assert.Nil(t, v.Secret, "the agent mounts the Secret %v", v.Secret)
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				assert.Nil(t, src.Secret, "the agent's projected volume %s holds a Secret", v.Name)
			}
		}
		if v.ConfigMap != nil {
			assert.NotEqual(t, signingSecret, v.ConfigMap.Name)
		}
	}
	for _, ctr := range append(pod.InitContainers, pod.Containers...) {
		for _, e := range ctr.Env {
			assert.False(t, e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil, "%s: %s from a Secret", ctr.Name, e.Name)
		}
		for _, e := range ctr.EnvFrom {
			assert.Nil(t, e.SecretRef, "%s: environment from a Secret", ctr.Name)
		}
		assert.NotContains(t, envOf(ctr), "EDGEDRAIN_SIGNING_KEY")
	}
	assert.Contains(t, envOf(pod.Containers[0]), "EDGEDRAIN_TRUSTED_KEYS")
}

func TestSigningKeyMounts(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	for name, r := range map[string]struct {
		rendered          []byte
		secret, configMap string
	}{
		"base":               {kubectl(t, c, nil, "kustomize", "base"), signingSecret, trustedKeys},
		"external-nats":      {kubectl(t, c, nil, "kustomize", "overlays/external-nats"), signingSecret, trustedKeys},
		"helm defaults":      {helmTemplate(t), signingSecret, trustedKeys},
		"helm external-nats": {helmTemplate(t, externalNATS...), signingSecret, trustedKeys},
		"helm own keys":      {helmTemplate(t, ownKeys...), "site-signing-key", "site-trusted-keys"},
	} {
		t.Run(name, func(t *testing.T) { checkSigningMounts(t, r.rendered, r.secret, r.configMap) })
	}
}

// keysRules are exactly the Job's permissions (cmd/edgedrainctl keys_init.go).
func keysRules(secret, configMap string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{configMap}, Verbs: []string{"get", "update", "patch"}},
	}
}

// The Job runs keys init in its own namespace, hardened as the coordinator is (and with the
// seccomp profile besides), as its own ServiceAccount with exactly its Role; the NetworkPolicy
// does not select it, so it reaches the API server.
func TestKeysJob(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	for name, rendered := range map[string][]byte{
		"base":          kubectl(t, c, nil, "kustomize", "base"),
		"helm defaults": helmTemplate(t),
	} {
		t.Run(name, func(t *testing.T) {
			var job batchv1.Job
			var coord appsv1.Deployment
			var role rbacv1.Role
			var binding rbacv1.RoleBinding
			var np networkingv1.NetworkPolicy
			decodeKind(t, rendered, "Job", "edgedrain-keys", &job)
			decodeKind(t, rendered, "Deployment", "edgedrain-coordinator", &coord)
			decodeKind(t, rendered, "Role", "edgedrain-keys", &role)
			decodeKind(t, rendered, "RoleBinding", "edgedrain-keys", &binding)
			decodeKind(t, rendered, "NetworkPolicy", "edgedrain-coordinator", &np)
			decodeKind(t, rendered, "ServiceAccount", "edgedrain-keys", &corev1.ServiceAccount{})

			assert.Equal(t, keysRules(signingSecret, trustedKeys), role.Rules)
			assert.Equal(t, "edgedrain-keys", binding.RoleRef.Name)
			require.Len(t, binding.Subjects, 1)
			assert.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: "edgedrain-keys", Namespace: namespace}, binding.Subjects[0])

			require.NotNil(t, job.Spec.TTLSecondsAfterFinished, "a finished Job stays, and the next apply with another image is refused")
			pod := job.Spec.Template.Spec
			assert.Equal(t, "edgedrain-keys", pod.ServiceAccountName)
			assert.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
			require.Len(t, pod.Containers, 1)
			ctr := pod.Containers[0]
			assert.Equal(t, coord.Spec.Template.Spec.Containers[0].Image, ctr.Image, "the project's image")
			assert.Equal(t, []string{"/edgedrainctl"}, ctr.Command)
			args := strings.Join(ctr.Args, " ")
			assert.Contains(t, args, "keys init -n $(POD_NAMESPACE) --secret "+signingSecret+" --configmap "+trustedKeys)
			require.Len(t, ctr.Env, 1)
			assert.Equal(t, "POD_NAMESPACE", ctr.Env[0].Name)
			assert.Equal(t, "metadata.namespace", ctr.Env[0].ValueFrom.FieldRef.FieldPath)
			assert.Empty(t, pod.Volumes, "nothing mounted but the ServiceAccount's token")

			psc, sc := pod.SecurityContext, ctr.SecurityContext
			require.NotNil(t, psc)
			require.NotNil(t, sc)
			require.NotNil(t, psc.RunAsNonRoot)
			assert.True(t, *psc.RunAsNonRoot)
			assert.Equal(t, coord.Spec.Template.Spec.SecurityContext.RunAsUser, psc.RunAsUser)
			require.NotNil(t, psc.SeccompProfile)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
			assert.Equal(t, coord.Spec.Template.Spec.Containers[0].SecurityContext, sc, "the coordinator's container securityContext")
			require.NotNil(t, sc.ReadOnlyRootFilesystem)
			assert.True(t, *sc.ReadOnlyRootFilesystem)
			assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			assert.False(t, ctr.Resources.Requests.Memory().IsZero())
			assert.False(t, ctr.Resources.Limits.Memory().IsZero())

			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			require.NoError(t, err)
			assert.False(t, sel.Matches(labels.Set(job.Spec.Template.Labels)), "the NetworkPolicy selects the Job")
			assert.NotContains(t, np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress, "egress limited: the Job must reach the API server")
		})
	}
}

// The Job's Role, applied for real, lets its ServiceAccount read no Secret but the signing key,
// change no Secret, and read or change no ConfigMap but the trusted keys.
// (TestKeysInit/with_only_the_Job's_RBAC in cmd/edgedrainctl runs keys init under it.)
func TestKeysRoleAllowsNoMore(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ensureNamespace(t, c)
	applyRBAC(t, c, kubectl(t, c, nil, "kustomize", "base"))
	rc, err := c.UserConfig("system:serviceaccount:"+namespace+":edgedrain-keys",
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	ctx := context.Background()
	secrets, configMaps := client.CoreV1().Secrets(namespace), client.CoreV1().ConfigMaps(namespace)
	forbidden := func(what string, err error) {
		t.Helper()
		assert.True(t, apierrors.IsForbidden(err), "the keys Job may %s: %v", what, err)
	}
	allowed := func(what string, err error) {
		t.Helper()
		assert.True(t, err == nil || apierrors.IsNotFound(err), "the keys Job may not %s: %v", what, err)
	}
	allowed("get the signing Secret", ignore(secrets.Get(ctx, signingSecret, metav1.GetOptions{})))
	allowed("get the trusted keys", ignore(configMaps.Get(ctx, trustedKeys, metav1.GetOptions{})))
	forbidden("list Secrets", ignore(secrets.List(ctx, metav1.ListOptions{})))
	forbidden("watch Secrets", ignore(secrets.Watch(ctx, metav1.ListOptions{})))
	forbidden("get another Secret", ignore(secrets.Get(ctx, "edgedrain-nats-auth", metav1.GetOptions{})))
	forbidden("update the signing Secret", ignore(secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: signingSecret}}, metav1.UpdateOptions{})))
	forbidden("delete the signing Secret", secrets.Delete(ctx, signingSecret, metav1.DeleteOptions{}))
	forbidden("get another ConfigMap", ignore(configMaps.Get(ctx, "edgedrain-policy", metav1.GetOptions{})))
	forbidden("list ConfigMaps", ignore(configMaps.List(ctx, metav1.ListOptions{})))
	forbidden("update another ConfigMap", ignore(configMaps.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "edgedrain-policy"}}, metav1.UpdateOptions{})))
	forbidden("delete the trusted keys", configMaps.Delete(ctx, trustedKeys, metav1.DeleteOptions{}))
	_, err = client.CoreV1().Secrets("default").Get(ctx, signingSecret, metav1.GetOptions{})
	forbidden("read Secrets of another namespace", err)
}

func ignore[T any](_ T, err error) error { return err }

// In the chart the Job and its RBAC are hooks before install and upgrade, the RBAC first, all
// deleted before the next run and after success; Helm prints a failed Job's logs.
func checkKeysHooks(t *testing.T, _ []byte, docs []map[string]any) {
	weights := map[string]string{}
	for _, doc := range docs {
		meta := nested(doc, "metadata")
		if meta["name"] != "edgedrain-keys" {
			assert.NotContains(t, nested(doc, "metadata", "annotations"), "helm.sh/hook", "%s is a hook", objectKey(doc))
			continue
		}
		ann := nested(doc, "metadata", "annotations")
		require.NotNil(t, ann, "%s has no hook annotations", objectKey(doc))
		assert.Equal(t, "pre-install,pre-upgrade", ann["helm.sh/hook"], objectKey(doc))
		assert.Equal(t, "before-hook-creation,hook-succeeded", ann["helm.sh/hook-delete-policy"], objectKey(doc))
		weights[doc["kind"].(string)], _ = ann["helm.sh/hook-weight"].(string)
		if doc["kind"] == "Job" {
			assert.Equal(t, "hook-failed", ann["helm.sh/hook-output-log-policy"])
		}
	}
	assert.Equal(t, []string{"Job", "Role", "RoleBinding", "ServiceAccount"}, slices.Sorted(maps.Keys(weights)))
	weight := func(kind string) int {
		w, err := strconv.Atoi(weights[kind])
		require.NoError(t, err, "the %s's hook weight", kind)
		return w
	}
	for _, kind := range []string{"Role", "RoleBinding", "ServiceAccount"} {
		assert.Less(t, weight(kind), weight("Job"), "the %s must exist before the Job starts", kind)
	}
}

// With signing.createKeys=false there is no Job and no RBAC for it; the workloads mount the
// operator's Secret and ConfigMap by the names given.
func checkOwnKeys(t *testing.T, rendered []byte, docs []map[string]any) {
	for _, doc := range docs {
		assert.NotEqual(t, "edgedrain-keys", nested(doc, "metadata")["name"], "%s rendered without createKeys", objectKey(doc))
	}
	checkSigningMounts(t, rendered, "site-signing-key", "site-trusted-keys")
}
