package nodedrain

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireRejected checks err matches want and exactly one payload class, and
// that its message contains msg.
func requireRejected(t *testing.T, err, want error, msg string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, want)
	classes := 0
	for _, c := range []error{ErrMalformed, ErrInvalid, ErrPayloadTooLarge} {
		if errors.Is(err, c) {
			classes++
		}
	}
	assert.Equal(t, 1, classes, "error %q must match exactly one class", err)
	assert.Contains(t, err.Error(), msg)
}

// pad returns a payload of exactly n bytes: an override with an unknown padding field.
func pad(n int) []byte {
	head := `{"Status":9,"Pad":"`
	return []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)
}

func TestDecodeOverride(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want StatusOverride
	}{
		{"numbers", `{"Status":9,"RequestedBy":2}`, StatusOverride{StatusComplete, RequesterDeviceOp}},
		{"names", `{"Status":"COMPLETE","RequestedBy":"DEVICEOP"}`, StatusOverride{StatusComplete, RequesterDeviceOp}},
		{"lower-case names", `{"Status":"complete","RequestedBy":"deviceop"}`, StatusOverride{StatusComplete, RequesterDeviceOp}},
		{"mixed-case names", `{"Status":"FailedDrain","RequestedBy":"Update"}`, StatusOverride{StatusFailedDrain, RequesterUpdate}},
		{"number in a string", `{"Status":"9"}`, StatusOverride{Status: StatusComplete}},
		{"no requester", `{"Status":9}`, StatusOverride{Status: StatusComplete}},
		{"null requester", `{"Status":9,"RequestedBy":null}`, StatusOverride{Status: StatusComplete}},
		{"status 0", `{"Status":0}`, StatusOverride{Status: StatusUnknown}},
		{"pretty file", "{\n  \"Status\": 5,\n  \"RequestedBy\": 3\n}\n", StatusOverride{StatusCordoned, RequesterUpdate}},
		{"byte order mark", "\xEF\xBB\xBF{\"Status\":9}", StatusOverride{Status: StatusComplete}},
		{"unknown fields ignored", `{"Comment":"forced by ops","Status":9,"Extra":[1,{"a":null}],"RequestedBy":1}`,
			StatusOverride{StatusComplete, RequesterNone}},
		{"escaped key", `{"\u0053tatus":9}`, StatusOverride{Status: StatusComplete}},
		{"exactly max size", string(pad(MaxPayloadSize)), StatusOverride{Status: StatusComplete}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeOverride([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDecodeOverrideRejects(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		wantMsg string
	}{
		{"empty", ``, ErrMalformed, "malformed status override: empty payload"},
		{"whitespace", " \n\t", ErrMalformed, "empty payload"},
		{"truncated", `{"Status":9,"Requ`, ErrMalformed, "unexpected end of JSON input at line 1, column 18 (byte offset 17) (truncated?)"},
		{"truncated number", `{"Status":9`, ErrMalformed, "unexpected end of JSON input"},
		{"array", `[]`, ErrMalformed, "top-level value is an array, want a JSON object"},
		{"string", `"x"`, ErrMalformed, "top-level value is a string, want a JSON object"},
		{"null", `null`, ErrMalformed, "top-level value is a null, want a JSON object"},
		{"number", `9`, ErrMalformed, "top-level value is a number"},
		{"syntax error", "{\n  \"Status\": 9,\n  \"RequestedBy\": x\n}", ErrMalformed,
			"JSON syntax error at line 3, column 18 (byte offset 34): invalid character 'x'"},
		{"trailing comma", `{"Status":9,}`, ErrMalformed, "JSON syntax error at line 1, column 13"},
		{"trailing garbage", `{"Status":9}x`, ErrMalformed, "trailing data after the JSON object at line 1, column 13 (byte offset 12)"},
		{"two objects", "{\"Status\":9}\n{\"Status\":2}", ErrMalformed, "trailing data after the JSON object at line 2, column 1"},
		{"invalid UTF-8", "{\"Status\":9,\"x\":\"\xff\"}", ErrMalformed, "not valid UTF-8 at line 1, column 18"},
		{"duplicate field", `{"Status":2,"Status":9}`, ErrMalformed, "Status: duplicate field"},
		{"miscased field", `{"status":9}`, ErrMalformed, `"status": field names are case-sensitive; did you mean "Status"?`},
		{"too large", string(pad(MaxPayloadSize + 1)), ErrPayloadTooLarge, "status override too large: 65537 bytes, more than the limit of 65536"},
		{"no status", `{}`, ErrInvalid, "invalid status override: override has no Status"},
		{"only requester", `{"RequestedBy":2}`, ErrInvalid, "override has no Status"},
		{"null status", `{"Status":null}`, ErrInvalid, "override has no Status"},
		{"status 10", `{"Status":10}`, ErrUnknownStatus, "invalid status override: Status: unknown status 10 (want 0 UNKNOWN, 1 NOTSUPPORTED, 2 NOTREQUESTED, 3 REQUESTED, 4 STARTING, 5 CORDONED, 6 FAILEDCORDON, 7 DRAINRETRYING, 8 FAILEDDRAIN, 9 COMPLETE)"},
		{"status -1", `{"Status":-1}`, ErrUnknownStatus, "Status: unknown status -1"},
		{"status DONE", `{"Status":"DONE"}`, ErrUnknownStatus, `Status: unknown status "DONE" (want 0 UNKNOWN`},
		{"status 9.5", `{"Status":9.5}`, ErrUnknownStatus, "Status: unknown status 9.5"},
		{"status true", `{"Status":true}`, ErrUnknownStatus, "Status: unknown status: got JSON boolean true, want a number or a name"},
		{"status object", `{"Status":{"Value":9}}`, ErrUnknownStatus, "Status: unknown status: got JSON object"},
		{"status name with underscore", `{"Status":"FAILED_DRAIN"}`, ErrUnknownStatus, `unknown status "FAILED_DRAIN"`},
		{"requester 0", `{"Status":9,"RequestedBy":0}`, ErrUnknownRequester, "RequestedBy: unknown requester 0 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"requester 7", `{"Status":9,"RequestedBy":7}`, ErrUnknownRequester, "RequestedBy: unknown requester 7 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"requester reboot", `{"Status":9,"RequestedBy":"reboot"}`, ErrUnknownRequester, `RequestedBy: unknown requester "reboot"`},
		{"both bad", `{"Status":10,"RequestedBy":7}`, ErrUnknownRequester, "Status: unknown status 10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeOverride([]byte(tc.in))
			requireRejected(t, err, tc.wantErr, tc.wantMsg)
			assert.Equal(t, StatusOverride{}, got, "a rejected payload yields the zero value")
			if errors.Is(tc.wantErr, ErrUnknownStatus) || errors.Is(tc.wantErr, ErrUnknownRequester) {
				require.ErrorIs(t, err, ErrInvalid, "unknown enum values are invalid values")
			}
		})
	}
}

func TestDecodeRequest(t *testing.T) {
	in := `{"Node":"edge-1.example.com","RequestID":"r-1","RequestedAt":"2025-03-04T05:06:07.89+01:00",` +
		`"RequestedBy":"update","Context":"update v1.2.3","Priority":5}`
	got, err := DecodeRequest([]byte(in))
	require.NoError(t, err)
	assert.Equal(t, "edge-1.example.com", got.Node)
	assert.Equal(t, "r-1", got.RequestID)
	assert.True(t, got.RequestedAt.Equal(time.Date(2025, 3, 4, 4, 6, 7, 890000000, time.UTC)))
	assert.Equal(t, RequesterUpdate, got.RequestedBy)
	assert.Equal(t, "update v1.2.3", got.Context)
}

func TestDecodeRequestRejects(t *testing.T) {
	const ok = `"Node":"n1","RequestID":"r-1","RequestedAt":"2025-03-04T05:06:07Z"`
	tests := []struct {
		name    string
		in      string
		wantErr error
		wantMsg string
	}{
		{"requester 0", `{` + ok + `,"RequestedBy":0}`, ErrUnknownRequester, "invalid drain request: RequestedBy: unknown requester 0 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"no requester", `{` + ok + `}`, ErrInvalid, "RequestedBy: required (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"node with underscore", `{"Node":"Node_1","RequestID":"r","RequestedAt":"2025-03-04T05:06:07Z","RequestedBy":2}`, ErrInvalid, `Node: invalid node name "Node_1"`},
		{"node number", `{"Node":5,"RequestID":"r","RequestedAt":"2025-03-04T05:06:07Z","RequestedBy":2}`, ErrInvalid, "invalid drain request: Node: want a JSON string, got number 5"},
		{"time not RFC 3339", `{"Node":"n1","RequestID":"r","RequestedAt":"yesterday","RequestedBy":2}`, ErrInvalid, `RequestedAt: want an RFC 3339 time such as "2006-01-02T15:04:05Z", got string "yesterday"`},
		{"time number", `{"Node":"n1","RequestID":"r","RequestedAt":1741064767,"RequestedBy":2}`, ErrInvalid, "RequestedAt: want an RFC 3339 time"},
		{"every wrong type", `{"Node":[],"RequestID":{},"RequestedAt":true,"RequestedBy":2.5,"Context":1}`, ErrInvalid,
			"Node: want a JSON string, got array; RequestID: want a JSON string, got object; RequestedAt: want an RFC 3339 time such as \"2006-01-02T15:04:05Z\", got boolean true; RequestedBy: unknown requester 2.5"},
		{"long value shortened", `{"Node":"` + strings.Repeat("N", 1000) + `","RequestID":"r","RequestedAt":"2025-03-04T05:06:07Z","RequestedBy":2}`, ErrInvalid, `NNNNNNNN..."`},
		{"empty object", `{}`, ErrInvalid, "Node: required; RequestID: required; RequestedAt: required; RequestedBy: required"},
		{"too large", string(pad(MaxPayloadSize + 100)), ErrPayloadTooLarge, "drain request too large"},
		{"trailing garbage", `{` + ok + `,"RequestedBy":2} ,`, ErrMalformed, "trailing data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tc.in))
			requireRejected(t, err, tc.wantErr, tc.wantMsg)
			assert.Equal(t, NodeDrainRequest{}, got)
			assert.Less(t, len(err.Error()), 1500, "messages stay readable")
		})
	}
}

func TestDecodeStatusRejects(t *testing.T) {
	const ok = `"Node":"n1","Status":5`
	tests := []struct {
		name    string
		in      string
		wantErr error
		wantMsg string
	}{
		{"no status", `{"Node":"n1"}`, ErrInvalid, "invalid drain status: drain status has no Status"},
		{"status 10", `{"Node":"n1","Status":10}`, ErrUnknownStatus, "Status: unknown status 10"},
		{"requester 0", `{` + ok + `,"RequestedBy":0}`, ErrUnknownRequester, "RequestedBy: unknown requester 0"},
		{"attempt string", `{` + ok + `,"Attempt":"2"}`, ErrInvalid, `Attempt: want an integer, got string "2"`},
		{"attempt fraction", `{` + ok + `,"Attempt":1.5}`, ErrInvalid, "Attempt: want an integer, got number 1.5"},
		{"attempt negative", `{` + ok + `,"Attempt":-1}`, ErrInvalid, "Attempt: -1 is negative"},
		{"cordoned string", `{` + ok + `,"CordonedByUs":"yes"}`, ErrInvalid, `CordonedByUs: want true or false, got string "yes"`},
		{"blockers object", `{` + ok + `,"Blockers":{}}`, ErrInvalid, "Blockers: want a JSON array of blockers, got object"},
		{"blocker number", `{` + ok + `,"Blockers":[1]}`, ErrInvalid, "Blockers[0]: want a JSON object, got number 1"},
		{"blocker progress string", `{` + ok + `,"Blockers":[{"Kind":"Volume","Name":"a","Reason":"r"},{"Kind":"Volume","Name":"b","Reason":"r","Progress":"45%"}]}`,
			ErrInvalid, `Blockers[1].Progress: want an integer, got string "45%"`},
		{"blocker without reason", `{` + ok + `,"Blockers":[{"Kind":"Pod","Name":"a"}]}`, ErrInvalid, "Blockers[0].Reason: required"},
		{"blocker duplicate field", `{` + ok + `,"Blockers":[{"Kind":"Pod","Name":"a","Name":"b","Reason":"r"}]}`, ErrMalformed, "Blockers[0].Name: duplicate field"},
		{"blocker miscased field", `{` + ok + `,"Blockers":[{"kind":"Pod","Name":"a","Reason":"r"}]}`, ErrMalformed, `Blockers[0]."kind": field names are case-sensitive`},
		{"too many blockers", `{` + ok + `,"Blockers":[` + strings.Repeat(`{},`, MaxBlockers) + `{}]}`, ErrInvalid, "Blockers: 1001 blockers, more than the limit of 1000"},
		{"time wrong", `{` + ok + `,"UpdatedAt":"2025-13-01T00:00:00Z"}`, ErrInvalid, "UpdatedAt: want an RFC 3339 time"},
		{"truncated", `{` + ok + `,"Blockers":[{"Kind":"Pod"`, ErrMalformed, "unexpected end of JSON input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeStatus([]byte(tc.in))
			requireRejected(t, err, tc.wantErr, tc.wantMsg)
			assert.Equal(t, NodeDrainStatus{}, got)
		})
	}
}

func TestEncodeWireForm(t *testing.T) {
	tests := []struct {
		name   string
		encode func() ([]byte, error)
		want   string
	}{
		{"override", func() ([]byte, error) { return EncodeOverride(StatusOverride{StatusComplete, RequesterDeviceOp}) }, `{"Status":9,"RequestedBy":2}`},
		{"override without requester", func() ([]byte, error) { return EncodeOverride(StatusOverride{Status: StatusComplete}) }, `{"Status":9}`},
		{"idle status", func() ([]byte, error) { return EncodeStatus(NodeDrainStatus{Node: "n1", Status: StatusNotRequested}) }, `{"Node":"n1","Status":2}`},
		{"request", func() ([]byte, error) { return EncodeRequest(validRequest()) },
			`{"Node":"edge-1.example.com","RequestID":"edge-1-20250304-0001","RequestedAt":"2025-03-04T05:06:07.890123456Z","RequestedBy":2,"Context":"reboot"}`},
		{"status", func() ([]byte, error) { return EncodeStatus(validStatus()) },
			`{"Node":"edge-1.example.com","RequestID":"edge-1-20250304-0001","Status":5,"RequestedBy":3,"Attempt":2,` +
				`"Message":"waiting for volumes -> node-b","Blockers":[` +
				`{"Kind":"Volume","Name":"pvc-x","Reason":"last healthy replica, rebuilding on node-b","Progress":45},` +
				`{"Kind":"Pod","Namespace":"shop","Name":"db-0","Reason":"PodDisruptionBudget db allows 0 disruptions"}],` +
				`"StartedAt":"2025-03-04T05:06:07.890123456Z","UpdatedAt":"2025-03-04T07:07:37.890123456+02:00","CordonedByUs":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.encode()
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	_, err := EncodeRequest(NodeDrainRequest{Node: "n1"})
	requireRejected(t, err, ErrInvalid, "invalid drain request: RequestID: required")
	_, err = EncodeOverride(StatusOverride{Status: 10})
	requireRejected(t, err, ErrUnknownStatus, "Status: unknown status 10")

	big := NodeDrainStatus{Node: "n1", Status: StatusCordoned, Blockers: manyBlockers(MaxBlockers)}
	for i := range big.Blockers {
		big.Blockers[i].Reason = strings.Repeat("r", 100)
	}
	_, err = EncodeStatus(big)
	requireRejected(t, err, ErrPayloadTooLarge, "drain status too large")
}

func TestRoundTrip(t *testing.T) {
	t.Run("request", func(t *testing.T) {
		want := validRequest()
		b, err := EncodeRequest(want)
		require.NoError(t, err)
		got, err := DecodeRequest(b)
		require.NoError(t, err)
		assert.Equal(t, normalizeRequest(want), normalizeRequest(got))
	})
	t.Run("status", func(t *testing.T) {
		want := validStatus()
		b, err := EncodeStatus(want)
		require.NoError(t, err)
		got, err := DecodeStatus(b)
		require.NoError(t, err)
		assert.Equal(t, normalizeStatus(want), normalizeStatus(got))
		_, offset := got.UpdatedAt.Zone()
		assert.Equal(t, 2*60*60, offset, "the zone offset survives")
	})
	t.Run("every status and requester", func(t *testing.T) {
		for _, s := range allStatuses {
			for _, r := range append(allRequesters, struct {
				requester Requester
				name      string
			}{0, "unset"}) {
				o := StatusOverride{Status: s.status, RequestedBy: r.requester}
				b, err := EncodeOverride(o)
				require.NoError(t, err)
				got, err := DecodeOverride(b)
				require.NoError(t, err, string(b))
				assert.Equal(t, o, got)

				st := NodeDrainStatus{Node: "n1", Status: s.status, RequestedBy: r.requester}
				b, err = EncodeStatus(st)
				require.NoError(t, err)
				gotStatus, err := DecodeStatus(b)
				require.NoError(t, err, string(b))
				assert.Equal(t, st, gotStatus)
			}
		}
	})
	t.Run("empty blockers decode as none", func(t *testing.T) {
		got, err := DecodeStatus([]byte(`{"Node":"n1","Status":2,"Blockers":[]}`))
		require.NoError(t, err)
		assert.Nil(t, got.Blockers)
	})
}

// normalizeRequest and normalizeStatus put times in UTC so that values can be
// compared with assert.Equal whatever *time.Location a decoder chose.
func normalizeRequest(r NodeDrainRequest) NodeDrainRequest {
	r.RequestedAt = r.RequestedAt.UTC()
	return r
}

func normalizeStatus(s NodeDrainStatus) NodeDrainStatus {
	s.StartedAt, s.UpdatedAt = s.StartedAt.UTC(), s.UpdatedAt.UTC()
	return s
}

func TestErrorMessageListsAtMostTenProblems(t *testing.T) {
	in := `{"Node":"n1","Status":5,"Blockers":[` + strings.Repeat(`{"Kind":1},`, 20) + `{"Kind":1}]}`
	_, err := DecodeStatus([]byte(in))
	requireRejected(t, err, ErrInvalid, "Blockers[9].Kind: want a JSON string, got number 1; and 11 more")
	assert.NotContains(t, err.Error(), "Blockers[10]")
}
