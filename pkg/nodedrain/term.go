package nodedrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TermKey is the status bucket's key for the active coordinator's term record. It is no node
// name ('_' is not allowed in one); readers of statuses skip it.
const TermKey = "_coordinator"

// Term is what a coordinator writes under TermKey when it becomes active, before it acts. In a
// Kubernetes API outage a leader that lost its Lease keeps publishing only while nothing was
// written to the status bucket after its own last write (DESIGN §3): a newer term's record is
// such a write, so a coordinator that took over fences the one before.
type Term struct {
	// Coordinator is the replica's identity (its pod name).
	Coordinator string `json:"coordinator"`
	// Since is when it became active.
	Since time.Time `json:"since"`
	// KeyID names the key its statuses are signed with (nodedrain.KeyID): a replica started
	// with a key the others do not trust is told at start.
	KeyID string `json:"keyID,omitempty"`
}

// TermCodec encodes and strictly decodes Terms for a typed bus bucket.
type TermCodec struct{}

// Encode encodes t; it needs a coordinator name.
func (TermCodec) Encode(t Term) ([]byte, error) {
	if t.Coordinator == "" {
		return nil, errors.New("term: coordinator name is empty")
	}
	return json.Marshal(t)
}

// Decode strictly decodes a term record.
func (TermCodec) Decode(data []byte) (Term, error) {
	var t Term
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Term{}, fmt.Errorf("term: %w", err)
	}
	if t.Coordinator == "" {
		return Term{}, errors.New("term: coordinator name is empty")
	}
	return t, nil
}
