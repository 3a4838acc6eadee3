package nodedrain

import "strconv"

// DrainStatus is the state of a node's drain as published by the coordinator;
// its numbers are part of the wire contract and never change.
type DrainStatus int

// The drain states of DESIGN §1, with their fixed numbers.
const (
	// StatusUnknown means no status has been seen yet (agent start-up).
	StatusUnknown DrainStatus = 0
	// StatusNotSupported means drains are not possible here; the agent proceeds at once.
	StatusNotSupported DrainStatus = 1
	// StatusNotRequested means the coordinator is idle and ready to accept a request.
	StatusNotRequested DrainStatus = 2
	// StatusRequested means the request is accepted and queued.
	StatusRequested DrainStatus = 3
	// StatusStarting means this node's drain has started.
	StatusStarting DrainStatus = 4
	// StatusCordoned means the node is unschedulable; volume gate and eviction are under way.
	StatusCordoned DrainStatus = 5
	// StatusFailedCordon means the cordon failed after all retries.
	StatusFailedCordon DrainStatus = 6
	// StatusDrainRetrying means an eviction attempt failed and another will follow.
	StatusDrainRetrying DrainStatus = 7
	// StatusFailedDrain means all eviction attempts failed.
	StatusFailedDrain DrainStatus = 8
	// StatusComplete means the node is empty and its volume data is safe: the operation may run.
	StatusComplete DrainStatus = 9
)

var statusSpec = newEnumSpec("DrainStatus", ErrUnknownStatus, 0, []string{
	"UNKNOWN", "NOTSUPPORTED", "NOTREQUESTED", "REQUESTED", "STARTING",
	"CORDONED", "FAILEDCORDON", "DRAINRETRYING", "FAILEDDRAIN", "COMPLETE",
})

// String returns the status name, or "DrainStatus(n)" for a number outside the contract.
func (s DrainStatus) String() string { return statusSpec.String(int(s)) }

// IsValid reports whether s is one of the statuses 0..9.
func (s DrainStatus) IsValid() bool { return statusSpec.valid(int(s)) }

// Clears reports whether s lets the agent run its operation (COMPLETE or NOTSUPPORTED).
func (s DrainStatus) Clears() bool {
	return s == StatusComplete || s == StatusNotSupported
}

// Failed reports whether s is a final failure (FAILEDCORDON or FAILEDDRAIN).
func (s DrainStatus) Failed() bool {
	return s == StatusFailedCordon || s == StatusFailedDrain
}

// InProgress reports whether a drain is queued or running (REQUESTED,
// STARTING, CORDONED or DRAINRETRYING), so the operation stays deferred.
func (s DrainStatus) InProgress() bool {
	switch s {
	case StatusRequested, StatusStarting, StatusCordoned, StatusDrainRetrying:
		return true
	}
	return false
}

// ParseDrainStatus parses a status name (case-insensitive) or its decimal number.
func ParseDrainStatus(s string) (DrainStatus, error) {
	v, err := statusSpec.parse(s)
	return DrainStatus(v), err
}

// MarshalJSON writes the status as its JSON number, whatever its value;
// EncodeStatus and EncodeOverride validate before writing.
func (s DrainStatus) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, int64(s), 10), nil
}

// UnmarshalJSON accepts a JSON number 0..9 or a status name (or number) as a
// JSON string; JSON null leaves s unchanged; anything else is an error
// matching ErrUnknownStatus.
func (s *DrainStatus) UnmarshalJSON(data []byte) error {
	v, ok, err := statusSpec.unmarshalJSON(data)
	if ok {
		*s = DrainStatus(v)
	}
	return err
}

// MarshalText returns the status name; it fails for a number outside the contract.
func (s DrainStatus) MarshalText() ([]byte, error) { return statusSpec.marshalText(int(s)) }

// UnmarshalText parses a status name or number as ParseDrainStatus does.
func (s *DrainStatus) UnmarshalText(text []byte) error {
	v, err := ParseDrainStatus(string(text))
	if err == nil {
		*s = v
	}
	return err
}

// Requester says who asked for a drain; its numbers are part of the wire
// contract. The zero value means "not set" and is never valid on the wire.
type Requester int

// The requesters of DESIGN §1, with their fixed numbers.
const (
	// RequesterNone is a drain requested without a specific operation.
	RequesterNone Requester = 1
	// RequesterDeviceOp is a reboot, shutdown or power-off.
	RequesterDeviceOp Requester = 2
	// RequesterUpdate is an OS or base image update.
	RequesterUpdate Requester = 3
)

var requesterSpec = newEnumSpec("Requester", ErrUnknownRequester, 1, []string{
	"", "NONE", "DEVICEOP", "UPDATE",
})

// String returns the requester name, or "Requester(n)" for 0 and numbers outside the contract.
func (r Requester) String() string { return requesterSpec.String(int(r)) }

// IsValid reports whether r is one of the requesters 1..3; the unset zero value is not.
func (r Requester) IsValid() bool { return requesterSpec.valid(int(r)) }

// ParseRequester parses a requester name (case-insensitive) or its decimal number 1..3.
func ParseRequester(s string) (Requester, error) {
	v, err := requesterSpec.parse(s)
	return Requester(v), err
}

// MarshalJSON writes the requester as its JSON number, whatever its value;
// the Encode functions validate before writing.
func (r Requester) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, int64(r), 10), nil
}

// UnmarshalJSON accepts a JSON number 1..3 or a requester name (or number) as
// a JSON string; JSON null leaves r unchanged; anything else, including an
// explicit 0, is an error matching ErrUnknownRequester.
func (r *Requester) UnmarshalJSON(data []byte) error {
	v, ok, err := requesterSpec.unmarshalJSON(data)
	if ok {
		*r = Requester(v)
	}
	return err
}

// MarshalText returns the requester name; it fails for 0 and numbers outside the contract.
func (r Requester) MarshalText() ([]byte, error) { return requesterSpec.marshalText(int(r)) }

// UnmarshalText parses a requester name or number as ParseRequester does.
func (r *Requester) UnmarshalText(text []byte) error {
	v, err := ParseRequester(string(text))
	if err == nil {
		*r = v
	}
	return err
}
