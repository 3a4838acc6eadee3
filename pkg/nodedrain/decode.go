package nodedrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxPayloadSize is the largest payload, in bytes, that the decoders accept
// and the encoders produce.
const MaxPayloadSize = 64 << 10

// utf8BOM is skipped at the start of a payload: editors on some systems write
// it into override files.
var utf8BOM = []byte("\xEF\xBB\xBF")

// decodeFields runs the checks common to every payload and decodes the
// members of its top-level object into fields. It reports which fields held
// a non-null value.
func decodeFields(subject string, data []byte, fields []field) ([]bool, error) {
	if len(data) > MaxPayloadSize {
		return nil, newPayloadError(subject, ErrPayloadTooLarge,
			fmt.Errorf("%d bytes, more than the limit of %d", len(data), MaxPayloadSize))
	}
	data = bytes.TrimPrefix(data, utf8BOM)
	if len(data) == 0 {
		return nil, newPayloadError(subject, ErrMalformed, errors.New("empty payload"))
	}
	members, err := parseObject(data)
	if err != nil {
		return nil, newPayloadError(subject, ErrMalformed, err)
	}
	var d decoder
	present := d.object(members, "", fields)
	if len(d.malformed) > 0 {
		return nil, newPayloadError(subject, ErrMalformed, d.malformed...)
	}
	if len(d.invalid) > 0 {
		return nil, newPayloadError(subject, ErrInvalid, d.invalid...)
	}
	return present, nil
}

// DecodeRequest decodes and validates a NodeDrainRequest payload. Unknown
// field names are ignored; every other problem is an error matching
// ErrPayloadTooLarge, ErrMalformed or ErrInvalid, and the zero value is returned.
func DecodeRequest(data []byte) (NodeDrainRequest, error) {
	var r NodeDrainRequest
	_, err := decodeFields(subjectRequest, data, []field{
		{"Node", stringField(&r.Node)},
		{"RequestID", stringField(&r.RequestID)},
		{"RequestedAt", timeField(&r.RequestedAt)},
		{"RequestedBy", requesterField(&r.RequestedBy)},
		{"Context", stringField(&r.Context)},
		{"BootID", stringField(&r.BootID)},
	})
	if err == nil {
		err = r.Validate()
	}
	if err != nil {
		return NodeDrainRequest{}, err
	}
	return r, nil
}

// DecodeStatus decodes and validates a NodeDrainStatus payload, which must
// have a Status. Unknown field names are ignored; every other problem is an
// error matching ErrPayloadTooLarge, ErrMalformed or ErrInvalid, and the
// zero value is returned.
func DecodeStatus(data []byte) (NodeDrainStatus, error) {
	var s NodeDrainStatus
	present, err := decodeFields(subjectStatus, data, []field{
		{"Status", statusField(&s.Status)},
		{"Node", stringField(&s.Node)},
		{"RequestID", stringField(&s.RequestID)},
		{"RequestedBy", requesterField(&s.RequestedBy)},
		{"Attempt", intField(&s.Attempt)},
		{"Message", stringField(&s.Message)},
		{"Blockers", blockersField(&s.Blockers)},
		{"StartedAt", timeField(&s.StartedAt)},
		{"UpdatedAt", timeField(&s.UpdatedAt)},
		{"CordonedByUs", boolField(&s.CordonedByUs)},
		{"ReturningSince", timeField(&s.ReturningSince)},
		{"SlotReleased", boolField(&s.SlotReleased)},
		{"DeclaredShutdown", boolField(&s.DeclaredShutdown)},
		{"Decommission", boolField(&s.Decommission)},
		{"CompleteSent", boolField(&s.CompleteSent)},
		{"APIUnreachable", boolField(&s.APIUnreachable)},
		{"Term", intField(&s.Term)},
		{"Seq", intField(&s.Seq)},
		{"SignedBy", stringField(&s.SignedBy)},
		{"Signature", stringField(&s.Signature)},
	})
	if err == nil && !present[0] {
		err = newPayloadError(subjectStatus, ErrInvalid, errors.New("drain status has no Status"))
	}
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		return NodeDrainStatus{}, err
	}
	return s, nil
}

// DecodeOverride decodes and validates a forced-status file such as
// {"Status":9,"RequestedBy":2} or {"Status":"COMPLETE"}. A missing Status is
// an error; every problem is an error matching ErrPayloadTooLarge,
// ErrMalformed or ErrInvalid, and the zero value is returned.
func DecodeOverride(data []byte) (StatusOverride, error) {
	var o StatusOverride
	present, err := decodeFields(subjectOverride, data, []field{
		{"Status", statusField(&o.Status)},
		{"RequestedBy", requesterField(&o.RequestedBy)},
	})
	if err == nil && !present[0] {
		err = newPayloadError(subjectOverride, ErrInvalid, errors.New("override has no Status"))
	}
	if err == nil {
		err = o.Validate()
	}
	if err != nil {
		return StatusOverride{}, err
	}
	return o, nil
}

// EncodeRequest validates r and returns its JSON payload.
func EncodeRequest(r NodeDrainRequest) ([]byte, error) {
	return encode(subjectRequest, r, r.Validate())
}

// EncodeStatus validates s and returns its JSON payload; a status too large
// for MaxPayloadSize (too many or too long blockers) is an error matching
// ErrPayloadTooLarge.
func EncodeStatus(s NodeDrainStatus) ([]byte, error) {
	return encode(subjectStatus, s, s.Validate())
}

// EncodeOverride validates o and returns its JSON payload, e.g. {"Status":9,"RequestedBy":2}.
func EncodeOverride(o StatusOverride) ([]byte, error) {
	return encode(subjectOverride, o, o.Validate())
}

// encode writes v compactly without HTML escaping ("->" stays readable in
// files), after its validation error verr, if any.
func encode(subject string, v any, verr error) ([]byte, error) {
	if verr != nil {
		return nil, verr
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, newPayloadError(subject, ErrInvalid, err)
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out) > MaxPayloadSize {
		return nil, newPayloadError(subject, ErrPayloadTooLarge,
			fmt.Errorf("%d bytes encoded, more than the limit of %d", len(out), MaxPayloadSize))
	}
	return out, nil
}
