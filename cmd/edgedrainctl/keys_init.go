package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Defaults of keys init: the names the manifests mount.
const (
	defaultKeysNamespace = "edgedrain-system"
	defaultSigningSecret = "edgedrain-signing-key"
	defaultTrustedKeys   = "edgedrain-trusted-keys"
)

// createdByLabels mark what keys init creates: part of edgedrain, and managed by neither Helm
// nor kustomize (helm uninstall and kubectl delete -k leave it; docs/status-signing.md).
var createdByLabels = map[string]string{
	"app.kubernetes.io/part-of":    "edgedrain",
	"app.kubernetes.io/managed-by": "edgedrainctl",
}

const initIntro = `Usage: edgedrainctl keys init [-n NAMESPACE] [--secret NAME] [--configmap NAME]
                              [--kubeconfig FILE] [--context NAME]

Creates what is missing of the Secret (the coordinator's private key, data key signing.pem) and
the ConfigMap (the trusted public keys, one per data key ending in .pem) and checks that they
agree; it changes nothing that exists. See keys --help for each case. Both are in the namespace
-n (default ` + defaultKeysNamespace + `, whatever the kubeconfig's context says).`

// keysInitOptions are keys init's flags.
type keysInitOptions struct {
	namespace, secret, configMap string
}

func newKeysInitCmd(g *global) *cobra.Command {
	var o keysInitOptions
	cmd := &cobra.Command{
		Use:               "init",
		Short:             "Create what is missing of the signing key's Secret and the trusted keys' ConfigMap",
		Long:              initIntro,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.bounded(cmd.Context())
			defer cancel()
			o.namespace = *g.kube.Namespace
			if o.namespace == "" {
				o.namespace = defaultKeysNamespace
			}
			return keysInit(ctx, g.kube, o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.secret, "secret", defaultSigningSecret, "the Secret with the coordinator's private key (data key signing.pem)")
	cmd.Flags().StringVar(&o.configMap, "configmap", defaultTrustedKeys, "the ConfigMap with the trusted public keys")
	return cmd
}

// keysInit runs edgedrainctl keys init.
func keysInit(ctx context.Context, kube *genericclioptions.ConfigFlags, o keysInitOptions, stdout io.Writer) error {
	if o.secret == "" || o.configMap == "" {
		return cli.Exit(2, errors.New("--secret and --configmap must not be empty"))
	}
	rc, err := restConfig(kube, "edgedrainctl-keys")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	return (&keyInit{client: client, keysInitOptions: o, out: stdout}).run(ctx)
}

// keyInit brings one namespace's Secret and ConfigMap into agreement.
type keyInit struct {
	keysInitOptions
	client kubernetes.Interface
	out    io.Writer
}

// initRounds bounds how often init reads again after losing a race: each round creates at most
// one object, and a lost race means the other run created it, so three rounds settle any start.
const initRounds = 5

// run creates one missing object per round and reads both again after each, so that every
// decision is taken on what the API server holds now, never on what it held before another
// run's create (AlreadyExists: read again).
func (k *keyInit) run(ctx context.Context) error {
	for range initRounds {
		done, err := k.round(ctx)
		if done || err != nil {
			return err
		}
	}
	return fmt.Errorf("the Secret %s and the ConfigMap %s kept changing while this ran (%d rounds): is another tool creating and deleting them?",
		k.ref(k.secret), k.ref(k.configMap), initRounds)
}

// round reads both objects, then finishes (done), fails, or creates one missing object.
func (k *keyInit) round(ctx context.Context) (done bool, err error) {
	// The ConfigMap is read first: init creates the Secret before the ConfigMap, so a ConfigMap
	// seen here means its Secret existed already, and the Secret read next finds it. Read the
	// other way round, another run's Secret and ConfigMap created between the two reads would
	// look like a hand-made ConfigMap without its Secret.
	cm, err := k.client.CoreV1().ConfigMaps(k.namespace).Get(ctx, k.configMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the ConfigMap %s: %w", k.ref(k.configMap), err)
	}
	sec, err := k.client.CoreV1().Secrets(k.namespace).Get(ctx, k.secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec, err = nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the Secret %s: %w", k.ref(k.secret), err)
	}
	switch {
	case sec != nil && cm != nil:
		return true, k.verify(sec, cm)
	case cm != nil:
		return true, fmt.Errorf("the ConfigMap %s exists but the Secret %s does not: the trusted keys are managed by hand, "+
			"and only whoever made them has the private key. Create the Secret from that key "+
			"(kubectl -n %s create secret generic %s --from-file=%s=PRIVATE-KEY.pem), "+
			"or delete the ConfigMap to have a new pair made (agents then trust only the new key)",
			k.ref(k.configMap), k.ref(k.secret), k.namespace, k.secret, privateKeyFile)
	case sec != nil:
		return k.createConfigMap(ctx, sec)
	default:
		return k.createSecret(ctx)
	}
}

// createSecret makes a new key and stores it; the next round adds its public key.
func (k *keyInit) createSecret(ctx context.Context) (bool, error) {
	private, _, err := nodedrain.GenerateSigningKey()
	if err != nil {
		return false, err
	}
	signer, err := nodedrain.ParseSigningKey(private)
	if err != nil {
		return false, err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: k.secret, Namespace: k.namespace, Labels: createdByLabels},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{privateKeyFile: private},
	}
	_, err = k.client.CoreV1().Secrets(k.namespace).Create(ctx, sec, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		fmt.Fprintf(k.out, "the Secret %s was created meanwhile (another run?): reading it\n", k.ref(k.secret))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create the Secret %s: %w", k.ref(k.secret), err)
	}
	fmt.Fprintf(k.out, "created the Secret %s with a new private key (%s)\n", k.ref(k.secret), signer.KeyID())
	return false, nil
}

