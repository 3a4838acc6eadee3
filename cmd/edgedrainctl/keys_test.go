package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestKeysGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	out, errOut, code := ctlAs(t, "keys", "generate", "--out-dir", dir)
	require.Equal(t, 0, code, errOut)
	private, err := os.ReadFile(filepath.Join(dir, "signing.pem"))
	require.NoError(t, err)
	public, err := os.ReadFile(filepath.Join(dir, "signing.pub"))
	require.NoError(t, err)
	signer, err := nodedrain.ParseSigningKey(private)
	require.NoError(t, err)
	var ks nodedrain.KeySet
	require.NoError(t, nodedrain.ParseTrustedKeys(&ks, public))
	assert.Equal(t, []string{signer.KeyID()}, ks.IDs(), "signing.pub is signing.pem's public key")
	fi, err := os.Stat(filepath.Join(dir, "signing.pem"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.Contains(t, out, signer.KeyID())
	assert.Contains(t, out, "--from-file="+strings.ReplaceAll(signer.KeyID(), ":", "-")+".pem=")
	assert.NotContains(t, out, "PRIVATE KEY")

	t.Run("refuses to overwrite", func(t *testing.T) {
		_, errOut, code := ctlAs(t, "keys", "generate", "--out-dir", dir)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "signing.pem exists: not overwriting a key")
		again, err := os.ReadFile(filepath.Join(dir, "signing.pem"))
		require.NoError(t, err)
		assert.Equal(t, private, again, "the key is unchanged")
	})
	t.Run("refuses when only the public key is there", func(t *testing.T) {
		other := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(other, "signing.pub"), public, 0o644))
		_, errOut, code := ctlAs(t, "keys", "generate", "--out-dir", other)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "signing.pub exists")
		_, err := os.Stat(filepath.Join(other, "signing.pem"))
		assert.True(t, os.IsNotExist(err), "no private key beside a public key it does not match")
	})
	t.Run("usage", func(t *testing.T) {
		_, errOut, code := ctlAs(t, "keys", "generate")
		assert.Equal(t, 2, code)
		assert.Contains(t, errOut, "--out-dir is required")
		_, errOut, code = ctlAs(t, "keys", "rotate")
		assert.Equal(t, 2, code)
		assert.Contains(t, errOut, `unknown keys command "rotate"`)
		_, errOut, code = ctlAs(t, "keys", "--help")
		assert.Equal(t, 0, code)
		assert.Contains(t, errOut, "only the ConfigMap:")
		_, errOut, code = ctlAs(t, "keys", "init", "--help")
		assert.Equal(t, 0, code)
		assert.Contains(t, errOut, "-configmap")
	})
}

// keysInitCmd runs keys init in ns of the test cluster with kubeconfig.
func keysInitCmd(t *testing.T, kubeconfig, ns string) (string, string, int) {
	t.Helper()
	return ctlAs(t, "--timeout", "60s", "keys", "init", "--kubeconfig", kubeconfig, "-n", ns)
}

// signingKeys reads the namespace's Secret and ConfigMap as keys init made them.
func signingKeys(t *testing.T, c *testenv.Cluster, ns string) (*corev1.Secret, *corev1.ConfigMap) {
	t.Helper()
	ctx := context.Background()
	sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, defaultSigningSecret, metav1.GetOptions{})
	require.NoError(t, err)
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, defaultTrustedKeys, metav1.GetOptions{})
	require.NoError(t, err)
	return sec, cm
}

// newKeyPair returns a private key (PEM) and its ConfigMap entry.
func newKeyPair(t *testing.T) ([]byte, map[string]string) {
	t.Helper()
	private, public, err := nodedrain.GenerateSigningKey()
	require.NoError(t, err)
	signer, err := nodedrain.ParseSigningKey(private)
	require.NoError(t, err)
	return private, map[string]string{trustedKeyName(signer.KeyID()): string(public)}
}

