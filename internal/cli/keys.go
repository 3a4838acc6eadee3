package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/safefile"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// maxKeyFile bounds one key file: a PEM key is a few hundred bytes.
const maxKeyFile = 64 << 10

// keyHelp says how to make the key files, for errors that stop a program at start.
const keyHelp = "see docs/status-signing.md: `edgedrainctl keys init` creates the Secret and ConfigMap, " +
	"`edgedrainctl keys generate` or openssl (genpkey -algorithm ed25519; pkey -pubout) the files"

// readKeyFile reads a key file: a regular file (not a FIFO, not a device) of at most
// maxKeyFile bytes.
func readKeyFile(path string) ([]byte, error) { return safefile.ReadFile(path, maxKeyFile) }

// LoadSigningKey reads the coordinator's private key (PEM, PKCS #8 Ed25519).
func LoadSigningKey(path string) (*nodedrain.Signer, error) {
	if path == "" {
		return nil, fmt.Errorf("no signing key: statuses must be signed (--signing-key; %s)", keyHelp)
	}
	data, err := readKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w (%s)", err, keyHelp)
	}
	s, err := nodedrain.ParseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return s, nil
}

// LoadTrustedKeys reads the public keys in path: a file, or a directory whose *.pem and *.pub
// files (not dot files: a ConfigMap mount keeps its data under ..data) are read. At least one
// key is required.
func LoadTrustedKeys(path string) (nodedrain.KeySet, error) {
	var ks nodedrain.KeySet
	if path == "" {
		return ks, fmt.Errorf("no trusted keys: statuses are verified against the coordinator's public keys (--trusted-keys; %s)", keyHelp)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ks, fmt.Errorf("trusted keys: %w (%s)", err, keyHelp)
	}
	files := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return ks, fmt.Errorf("trusted keys: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			n := e.Name()
			if !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".pem") || strings.HasSuffix(n, ".pub")) {
				files = append(files, filepath.Join(path, n))
			}
		}
		slices.Sort(files)
	}
	for _, f := range files {
		data, err := readKeyFile(f)
		if err != nil {
			return ks, fmt.Errorf("trusted keys: %w", err)
		}
		if err := nodedrain.ParseTrustedKeys(&ks, data); err != nil {
			return ks, fmt.Errorf("trusted keys %s: %w", f, err)
		}
	}
	if ks.Len() == 0 {
		return ks, fmt.Errorf("trusted keys: no PEM \"PUBLIC KEY\" in %s (%s)", path, keyHelp)
	}
	return ks, nil
}

// TrustedKeys holds the keys of a --trusted-keys path and reads them again, at most every
// interval, when asked for them: a ConfigMap mount changes under a running agent when a key is
// rotated. A read that fails keeps the keys read before, and says so once.
type TrustedKeys struct {
	path     string
	log      logrus.FieldLogger
	interval time.Duration

	mu     sync.Mutex
	keys   nodedrain.KeySet
	readAt time.Time
	failed bool
}

// TrustedKeysInterval is how often TrustedKeys reads its path again at most, by default: the
// files are tiny and read only when a status is judged (and by the agent every 10 s), so a
// rotation's new key is taken at once.
const TrustedKeysInterval = time.Second

// NewTrustedKeys reads path once; it fails when no key can be read. It reads the path again at
// most every interval (0: TrustedKeysInterval).
func NewTrustedKeys(path string, interval time.Duration, log logrus.FieldLogger) (*TrustedKeys, error) {
	if interval <= 0 {
		interval = TrustedKeysInterval
	}
	ks, err := LoadTrustedKeys(path)
	if err != nil {
		return nil, err
	}
	log.WithField("keys", strings.Join(ks.IDs(), ",")).Infof("statuses are taken only when signed by a trusted key (from %s)", path)
	return &TrustedKeys{path: path, log: log, interval: interval, keys: ks, readAt: time.Now()}, nil
}

// Keys returns the trusted keys, read again first when the interval has passed.
func (t *TrustedKeys) Keys() nodedrain.KeySet {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.readAt) < t.interval {
		return t.keys
	}
	t.readAt = time.Now()
	ks, err := LoadTrustedKeys(t.path)
	switch {
	case err != nil && !t.failed:
		t.failed = true
		t.log.WithError(err).Warn("cannot read the trusted keys again: keeping the ones read before")
	case err == nil:
		if t.failed {
			t.log.Info("the trusted keys can be read again")
		}
		t.failed = false
		if !slices.Equal(ks.IDs(), t.keys.IDs()) {
			t.log.WithFields(logrus.Fields{"before": strings.Join(t.keys.IDs(), ","), "now": strings.Join(ks.IDs(), ",")}).
				Info("the trusted keys changed")
		}
		t.keys = ks
	}
	return t.keys
}
