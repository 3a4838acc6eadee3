package nodedrain

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testTime = time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)

func validRequest() NodeDrainRequest {
	return NodeDrainRequest{
		Node:        "edge-1.example.com",
		RequestID:   "edge-1-20250304-0001",
		RequestedAt: testTime,
		RequestedBy: RequesterDeviceOp,
		Context:     "reboot",
	}
}

func validStatus() NodeDrainStatus {
	return NodeDrainStatus{
		Node:        "edge-1.example.com",
		RequestID:   "edge-1-20250304-0001",
		Status:      StatusCordoned,
		RequestedBy: RequesterUpdate,
		Attempt:     2,
		Message:     "waiting for volumes -> node-b",
		Blockers: []Blocker{
			{Kind: BlockerVolume, Name: "pvc-x", Reason: "last healthy replica, rebuilding on node-b", Progress: 45},
			{Kind: BlockerPod, Namespace: "shop", Name: "db-0", Reason: "PodDisruptionBudget db allows 0 disruptions"},
		},
		StartedAt:    testTime,
		UpdatedAt:    testTime.Add(90 * time.Second).In(time.FixedZone("", 2*60*60)),
		CordonedByUs: true,
	}
}

func TestNodeNames(t *testing.T) {
	tests := []struct {
		name  string
		node  string
		valid bool
	}{
		{"simple", "edge-1", true},
		{"dots", "edge-1.site-a.example.com", true},
		{"digits only", "10", true},
		{"max length", strings.Repeat("a", 253), true},
		{"underscore", "Node_1", false},
		{"upper case", "Edge-1", false},
		{"too long", strings.Repeat("a", 254), false},
		{"leading dash", "-edge", false},
		{"trailing dot", "edge.", false},
		{"empty", "", false},
		{"space", "edge 1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidNodeName(tc.node)
			if tc.valid {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			r := validRequest()
			r.Node = tc.node
			err = r.Validate()
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), "invalid drain request: Node: ")
		})
	}
}

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*NodeDrainRequest)
		wantMsg string // empty: valid
	}{
		{"valid", func(*NodeDrainRequest) {}, ""},
		{"no context", func(r *NodeDrainRequest) { r.Context = "" }, ""},
		{"context at limit", func(r *NodeDrainRequest) { r.Context = strings.Repeat("c", MaxContextLen) }, ""},
		{"request ID at limit", func(r *NodeDrainRequest) { r.RequestID = strings.Repeat("i", MaxRequestIDLen) }, ""},
		{"no node", func(r *NodeDrainRequest) { r.Node = "" }, "Node: required"},
		{"no request ID", func(r *NodeDrainRequest) { r.RequestID = "" }, "RequestID: required"},
		{"long request ID", func(r *NodeDrainRequest) { r.RequestID = strings.Repeat("i", MaxRequestIDLen+1) }, "RequestID: 129 bytes"},
		{"control char in request ID", func(r *NodeDrainRequest) { r.RequestID = "a\nb" }, `RequestID: non-printable character '\n' at byte 1`},
		{"invalid UTF-8 request ID", func(r *NodeDrainRequest) { r.RequestID = "a\xffb" }, "RequestID: non-printable character"},
		{"no time", func(r *NodeDrainRequest) { r.RequestedAt = time.Time{} }, "RequestedAt: required"},
		{"year 10000", func(r *NodeDrainRequest) { r.RequestedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "RequestedAt: year 10000"},
		{"no requester", func(r *NodeDrainRequest) { r.RequestedBy = 0 }, "RequestedBy: required (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"unknown requester", func(r *NodeDrainRequest) { r.RequestedBy = 7 }, "RequestedBy: unknown requester 7 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)"},
		{"long context", func(r *NodeDrainRequest) { r.Context = strings.Repeat("c", MaxContextLen+1) }, "Context: 1025 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := validRequest()
			tc.mutate(&r)
			err := r.Validate()
			if tc.wantMsg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

func TestRequestValidateReportsEveryProblem(t *testing.T) {
	err := NodeDrainRequest{RequestedBy: 9}.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, ErrUnknownRequester)
	assert.Equal(t, "invalid drain request: Node: required; RequestID: required; RequestedAt: required; "+
		"RequestedBy: unknown requester 9 (want 1 NONE, 2 DEVICEOP, 3 UPDATE)", err.Error())
}

func TestStatusValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*NodeDrainStatus)
		wantMsg string // empty: valid
		wantErr error  // besides ErrInvalid
	}{
		{"valid", func(*NodeDrainStatus) {}, "", nil},
		{"idle", func(s *NodeDrainStatus) { *s = NodeDrainStatus{Node: "n1", Status: StatusNotRequested} }, "", nil},
		{"unknown status", func(s *NodeDrainStatus) { s.Status = 10 }, "Status: unknown status 10", ErrUnknownStatus},
		{"negative status", func(s *NodeDrainStatus) { s.Status = -1 }, "Status: unknown status -1", ErrUnknownStatus},
		{"unknown requester", func(s *NodeDrainStatus) { s.RequestedBy = 4 }, "RequestedBy: unknown requester 4", ErrUnknownRequester},
		{"bad node", func(s *NodeDrainStatus) { s.Node = "Node_1" }, `Node: invalid node name "Node_1"`, nil},
		{"negative attempt", func(s *NodeDrainStatus) { s.Attempt = -1 }, "Attempt: -1 is negative", nil},
		{"blocker without name", func(s *NodeDrainStatus) { s.Blockers[1].Name = "" }, "Blockers[1].Name: required", nil},
		{"blocker without kind", func(s *NodeDrainStatus) { s.Blockers[0].Kind = "" }, "Blockers[0].Kind: required", nil},
		{"blocker without reason", func(s *NodeDrainStatus) { s.Blockers[0].Reason = "" }, "Blockers[0].Reason: required", nil},
		{"blocker progress", func(s *NodeDrainStatus) { s.Blockers[0].Progress = 101 }, "Blockers[0].Progress: 101 is outside 0..100", nil},
		{"other blocker kind", func(s *NodeDrainStatus) { s.Blockers[0].Kind = "Job" }, "", nil},
		{"max blockers", func(s *NodeDrainStatus) { s.Blockers = manyBlockers(MaxBlockers) }, "", nil},
		{"too many blockers", func(s *NodeDrainStatus) { s.Blockers = manyBlockers(MaxBlockers + 1) }, "Blockers: 1001 blockers", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validStatus()
			tc.mutate(&s)
			err := s.Validate()
			if tc.wantMsg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), "invalid drain status: "+tc.wantMsg)
		})
	}
}

func TestOverrideValidate(t *testing.T) {
	require.NoError(t, StatusOverride{Status: StatusComplete, RequestedBy: RequesterDeviceOp}.Validate())
	require.NoError(t, StatusOverride{Status: StatusUnknown}.Validate())
	err := StatusOverride{Status: 12}.Validate()
	require.ErrorIs(t, err, ErrUnknownStatus)
	require.ErrorIs(t, err, ErrInvalid)
	err = StatusOverride{Status: StatusComplete, RequestedBy: -3}.Validate()
	require.ErrorIs(t, err, ErrUnknownRequester)
}

func manyBlockers(n int) []Blocker {
	bs := make([]Blocker, n)
	for i := range bs {
		bs[i] = Blocker{Kind: BlockerPod, Name: "p", Reason: "r"}
	}
	return bs
}