// createConfigMap creates the ConfigMap with the public key of the Secret's private key.
func (k *keyInit) createConfigMap(ctx context.Context, sec *corev1.Secret) (bool, error) {
	signer, err := k.signerOf(sec)
	if err != nil {
		return false, err
	}
	pub, err := nodedrain.PublicKeyPEM(signer.Public())
	if err != nil {
		return false, err
	}
	name := trustedKeyName(signer.KeyID())
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: k.configMap, Namespace: k.namespace, Labels: createdByLabels},
		Data:       map[string]string{name: string(pub)},
	}
	_, err = k.client.CoreV1().ConfigMaps(k.namespace).Create(ctx, cm, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		fmt.Fprintf(k.out, "the ConfigMap %s was created meanwhile (another run?): reading it\n", k.ref(k.configMap))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create the ConfigMap %s: %w", k.ref(k.configMap), err)
	}
	fmt.Fprintf(k.out, "created the ConfigMap %s trusting %s (data key %s), the Secret %s's key\n",
		k.ref(k.configMap), signer.KeyID(), name, k.ref(k.secret))
	return true, nil
}

// verify checks that the Secret's key is among the ConfigMap's, as the coordinator does at start.
func (k *keyInit) verify(sec *corev1.Secret, cm *corev1.ConfigMap) error {
	signer, err := k.signerOf(sec)
	if err != nil {
		return err
	}
	trusted, err := k.trustedOf(cm)
	if err != nil {
		return err
	}
	if !trusted.Has(signer.KeyID()) {
		return fmt.Errorf("the Secret %s holds the key %s, which is not among the trusted keys of the ConfigMap %s (%s): "+
			"the coordinator would refuse to start. To keep the Secret's key, add its public key to the ConfigMap "+
			"(as data key %s); to keep the ConfigMap, put the private key of one of its keys in the Secret; "+
			"see docs/status-signing.md", k.ref(k.secret), signer.KeyID(), k.ref(k.configMap),
			orNone(trusted.IDs()), trustedKeyName(signer.KeyID()))
	}
	fmt.Fprintf(k.out, "the Secret %s and the ConfigMap %s exist and agree: the key %s is trusted (trusted keys: %s); nothing to do\n",
		k.ref(k.secret), k.ref(k.configMap), signer.KeyID(), strings.Join(trusted.IDs(), ", "))
	return nil
}

// signerOf reads the Secret's private key. Errors name the Secret, never its contents.
func (k *keyInit) signerOf(sec *corev1.Secret) (*nodedrain.Signer, error) {
	data, ok := sec.Data[privateKeyFile]
	if !ok {
		return nil, fmt.Errorf("the Secret %s has no data key %s (it has: %s): the coordinator reads its private key from there",
			k.ref(k.secret), privateKeyFile, orNone(slices.Sorted(maps.Keys(sec.Data))))
	}
	signer, err := nodedrain.ParseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("the Secret %s, data key %s: %w", k.ref(k.secret), privateKeyFile, err)
	}
	return signer, nil
}

// trustedOf reads the ConfigMap's public keys as the coordinator and agents read its mount: the
// data keys ending in .pem or .pub, each one or more PEM public keys.
func (k *keyInit) trustedOf(cm *corev1.ConfigMap) (nodedrain.KeySet, error) {
	files := map[string][]byte{}
	for name, v := range cm.Data {
		files[name] = []byte(v)
	}
	for name, v := range cm.BinaryData {
		files[name] = v
	}
	var ks nodedrain.KeySet
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".pem") || strings.HasSuffix(name, ".pub")) {
			continue // not read from the mount either
		}
		if err := nodedrain.ParseTrustedKeys(&ks, files[name]); err != nil {
			return ks, fmt.Errorf("the ConfigMap %s, data key %s: %w", k.ref(k.configMap), name, err)
		}
	}
	return ks, nil
}

// ref names an object of the namespace as kubectl's -n NS NAME would.
func (k *keyInit) ref(name string) string { return k.namespace + "/" + name }

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}
