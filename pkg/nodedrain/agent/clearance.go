package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Clearance says what let the current operation run: the coordinator's status on the bus
// (COMPLETE, or NOTSUPPORTED) or an operator's override file giving one. The zero value: nothing
// has cleared it.
//
// In the state file it is the text it always was ("COMPLETE", "NOTSUPPORTED", "override
// COMPLETE"), so a file an older agent wrote reads the same, and an older agent reads ours.
type Clearance struct {
	Status   nodedrain.DrainStatus
	Override bool
}

// Cleared reports whether anything has cleared the operation.
func (c Clearance) Cleared() bool { return c.Status != nodedrain.StatusUnknown }

// String is the clearance as people read it, and as the state file holds it.
func (c Clearance) String() string {
	switch {
	case !c.Cleared():
		return ""
	case c.Override:
		return "override " + c.Status.String()
	}
	return c.Status.String()
}

const overridePrefix = "override "

// MarshalJSON writes the clearance as its text.
func (c Clearance) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// UnmarshalJSON reads the text MarshalJSON writes; anything else is an error (a state file the
// agent cannot act on safely).
func (c *Clearance) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("clearedBy: %w", err)
	}
	*c = Clearance{}
	if s == "" {
		return nil
	}
	if rest, ok := strings.CutPrefix(s, overridePrefix); ok {
		c.Override, s = true, rest
	}
	st, err := nodedrain.ParseDrainStatus(s)
	if err != nil || !st.Clears() {
		return fmt.Errorf("clearedBy %s: not COMPLETE or NOTSUPPORTED, from the bus or an override", data)
	}
	c.Status = st
	return nil
}
