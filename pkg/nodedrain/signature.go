package nodedrain

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Statuses are signed by the coordinator and verified by every agent (DESIGN §10): bus
// permissions say who may publish to a key, not who wrote what a key holds, since the server
// itself writes copies of stored messages where a client aims a reply. A signature says the
// coordinator wrote this status for this key; Term and Seq order its statuses, so an agent tells
// a replayed old status from the newest one.

// statusSignatureDomain starts every signed byte string, so that a signature over a status can
// never be taken for one over anything else the key might sign.
const statusSignatureDomain = "edgedrain.io/status-signature/v1"

// Why a status is refused; each is also a metric label (Reason).
var (
	// ErrUnsigned: the status carries no signature (a forgery, or an older coordinator's).
	ErrUnsigned = errors.New("status is not signed")
	// ErrUntrustedKey: the signature names a key that is not trusted.
	ErrUntrustedKey = errors.New("status is signed by a key that is not trusted")
	// ErrBadSignature: the signature does not verify (a changed field, another key's copy).
	ErrBadSignature = errors.New("status signature does not verify")
	// ErrWrongKey: the status names another node than the key it is stored under.
	ErrWrongKey = errors.New("status is stored under another node's key")
	// ErrCopied: the stored value is a server copy of another message (DESIGN §10).
	ErrCopied = errors.New("status is a server copy of another message")
	// ErrReplayed: a validly signed status older than one already accepted, stored later.
	ErrReplayed = errors.New("status is older than one already accepted (a replay)")
)

// RefusalReason names err's kind for metrics and logs: unsigned, untrusted-key, bad-signature,
// wrong-key, copied, replayed, or other.
func RefusalReason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{ErrUnsigned, "unsigned"}, {ErrUntrustedKey, "untrusted-key"}, {ErrBadSignature, "bad-signature"},
		{ErrWrongKey, "wrong-key"}, {ErrCopied, "copied"}, {ErrReplayed, "replayed"}} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}

// RefusalReasons lists every RefusalReason, so that metrics start each series at 0.
func RefusalReasons() []string {
	return []string{"unsigned", "untrusted-key", "bad-signature", "wrong-key", "copied", "replayed", "other"}
}

// KeyID names a public key in statuses and logs: "ed25519:" and the first 8 bytes of its
// SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// Signer signs statuses with the coordinator's private key.
type Signer struct {
	key ed25519.PrivateKey
	id  string
}

// NewSigner returns a signer for key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	return &Signer{key: key, id: KeyID(key.Public().(ed25519.PublicKey))}
}

// KeyID is the signer's key ID.
func (s *Signer) KeyID() string { return s.id }

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign returns st signed for its node's key (its Term and Seq already set).
func (s *Signer) Sign(st NodeDrainStatus) NodeDrainStatus {
	st.SignedBy, st.Signature = s.id, ""
	sig := ed25519.Sign(s.key, statusSigningBytes(st.Node, st))
	st.Signature = base64.RawStdEncoding.EncodeToString(sig)
	return st
}

// KeySet is the set of public keys whose signatures an agent trusts: usually one, two while
// the coordinator's key is rotated.
type KeySet struct {
	keys map[string]ed25519.PublicKey
}

// NewKeySet returns a set of keys.
func NewKeySet(keys ...ed25519.PublicKey) KeySet {
	ks := KeySet{keys: map[string]ed25519.PublicKey{}}
	for _, k := range keys {
		ks.keys[KeyID(k)] = k
	}
	return ks
}

// Len is the number of keys.
func (ks KeySet) Len() int { return len(ks.keys) }

// IDs are the keys' IDs, sorted.
func (ks KeySet) IDs() []string { return slices.Sorted(maps.Keys(ks.keys)) }

// Has reports whether the key with this ID is trusted.
func (ks KeySet) Has(id string) bool { _, ok := ks.keys[id]; return ok }

// Verify reports whether st, stored under key, was signed by a trusted key; the error says
// why not (matching one of ErrUnsigned, ErrUntrustedKey, ErrWrongKey, ErrBadSignature).
func (ks KeySet) Verify(key string, st NodeDrainStatus) error {
	if st.Node != key {
		return fmt.Errorf("%w (%q under %q)", ErrWrongKey, st.Node, key)
	}
	if st.Signature == "" {
		return ErrUnsigned
	}
	pub, ok := ks.keys[st.SignedBy]
	if !ok {
		return fmt.Errorf("%w (%q)", ErrUntrustedKey, st.SignedBy)
	}
	sig, err := base64.RawStdEncoding.DecodeString(st.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w (not %d base64 bytes)", ErrBadSignature, ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, statusSigningBytes(key, st), sig) {
		return ErrBadSignature
	}
	return nil
}

