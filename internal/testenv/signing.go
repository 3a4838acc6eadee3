package testenv

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The status signing key of every test: a fixed key, so that in-process coordinators, processes
// and statuses a test publishes itself all verify under the same trusted key.
var testSigningKey = ed25519.NewKeyFromSeed(func() []byte { s := sha256.Sum256([]byte("edgedrain test signing key")); return s[:] }())

// Signer signs statuses with the tests' key.
func Signer() *nodedrain.Signer { return nodedrain.NewSigner(testSigningKey) }

// TrustedKeys returns the tests' trusted keys (the tests' signing key only), as Config fields
// want them.
func TrustedKeys() nodedrain.KeySet {
	return nodedrain.NewKeySet(testSigningKey.Public().(ed25519.PublicKey))
}

// testSeq numbers the statuses tests sign themselves.
var testSeq atomic.Int64

// SignStatus signs st as a coordinator would, for a test that plays the coordinator: term 0 (older
// than any real coordinator run's), and a sequence number that grows with each call.
func SignStatus(st nodedrain.NodeDrainStatus) nodedrain.NodeDrainStatus {
	st.Term, st.Seq = 0, int(testSeq.Add(1))
	return Signer().Sign(st)
}

var keyFiles struct {
	once             sync.Once
	signing, trusted string
	err              error
}

// KeyFiles writes the tests' signing key and trusted key once per test binary and returns their
// paths (PEM, as the coordinator's --signing-key and everyone's --trusted-keys read them).
func KeyFiles() (signing, trusted string, err error) {
	keyFiles.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "edgedrain-test-keys-"+strconv.Itoa(os.Getpid()))
		keyFiles.err = writeKeyFiles(dir)
		keyFiles.signing, keyFiles.trusted = filepath.Join(dir, "signing.pem"), filepath.Join(dir, "trusted.pem")
	})
	return keyFiles.signing, keyFiles.trusted, keyFiles.err
}

func writeKeyFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(testSigningKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "signing.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	pub, err := nodedrain.PublicKeyPEM(testSigningKey.Public().(ed25519.PublicKey))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "trusted.pem"), pub, 0o600)
}

// KeyEnv is the environment that points a coordinator or agent process at the tests' key files;
// flags given on a command line still win.
func KeyEnv() []string {
	signing, trusted, err := KeyFiles()
	if err != nil {
		panic("testenv: write the test key files: " + err.Error())
	}
	return []string{"EDGEDRAIN_SIGNING_KEY=" + signing, "EDGEDRAIN_TRUSTED_KEYS=" + trusted}
}
