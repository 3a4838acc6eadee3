package nodedrain

import (
	"crypto/ed25519"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A key pair as openssl writes it (genpkey -algorithm ed25519; pkey -pubout), made for this test.
const (
	opensslPrivate = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEICWR/2jCYwHlxHckcKOV7bUrwvSKwiy1uxd8KEU6ugNf\n-----END PRIVATE KEY-----\n"
	opensslPublic  = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEApIafHLQW7TAVAl8JV/8ghc/oeqaM+ruOA4/qtPmthHQ=\n-----END PUBLIC KEY-----\n"
)

func fullStatus() NodeDrainStatus {
	at := time.Date(2026, 11, 26, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	return NodeDrainStatus{Node: "node-1", RequestID: "r1", Status: StatusComplete, RequestedBy: RequesterDeviceOp,
		Attempt: 2, Message: "drained", Blockers: []Blocker{{Kind: BlockerPod, Namespace: "ns", Name: "p", Reason: "pdb", Progress: 3}},
		StartedAt: at, UpdatedAt: at.Add(time.Second), CordonedByUs: true, ReturningSince: at.Add(2 * time.Second),
		SlotReleased: true, DeclaredShutdown: true, Decommission: true, CompleteSent: true, Term: 7, Seq: 11}
}

func TestSignedStatusVerifiesAfterTheWire(t *testing.T) {
	signer, err := ParseSigningKey([]byte(opensslPrivate))
	require.NoError(t, err)
	var ks KeySet
	require.NoError(t, ParseTrustedKeys(&ks, []byte(opensslPublic)))
	require.Equal(t, []string{signer.KeyID()}, ks.IDs())

	st := signer.Sign(fullStatus())
	data, err := EncodeStatus(st)
	require.NoError(t, err)
	back, err := DecodeStatus(data)
	require.NoError(t, err)
	require.NoError(t, ks.Verify("node-1", back), "a status keeps its signature through JSON")
	// Re-encoded with another zone, the instant is the same: still valid.
	back.UpdatedAt = back.UpdatedAt.UTC()
	require.NoError(t, ks.Verify("node-1", back))
}

// Every field of a status is covered: changing any one of them breaks the signature. A field
// added to NodeDrainStatus later fails here until statusSigningBytes covers it.
func TestEveryStatusFieldIsSigned(t *testing.T) {
	signer := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	ks := NewKeySet(signer.Public())
	signed := signer.Sign(fullStatus())
	require.NoError(t, ks.Verify("node-1", signed))

	typ := reflect.TypeOf(signed)
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if name == "Signature" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			changed := signed
			changed.Blockers = append([]Blocker(nil), signed.Blockers...)
			f := reflect.ValueOf(&changed).Elem().Field(i)
			switch f.Kind() {
			case reflect.String:
				f.SetString(f.String() + "x")
			case reflect.Int:
				f.SetInt(f.Int() + 1)
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Slice:
				changed.Blockers[0].Progress++
			case reflect.Struct:
				f.Set(reflect.ValueOf(f.Interface().(time.Time).Add(time.Nanosecond)))
			default:
				t.Fatalf("field %s of kind %s: teach this test (and statusSigningBytes) about it", name, f.Kind())
			}
			err := ks.Verify(changed.Node, changed)
			if name == "Node" {
				require.ErrorIs(t, ks.Verify("node-1", changed), ErrWrongKey)
				err = ks.Verify(changed.Node, changed) // the same status under the other node's key
			}
			if name == "SignedBy" {
				require.ErrorIs(t, err, ErrUntrustedKey)
				return
			}
			require.ErrorIs(t, err, ErrBadSignature, "changing %s must break the signature", name)
		})
	}
	for _, kind := range []string{"Kind", "Namespace", "Name", "Reason"} {
		changed := signed
		changed.Blockers = append([]Blocker(nil), signed.Blockers...)
		reflect.ValueOf(&changed.Blockers[0]).Elem().FieldByName(kind).SetString("y")
		require.ErrorIs(t, ks.Verify("node-1", changed), ErrBadSignature, "blocker %s", kind)
	}
}

