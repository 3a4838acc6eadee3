package nodedrain

import (
	"encoding/json"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allStatuses = []struct {
	status DrainStatus
	name   string
}{
	{StatusUnknown, "UNKNOWN"},
	{StatusNotSupported, "NOTSUPPORTED"},
	{StatusNotRequested, "NOTREQUESTED"},
	{StatusRequested, "REQUESTED"},
	{StatusStarting, "STARTING"},
	{StatusCordoned, "CORDONED"},
	{StatusFailedCordon, "FAILEDCORDON"},
	{StatusDrainRetrying, "DRAINRETRYING"},
	{StatusFailedDrain, "FAILEDDRAIN"},
	{StatusComplete, "COMPLETE"},
}

var allRequesters = []struct {
	requester Requester
	name      string
}{
	{RequesterNone, "NONE"},
	{RequesterDeviceOp, "DEVICEOP"},
	{RequesterUpdate, "UPDATE"},
}

func TestDrainStatusContract(t *testing.T) {
	for i, tc := range allStatuses {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, DrainStatus(i), tc.status, "numbers are part of the contract")
			assert.Equal(t, tc.name, tc.status.String())
			assert.True(t, tc.status.IsValid())

			b, err := json.Marshal(tc.status)
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(i), string(b), "JSON form is the number")

			for _, in := range []string{string(b), `"` + tc.name + `"`, `"` + strings.ToLower(tc.name) + `"`} {
				var got DrainStatus = 42
				require.NoError(t, json.Unmarshal([]byte(in), &got), in)
				assert.Equal(t, tc.status, got, in)
			}

			text, err := tc.status.MarshalText()
			require.NoError(t, err)
			assert.Equal(t, tc.name, string(text))
			for _, in := range []string{tc.name, strings.ToLower(tc.name), strconv.Itoa(i)} {
				got, err := ParseDrainStatus(in)
				require.NoError(t, err, in)
				assert.Equal(t, tc.status, got, in)
			}
		})
	}
}

func TestRequesterContract(t *testing.T) {
	for i, tc := range allRequesters {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, Requester(i+1), tc.requester, "numbers are part of the contract")
			assert.Equal(t, tc.name, tc.requester.String())
			assert.True(t, tc.requester.IsValid())

			b, err := json.Marshal(tc.requester)
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(i+1), string(b))

			for _, in := range []string{string(b), `"` + tc.name + `"`, `"` + strings.ToLower(tc.name) + `"`} {
				var got Requester
				require.NoError(t, json.Unmarshal([]byte(in), &got), in)
				assert.Equal(t, tc.requester, got, in)
			}
			got, err := ParseRequester(strings.ToLower(tc.name))
			require.NoError(t, err)
			assert.Equal(t, tc.requester, got)
		})
	}
}

func TestEnumStringOfUnknownValues(t *testing.T) {
	assert.Equal(t, "DrainStatus(42)", DrainStatus(42).String())
	assert.Equal(t, "DrainStatus(-1)", DrainStatus(-1).String())
	assert.Equal(t, "Requester(0)", Requester(0).String())
	assert.Equal(t, "Requester(4)", Requester(4).String())
	assert.False(t, DrainStatus(10).IsValid())
	assert.False(t, Requester(0).IsValid())
	_, err := DrainStatus(10).MarshalText()
	require.ErrorIs(t, err, ErrUnknownStatus)
	_, err = Requester(0).MarshalText()
	require.ErrorIs(t, err, ErrUnknownRequester)
}

func TestDrainStatusHelpers(t *testing.T) {
	failed := map[DrainStatus]bool{StatusFailedCordon: true, StatusFailedDrain: true}
	inProgress := map[DrainStatus]bool{
		StatusRequested: true, StatusStarting: true, StatusCordoned: true, StatusDrainRetrying: true,
	}
	for _, tc := range allStatuses {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, failed[tc.status], tc.status.Failed())
			assert.Equal(t, inProgress[tc.status], tc.status.InProgress())
		})
	}
}