// Newer reports whether a (signed) status is newer than b by the coordinator's order: a later
// term, or a later sequence number in the same term.
func (s NodeDrainStatus) Newer(b NodeDrainStatus) bool {
	if s.Term != b.Term {
		return s.Term > b.Term
	}
	return s.Seq > b.Seq
}

// statusSigningBytes is the canonical encoding of every field of st, stored under key, that a
// signature covers: each field in a fixed order, strings length-prefixed, numbers fixed-width.
// JSON is not signed as such: the same status has many JSON encodings.
func statusSigningBytes(key string, st NodeDrainStatus) []byte {
	var c canon
	c.str(statusSignatureDomain)
	c.str(key)
	c.str(st.Node)
	c.str(st.RequestID)
	c.int(int64(st.Status))
	c.int(int64(st.RequestedBy))
	c.int(int64(st.Attempt))
	c.str(st.Message)
	c.int(int64(len(st.Blockers)))
	for _, b := range st.Blockers {
		c.str(string(b.Kind))
		c.str(b.Namespace)
		c.str(b.Name)
		c.str(b.Reason)
		c.int(int64(b.Progress))
	}
	c.time(st.StartedAt)
	c.time(st.UpdatedAt)
	c.bool(st.CordonedByUs)
	c.time(st.ReturningSince)
	c.bool(st.SlotReleased)
	c.bool(st.DeclaredShutdown)
	c.bool(st.Decommission)
	c.bool(st.CompleteSent)
	c.int(int64(st.Term))
	c.int(int64(st.Seq))
	c.str(st.SignedBy)
	// Fields added since: each only when set, named, so that statuses without them keep the
	// encoding (and the signatures) they had.
	if st.APIUnreachable {
		c.str("APIUnreachable")
		c.bool(true)
	}
	return c.b
}

type canon struct{ b []byte }

func (c *canon) str(s string) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

func (c *canon) int(v int64) { c.b = binary.BigEndian.AppendUint64(c.b, uint64(v)) }

func (c *canon) bool(v bool) {
	if v {
		c.b = append(c.b, 1)
	} else {
		c.b = append(c.b, 0)
	}
}

// time encodes the instant (seconds and nanoseconds), not its zone: JSON keeps the instant.
func (c *canon) time(t time.Time) {
	if t.IsZero() {
		c.b = append(c.b, 0)
		return
	}
	c.b = append(c.b, 1)
	c.int(t.Unix())
	c.int(int64(t.Nanosecond()))
}

// GenerateSigningKey returns a new private key as PEM (PKCS #8, as `openssl genpkey -algorithm
// ed25519` writes it) and its public key as PEM (PKIX, as `openssl pkey -pubout` writes it).
func GenerateSigningKey() (private, public []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	public, err = PublicKeyPEM(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), public, nil
}

// PublicKeyPEM encodes pub as a PEM "PUBLIC KEY" block.
func PublicKeyPEM(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParseSigningKey reads one Ed25519 private key from PEM (a "PRIVATE KEY" block, PKCS #8).
func ParseSigningKey(data []byte) (*Signer, error) {
	var key ed25519.PrivateKey
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "PRIVATE KEY" {
			continue
		}
		if key != nil {
			return nil, errors.New("more than one private key: a coordinator signs with exactly one")
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		ed, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key is a %T, not Ed25519 (make one with `openssl genpkey -algorithm ed25519`)", k)
		}
		key = ed
	}
	if key == nil {
		return nil, errors.New("no PEM \"PRIVATE KEY\" block (PKCS #8 Ed25519, as `openssl genpkey -algorithm ed25519` writes it)")
	}
	return NewSigner(key), nil
}

// ParseTrustedKeys reads every PEM "PUBLIC KEY" block (PKIX Ed25519) in data into ks. A private
// key is refused: whoever holds the trusted keys must not be able to sign.
func ParseTrustedKeys(ks *KeySet, data []byte) error {
	if ks.keys == nil {
		ks.keys = map[string]ed25519.PublicKey{}
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil
		}
		switch block.Type {
		case "PUBLIC KEY":
		case "PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY":
			return errors.New("a private key among the trusted keys: give agents the public key only (`openssl pkey -pubout`)")
		default:
			return fmt.Errorf("PEM block %q: want \"PUBLIC KEY\"", block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return fmt.Errorf("public key: %w", err)
		}
		ed, ok := k.(ed25519.PublicKey)
		if !ok {
			return fmt.Errorf("public key is a %T, not Ed25519", k)
		}
		ks.keys[KeyID(ed)] = ed
	}
}
