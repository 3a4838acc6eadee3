package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The file names keys generate writes, and the data key the Secret holds the private key under:
// the coordinator's --signing-key points at /etc/edgedrain/signing/signing.pem in the manifests.
const (
	privateKeyFile = "signing.pem"
	publicKeyFile  = "signing.pub"
)

const keysIntro = `Usage: edgedrainctl keys generate --out-dir DIR
       edgedrainctl keys init [-n NAMESPACE] [--secret NAME] [--configmap NAME]
                              [--kubeconfig FILE] [--context NAME]

The coordinator signs every status it publishes on the bus with an Ed25519 private key; agents
act on no status that does not verify under a public key they trust (docs/status-signing.md).
In the cluster the private key is the Secret edgedrain-signing-key (data key signing.pem),
mounted by the coordinator only; the trusted public keys are the ConfigMap
edgedrain-trusted-keys (one PEM public key per data key ending in .pem), mounted by the
coordinator and every agent.

generate  write a new key pair into DIR (created if missing): signing.pem, the private key
          (PKCS #8 PEM, mode 0600), and signing.pub, its public key (PKIX PEM), as
          "openssl genpkey -algorithm ed25519" and "openssl pkey -pubout" write them. Refuses to
          overwrite either file. For keys you manage yourself: put them in the cluster with
          kubectl create secret / create configmap (the command prints how).
init      make the namespace's Secret and ConfigMap agree, creating only what is missing, and
          never changing what exists:
            neither exists:      a new key: the Secret, then the ConfigMap with its public key;
            only the Secret:     the ConfigMap with the Secret's public key;
            both exist:          checks that the Secret's key is among the ConfigMap's and
                                 fails if not (the coordinator would refuse to start);
            only the ConfigMap:  fails: someone manages the keys by hand, and only they have
                                 the private key that goes with it.
          Safe to run again and from several places at once (what another run created is read
          and checked). The manifests' Job edgedrain-keys (the Helm chart's pre-install and
          pre-upgrade hook) runs it. Prints what it did, never the private key. The kubeconfig
          is found as kubectl finds it (--kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster);
          the global --timeout (default 10s) bounds the whole run.

Exit status: 0 done (or nothing to do), 1 failed, 2 bad arguments.`

func newKeysCmd(g *global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "The coordinator's status-signing key: generate a key pair, or create the Secret and ConfigMap",
		Long:  keysIntro,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				cmd.HelpFunc()(cmd, nil)
				return cli.Exit(2, nil)
			case args[0] == "help":
				cmd.HelpFunc()(cmd, nil)
				return nil
			}
			return cli.Exit(2, fmt.Errorf("unknown keys command %q (want generate or init; see keys --help)", args[0]))
		},
	}
	cmd.AddCommand(newKeysGenerateCmd(), newKeysInitCmd(g))
	return cmd
}

// noArgs is the Args of a keys command: it takes no positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.Exit(2, fmt.Errorf("keys %s takes no arguments, got %q (see --help)", cmd.Name(), args))
	}
	return nil
}

const generateIntro = `Usage: edgedrainctl keys generate --out-dir DIR

Writes a new Ed25519 key pair into DIR: signing.pem (private, 0600) and signing.pub (public).
Refuses to overwrite either. Then, for example:
  kubectl -n edgedrain-system create secret generic edgedrain-signing-key --from-file=signing.pem=DIR/signing.pem
  kubectl -n edgedrain-system create configmap edgedrain-trusted-keys --from-file=KEYID.pem=DIR/signing.pub`

func newKeysGenerateCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:               "generate",
		Short:             "Write a new Ed25519 key pair into a directory",
		Long:              generateIntro,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              func(cmd *cobra.Command, _ []string) error { return keysGenerate(dir, cmd.OutOrStdout()) },
	}
	cmd.Flags().StringVar(&dir, "out-dir", "", "directory to write signing.pem and signing.pub into (created, 0700, if missing)")
	_ = cmd.MarkFlagDirname("out-dir")
	return cmd
}

// keysGenerate writes a key pair into dir.
func keysGenerate(dir string, stdout io.Writer) error {
	if dir == "" {
		return cli.Exit(2, errors.New("--out-dir is required"))
	}
	private, public, err := nodedrain.GenerateSigningKey()
	if err != nil {
		return err
	}
	signer, err := nodedrain.ParseSigningKey(private)
	if err != nil {
		return err
	}
	privPath, pubPath := filepath.Join(dir, privateKeyFile), filepath.Join(dir, publicKeyFile)
	// Both checked before either is written: a half-replaced pair (a new private key beside the
	// old public one) is worse than none.
	for _, p := range []string{privPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists: not overwriting a key (move it away, or choose another --out-dir)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeNew(privPath, private, 0o600); err != nil {
		return err
	}
	if err := writeNew(pubPath, public, 0o644); err != nil {
		_ = os.Remove(privPath) // ours: written a moment ago with O_EXCL
		return err
	}
	id := signer.KeyID()
	fmt.Fprintf(stdout, "wrote %s (private key, mode 0600; keep it secret) and %s (public key %s)\n", privPath, pubPath, id)
	fmt.Fprintf(stdout, "In the cluster (namespace edgedrain-system), a first install:\n"+
		"  kubectl -n edgedrain-system create secret generic edgedrain-signing-key --from-file=%s=%s\n"+
		"  kubectl -n edgedrain-system create configmap edgedrain-trusted-keys --from-file=%s=%s\n"+
		"To rotate to this key instead, follow docs/status-signing.md (add the public key first).\n",
		privateKeyFile, privPath, trustedKeyName(id), pubPath)
	return nil
}

// writeNew writes data to a file that must not exist yet (O_EXCL: no race with another writer,
// no following a symlink planted there).
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists: not overwriting a key", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// trustedKeyName is the ConfigMap data key of a public key: its ID with "-" for ":" (data keys
// allow no colon) and ".pem", the suffix the coordinator and agents read from the mount. One key
// per data key, named by its ID, so that a rotation adds and later removes one entry.
func trustedKeyName(id string) string {
	return strings.ReplaceAll(id, ":", "-") + ".pem"
}