func TestEnumUnmarshalRejects(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		target  string // "status" or "requester"
		wantErr error
		wantMsg string
	}{
		{"status 10", `10`, "status", ErrUnknownStatus, "unknown status 10 (want 0 UNKNOWN, 1 NOTSUPPORTED"},
		{"status -1", `-1`, "status", ErrUnknownStatus, "unknown status -1 (want 0 UNKNOWN"},
		{"status fraction", `9.5`, "status", ErrUnknownStatus, "unknown status 9.5 (want"},
		{"status exponent", `9e0`, "status", ErrUnknownStatus, "unknown status 9e0"},
		{"status huge", `99999999999999999999999`, "status", ErrUnknownStatus, "unknown status 99999999999999999999999"},
		{"status name", `"DONE"`, "status", ErrUnknownStatus, `unknown status "DONE" (want 0 UNKNOWN`},
		{"status bool", `true`, "status", ErrUnknownStatus, "got JSON boolean true, want a number or a name (0 UNKNOWN"},
		{"status array", `[9]`, "status", ErrUnknownStatus, "got JSON array [9]"},
		{"status object", `{"Status":9}`, "status", ErrUnknownStatus, "got JSON object"},
		{"requester 0", `0`, "requester", ErrUnknownRequester, "unknown requester 0 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"requester 7", `7`, "requester", ErrUnknownRequester, "unknown requester 7 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"requester name", `"REBOOT"`, "requester", ErrUnknownRequester, `unknown requester "REBOOT" (want 1 NONE`},
		{"requester string 0", `"0"`, "requester", ErrUnknownRequester, `unknown requester "0"`},
		{"requester look-alike", `"NONE\u017f"`, "requester", ErrUnknownRequester, "unknown requester"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.target == "status" {
				s := StatusComplete
				err = s.UnmarshalJSON([]byte(tc.in))
				assert.Equal(t, StatusComplete, s, "a rejected value leaves the target unchanged")
			} else {
				r := RequesterUpdate
				err = r.UnmarshalJSON([]byte(tc.in))
				assert.Equal(t, RequesterUpdate, r, "a rejected value leaves the target unchanged")
			}
			require.ErrorIs(t, err, tc.wantErr)
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

func TestEnumUnmarshalNullIsNoOp(t *testing.T) {
	s := StatusCordoned
	require.NoError(t, s.UnmarshalJSON([]byte("null")))
	assert.Equal(t, StatusCordoned, s)
	r := RequesterUpdate
	require.NoError(t, r.UnmarshalJSON([]byte("null")))
	assert.Equal(t, RequesterUpdate, r)
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "DONE", "10", "-1", "COMPLETE!", strings.Repeat("X", 500)} {
		t.Run("status "+truncate(in), func(t *testing.T) {
			_, err := ParseDrainStatus(in)
			require.ErrorIs(t, err, ErrUnknownStatus)
			assert.Less(t, len(err.Error()), 300, "a long bad value is shortened in the message")
		})
	}
	for _, in := range []string{"", "0", "4", "reboot"} {
		t.Run("requester "+in, func(t *testing.T) {
			_, err := ParseRequester(in)
			require.ErrorIs(t, err, ErrUnknownRequester)
		})
	}
}

func TestEnumsAsJSONMapKeys(t *testing.T) {
	b, err := json.Marshal(map[DrainStatus]int{StatusComplete: 2, StatusCordoned: 1})
	require.NoError(t, err)
	assert.JSONEq(t, `{"COMPLETE":2,"CORDONED":1}`, string(b))
	var back map[DrainStatus]int
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, map[DrainStatus]int{StatusComplete: 2, StatusCordoned: 1}, back)
}

func TestEnumsAsFlags(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var s DrainStatus
	var r Requester
	fs.TextVar(&s, "status", StatusUnknown, "forced status")
	fs.TextVar(&r, "requester", RequesterNone, "requester")
	require.NoError(t, fs.Parse([]string{"-status", "complete", "-requester", "2"}))
	assert.Equal(t, StatusComplete, s)
	assert.Equal(t, RequesterDeviceOp, r)

	// The flag package does not wrap the error; the message still helps.
	err := fs.Parse([]string{"-status", "done"})
	require.ErrorContains(t, err, `unknown status "done" (want 0 UNKNOWN`)
	err = fs.Parse([]string{"-requester", "0"})
	require.ErrorContains(t, err, `unknown requester "0" (want 1 NONE, 2 DEVICEOP, 3 UPDATE)`)
	assert.Equal(t, StatusComplete, s, "a rejected flag value leaves the variable unchanged")
	assert.Equal(t, RequesterDeviceOp, r)
}