func TestRefusedStatuses(t *testing.T) {
	signer := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	other := NewSigner(ed25519.NewKeyFromSeed([]byte(strings.Repeat("k", ed25519.SeedSize))))
	ks := NewKeySet(signer.Public())
	st := fullStatus()

	require.ErrorIs(t, ks.Verify("node-1", st), ErrUnsigned)
	require.ErrorIs(t, ks.Verify("node-1", other.Sign(st)), ErrUntrustedKey)
	bad := signer.Sign(st)
	bad.Signature = "not base64!"
	require.ErrorIs(t, ks.Verify("node-1", bad), ErrBadSignature)
	flipped := signer.Sign(st)
	b := []byte(flipped.Signature)
	b[3] ^= 1
	flipped.Signature = string(b)
	require.ErrorIs(t, ks.Verify("node-1", flipped), ErrBadSignature)
	require.ErrorIs(t, ks.Verify("node-2", signer.Sign(st)), ErrWrongKey)

	// Rotation: both keys trusted at once.
	both := NewKeySet(signer.Public(), other.Public())
	require.NoError(t, both.Verify("node-1", signer.Sign(st)))
	require.NoError(t, both.Verify("node-1", other.Sign(st)))

	for _, err := range []error{ErrUnsigned, ErrUntrustedKey, ErrBadSignature, ErrWrongKey, ErrCopied, ErrReplayed, errors.New("x")} {
		require.Contains(t, RefusalReasons(), RefusalReason(err))
	}
}

func TestStatusOrder(t *testing.T) {
	a := NodeDrainStatus{Term: 5, Seq: 9}
	require.True(t, NodeDrainStatus{Term: 5, Seq: 10}.Newer(a))
	require.True(t, NodeDrainStatus{Term: 6, Seq: 1}.Newer(a))
	require.False(t, NodeDrainStatus{Term: 5, Seq: 9}.Newer(a))
	require.False(t, NodeDrainStatus{Term: 4, Seq: 99}.Newer(a))
}

func TestKeyFiles(t *testing.T) {
	priv, pub, err := GenerateSigningKey()
	require.NoError(t, err)
	signer, err := ParseSigningKey(priv)
	require.NoError(t, err)
	var ks KeySet
	require.NoError(t, ParseTrustedKeys(&ks, append(append([]byte{}, pub...), opensslPublic...)))
	require.Equal(t, 2, ks.Len())
	require.True(t, ks.Has(signer.KeyID()))

	var empty KeySet
	require.ErrorContains(t, ParseTrustedKeys(&empty, priv), "private key among the trusted keys")
	require.ErrorContains(t, ParseTrustedKeys(&empty, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), "want \"PUBLIC KEY\"")
	_, err = ParseSigningKey(pub)
	require.ErrorContains(t, err, "no PEM \"PRIVATE KEY\" block")
	_, err = ParseSigningKey(append(append([]byte{}, priv...), priv...))
	require.ErrorContains(t, err, "more than one private key")
	_, err = ParseSigningKey([]byte("garbage"))
	require.Error(t, err)
}

func BenchmarkSignStatus(b *testing.B) {
	signer := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	st := fullStatus()
	b.ReportAllocs()
	for b.Loop() {
		_ = signer.Sign(st)
	}
}

func BenchmarkVerifyStatus(b *testing.B) {
	signer := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	ks := NewKeySet(signer.Public())
	st := signer.Sign(fullStatus())
	b.ReportAllocs()
	for b.Loop() {
		if err := ks.Verify("node-1", st); err != nil {
			b.Fatal(err)
		}
	}
}

// A status signed before a field was added still verifies: agents upgraded before their
// coordinator must not refuse its statuses. This one was signed by the encoding as it stood
// before APIUnreachable existed; a field added since is encoded only when set.
func TestStatusesSignedBeforeAFieldWasAddedStillVerify(t *testing.T) {
	const signedBefore = `{"Node":"node-1","RequestID":"r1","Status":9,"RequestedBy":2,"Attempt":2,"Message":"drained",` +
		`"Blockers":[{"Kind":"Pod","Namespace":"ns","Name":"p","Reason":"pdb","Progress":3}],` +
		`"StartedAt":"2026-11-26T10:00:00.123456789+01:00","UpdatedAt":"2026-11-26T10:00:01.123456789+01:00","CordonedByUs":true,` +
		`"ReturningSince":"2026-11-26T10:00:02.123456789+01:00","SlotReleased":true,"DeclaredShutdown":true,"Decommission":true,` +
		`"CompleteSent":true,"Term":7,"Seq":11,"SignedBy":"ed25519:7615bec9576e7aca",` +
		`"Signature":"HhoA9py0N8N1pRJFENv8sjXqTrIWsAR9yoH0aKaPdne9djsvUGKwam1v0bCH4UZurzeWe4CHczc+WHpvjpfjCw"}`
	var ks KeySet
	require.NoError(t, ParseTrustedKeys(&ks, []byte(opensslPublic)))
	st, err := DecodeStatus([]byte(signedBefore))
	require.NoError(t, err)
	require.NoError(t, ks.Verify("node-1", st))
	st.APIUnreachable = true
	require.ErrorIs(t, ks.Verify("node-1", st), ErrBadSignature, "the new field is signed when set")
}
