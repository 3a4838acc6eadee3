package nodedrain

import "strings"

// Bus bucket names (DESIGN §2); the key in both is the node name.
const (
	// RequestsBucket holds each node's NodeDrainRequest, written by that node's agent.
	RequestsBucket = "nodedrain-requests"
	// StatusBucket holds each node's NodeDrainStatus, written by the coordinator.
	StatusBucket = "nodedrain-status"
)

// StatusWriterMark is the header every status the coordinator writes carries
// (pubsub.BucketConfig.WriterMark): a server copy of a payload alone (a direct get with no_hdr)
// has none, and a copy with headers has the server's twice, so readers tell both from the
// coordinator's writes.
const StatusWriterMark = "Edgedrain-Coordinator"

// RequestCodec encodes and strictly decodes NodeDrainRequests for a typed bus bucket.
type RequestCodec struct{}

// Encode validates and encodes r.
func (RequestCodec) Encode(r NodeDrainRequest) ([]byte, error) { return EncodeRequest(r) }

// Decode strictly decodes a request (see DecodeRequest).
func (RequestCodec) Decode(data []byte) (NodeDrainRequest, error) { return DecodeRequest(data) }

// StatusCodec encodes and strictly decodes NodeDrainStatuses for a typed bus bucket.
type StatusCodec struct{}

// Encode validates and encodes s.
func (StatusCodec) Encode(s NodeDrainStatus) ([]byte, error) { return EncodeStatus(s) }

// Decode strictly decodes a status (see DecodeStatus).
func (StatusCodec) Decode(data []byte) (NodeDrainStatus, error) { return DecodeStatus(data) }

// AgentInboxPrefix is the inbox prefix the agent of node uses for its replies and its status
// watch (nats.CustomInboxPrefix): the bus lets it subscribe only there (DESIGN §10), so it
// cannot read another client's replies. Node names have no '_', so mapping '.' to '_' keeps the
// prefix one subject token and distinct per node ("a.b" must not extend "a").
func AgentInboxPrefix(node string) string {
	return "_INBOX_edgedrain_agent." + strings.ReplaceAll(node, ".", "_")
}
