package nodedrain

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fuzzers check that no input panics, that every rejection is a
// well-formed payload error, and that whatever decodes also validates and
// survives Encode then Decode unchanged. Seed corpora live in
// testdata/fuzz/<FuzzName>/; more seeds are added here.

// checkRejection asserts the properties every decode error has.
func checkRejection(t *testing.T, err error) {
	t.Helper()
	classes := 0
	for _, c := range []error{ErrMalformed, ErrInvalid, ErrPayloadTooLarge} {
		if errors.Is(err, c) {
			classes++
		}
	}
	require.Equal(t, 1, classes, "error %q must match exactly one class", err)
	msg := err.Error()
	require.NotEmpty(t, msg)
	require.Less(t, len(msg), 8<<10, "error messages stay bounded")
}

// reencodeGrew reports whether a re-encoding failed only because escaping
// (U+2028, U+2029 become six bytes) pushed a large payload over the limit.
func reencodeGrew(data []byte, err error) bool {
	return errors.Is(err, ErrPayloadTooLarge) && len(data) > MaxPayloadSize/2
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"Node":"edge-1","RequestID":"r1","RequestedAt":"2025-03-04T05:06:07Z","RequestedBy":2,"Context":"reboot"}`,
		`{"Node":"a.b.c","RequestID":"r1","RequestedAt":"2025-03-04T05:06:07.5-07:00","RequestedBy":"update"}`,
		`{"Node":"edge-1","RequestID":"r1","RequestedAt":"2025-03-04T05:06:07Z","RequestedBy":0}`,
		`{"Node":"edge-1","RequestID":"r1","RequestedAt":"2025-03-04T05:06:07Z","RequestedBy":2,"Node":"x"}`,
		`{"Node":"edge-1","RequestID":"r1"`,
		`[]`, `null`, `"x"`, ``,
		string(pad(MaxPayloadSize + 1)),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequest(data)
		if err != nil {
			checkRejection(t, err)
			require.Equal(t, NodeDrainRequest{}, r)
			return
		}
		require.NoError(t, r.Validate())
		b, err := EncodeRequest(r)
		if reencodeGrew(data, err) {
			return
		}
		require.NoError(t, err)
		r2, err := DecodeRequest(b)
		require.NoError(t, err, "re-decoding %s", b)
		require.Equal(t, normalizeRequest(r), normalizeRequest(r2))
		b2, err := EncodeRequest(r2)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	})
}

func FuzzDecodeStatus(f *testing.F) {
	for _, s := range []string{
		`{"Node":"edge-1","RequestID":"r1","Status":5,"RequestedBy":3,"Attempt":2,"Message":"m",` +
			`"Blockers":[{"Kind":"Volume","Name":"pvc-x","Reason":"rebuilding","Progress":45},` +
			`{"Kind":"Pod","Namespace":"ns","Name":"p","Reason":"pdb"}],` +
			`"StartedAt":"2025-03-04T05:06:07Z","UpdatedAt":"2025-03-04T05:07:07.123+02:00","CordonedByUs":true}`,
		`{"Node":"edge-1","Status":"notrequested"}`,
		`{"Node":"edge-1","Status":10}`,
		`{"Node":"edge-1","Status":5,"Blockers":[]}`,
		`{"Node":"edge-1","Status":5,"Blockers":[{"Kind":"Pod","Name":"a","Reason":"r","Progress":"1"}]}`,
		`{"Node":"edge-1","Status":5,"Attempt":1e3}`,
		`{"Node":"edge-1","Status":5,"Blockers":[{"Kind":"Pod"`,
		`{"Node":"edge-1","Status":5,"UpdatedAt":"2025-03-04T05:07:07\u2028"}`,
		`{"Node":"edge-1","Status":2,"Message":"` + strings.Repeat("\u2028", MaxPayloadSize/3-20) + `"}`,
		`{"Node":"edge-1","Status":2}{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeStatus(data)
		if err != nil {
			checkRejection(t, err)
			require.Equal(t, NodeDrainStatus{}, s)
			return
		}
		require.NoError(t, s.Validate())
		b, err := EncodeStatus(s)
		if reencodeGrew(data, err) {
			return
		}
		require.NoError(t, err)
		s2, err := DecodeStatus(b)
		require.NoError(t, err, "re-decoding %s", b)
		require.Equal(t, normalizeStatus(s), normalizeStatus(s2))
		b2, err := EncodeStatus(s2)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	})
}

func FuzzDecodeOverride(f *testing.F) {
	for _, s := range []string{
		`{"Status":9,"RequestedBy":2}`,
		`{"Status":"COMPLETE","RequestedBy":"DEVICEOP"}`,
		`{"Status":"complete"}`,
		`{"Status":9.5}`, `{"Status":true}`, `{"Status":-1}`, `{"RequestedBy":2}`,
		`{"Status":9,"RequestedBy":0}`,
		`{"Status":9,"status":9}`,
		"\xEF\xBB\xBF{\"Status\":9}",
		`{"Status":9`,
		string(pad(MaxPayloadSize + 1)),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := DecodeOverride(data)
		if err != nil {
			checkRejection(t, err)
			require.Equal(t, StatusOverride{}, o)
			return
		}
		require.NoError(t, o.Validate())
		b, err := EncodeOverride(o)
		require.NoError(t, err)
		o2, err := DecodeOverride(b)
		require.NoError(t, err, "re-decoding %s", b)
		require.Equal(t, o, o2)
	})
}