func TestKeysInit(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ctx := context.Background()

	t.Run("fresh, then again", func(t *testing.T) {
		ns := c.Namespace(t)
		out, errOut, code := keysInitCmd(t, c.Kubeconfig, ns)
		require.Equal(t, 0, code, errOut)
		sec, cm := signingKeys(t, c, ns)
		signer, err := nodedrain.ParseSigningKey(sec.Data["signing.pem"])
		require.NoError(t, err)
		require.Len(t, cm.Data, 1)
		var ks nodedrain.KeySet
		require.NoError(t, nodedrain.ParseTrustedKeys(&ks, []byte(cm.Data[trustedKeyName(signer.KeyID())])))
		assert.True(t, ks.Has(signer.KeyID()), "the ConfigMap trusts the Secret's key under its ID's name")
		assert.Equal(t, "edgedrainctl", sec.Labels["app.kubernetes.io/managed-by"])
		assert.Contains(t, out, "created the Secret "+ns+"/edgedrain-signing-key with a new private key ("+signer.KeyID()+")")
		assert.Contains(t, out, "created the ConfigMap "+ns+"/edgedrain-trusted-keys trusting "+signer.KeyID())
		assert.NotContains(t, out+errOut, "PRIVATE KEY", "the private key is never printed")

		out, errOut, code = keysInitCmd(t, c.Kubeconfig, ns)
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "agree: the key "+signer.KeyID()+" is trusted")
		assert.Contains(t, out, "nothing to do")
		sec2, cm2 := signingKeys(t, c, ns)
		assert.Equal(t, sec.ResourceVersion, sec2.ResourceVersion, "the second run changes nothing")
		assert.Equal(t, cm.ResourceVersion, cm2.ResourceVersion, "the second run changes nothing")
	})

	t.Run("only the Secret", func(t *testing.T) {
		ns := c.Namespace(t)
		private, want := newKeyPair(t)
		_, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: defaultSigningSecret},
			Data: map[string][]byte{"signing.pem": private}}, metav1.CreateOptions{})
		require.NoError(t, err)
		out, errOut, code := keysInitCmd(t, c.Kubeconfig, ns)
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "created the ConfigMap")
		assert.NotContains(t, out, "created the Secret")
		sec, cm := signingKeys(t, c, ns)
		assert.Equal(t, private, sec.Data["signing.pem"], "the Secret is left as it was")
		assert.Equal(t, want, cm.Data, "the ConfigMap trusts the Secret's key")
	})

	t.Run("only the ConfigMap", func(t *testing.T) {
		ns := c.Namespace(t)
		_, trusted := newKeyPair(t)
		_, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: defaultTrustedKeys},
			Data: trusted}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, errOut, code := keysInitCmd(t, c.Kubeconfig, ns)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "the ConfigMap "+ns+"/edgedrain-trusted-keys exists but the Secret "+ns+"/edgedrain-signing-key does not")
		assert.Contains(t, errOut, "kubectl -n "+ns+" create secret generic edgedrain-signing-key --from-file=signing.pem=")
		secrets, err := c.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		assert.Empty(t, secrets.Items, "no Secret made up")
	})

	t.Run("a pair that does not match", func(t *testing.T) {
		ns := c.Namespace(t)
		private, _ := newKeyPair(t)
		_, other := newKeyPair(t)
		_, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: defaultSigningSecret},
			Data: map[string][]byte{"signing.pem": private}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: defaultTrustedKeys},
			Data: other}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, errOut, code := keysInitCmd(t, c.Kubeconfig, ns)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "which is not among the trusted keys of the ConfigMap "+ns+"/edgedrain-trusted-keys")
		assert.Contains(t, errOut, "the coordinator would refuse to start")
		assert.NotContains(t, errOut, "PRIVATE KEY")
	})

	t.Run("a Secret without signing.pem", func(t *testing.T) {
		ns := c.Namespace(t)
		_, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: defaultSigningSecret},
			Data: map[string][]byte{"key": []byte("x")}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, errOut, code := keysInitCmd(t, c.Kubeconfig, ns)
		assert.Equal(t, 1, code)
		assert.Contains(t, errOut, "has no data key signing.pem (it has: key)")
	})

	t.Run("several at once", func(t *testing.T) {
		ns := c.Namespace(t)
		const runs = 6
		var wg sync.WaitGroup
		codes, errs := make([]int, runs), make([]string, runs)
		for i := range runs {
			wg.Go(func() { _, errs[i], codes[i] = keysInitCmd(t, c.Kubeconfig, ns) })
		}
		wg.Wait()
		for i := range runs {
			assert.Equal(t, 0, codes[i], "run %d: %s", i, errs[i])
		}
		sec, cm := signingKeys(t, c, ns)
		signer, err := nodedrain.ParseSigningKey(sec.Data["signing.pem"])
		require.NoError(t, err)
		assert.Equal(t, []string{trustedKeyName(signer.KeyID())}, keysOf(cm.Data), "one key, the Secret's")
	})

	t.Run("with only the Job's RBAC", func(t *testing.T) {
		ns := c.Namespace(t)
		applyKeysRole(t, c, ns, "keys-job")
		kubeconfig := userKubeconfig(t, c, "keys-job")
		out, errOut, code := keysInitCmd(t, kubeconfig, ns)
		require.Equal(t, 0, code, "deploy/base/keys.yaml's Role is not enough: %s", errOut)
		assert.Contains(t, out, "created the ConfigMap")
		out, errOut, code = keysInitCmd(t, kubeconfig, ns)
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "nothing to do")
	})
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// applyKeysRole creates in ns the Role of the Job edgedrain-keys, as deploy/base/keys.yaml
// declares it, bound to user.
func applyKeysRole(t *testing.T, c *testenv.Cluster, ns, user string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	f, err := os.Open(filepath.Join(root, "deploy", "base", "keys.yaml"))
	require.NoError(t, err)
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	ctx := context.Background()
	for {
		var role rbacv1.Role
		if err := dec.Decode(&role); err != nil {
			break
		}
		if role.Kind != "Role" {
			continue
		}
		role.Namespace = ns
		_, err := c.Client.RbacV1().Roles(ns).Create(ctx, &role, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return
	}
	t.Fatal("no Role in deploy/base/keys.yaml")
}

// userKubeconfig writes a kubeconfig that authenticates as user (no groups: RBAC grants it only
// what is bound to it).
func userKubeconfig(t *testing.T, c *testenv.Cluster, user string) string {
	t.Helper()
	rc, err := c.UserConfig(user)
	require.NoError(t, err)
	return writeKubeconfig(t, rc)
}

func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}
