package nodedrain

import "time"

// Limits of the wire contract, checked by Validate.
const (
	// MaxRequestIDLen is the longest RequestID, in bytes.
	MaxRequestIDLen = 128
	// MaxContextLen is the longest NodeDrainRequest.Context, in bytes.
	MaxContextLen = 1024
	// MaxBootIDLen is the longest NodeDrainRequest.BootID, in bytes.
	MaxBootIDLen = 256
	// MaxBlockers is the most blockers one NodeDrainStatus may carry.
	MaxBlockers = 1000
)

// maxSignatureField bounds SignedBy and Signature (an Ed25519 signature is 86 base64 bytes).
const maxSignatureField = 128

// Subjects used in error messages.
const (
	subjectRequest  = "drain request"
	subjectStatus   = "drain status"
	subjectOverride = "status override"
)

// NodeDrainRequest is what an agent publishes (key: its node name) to ask the
// coordinator to drain its node.
type NodeDrainRequest struct {
	Node        string    `json:"Node"`
	RequestID   string    `json:"RequestID"` // unique per request
	RequestedAt time.Time `json:"RequestedAt"`
	RequestedBy Requester `json:"RequestedBy"`
	Context     string    `json:"Context,omitempty"` // free text: "reboot", "update v1.2.3"
	// BootID is the boot ID of the machine when its agent made (or last published) the request
	// (optional). An agent that lost its state file withdraws a request naming another boot as
	// left from before its boot, whatever its clock now says of RequestedAt (a clock stepped
	// back since made such a request look made since the boot). The coordinator ignores it.
	BootID string `json:"BootID,omitempty"`
}

// Validate reports every way r breaks the contract, as one error matching ErrInvalid.
func (r NodeDrainRequest) Validate() error {
	var p problems
	checkNode(&p, r.Node)
	if r.RequestID == "" {
		p.addf("RequestID", "required")
	} else {
		checkRequestID(&p, r.RequestID)
	}
	if r.RequestedAt.IsZero() {
		p.addf("RequestedAt", "required")
	} else {
		checkTime(&p, "RequestedAt", r.RequestedAt)
	}
	if r.RequestedBy == 0 {
		p.addf("RequestedBy", "required (want %s)", requesterSpec.choices)
	} else if err := requesterSpec.checkValid(int(r.RequestedBy)); err != nil {
		p.add("RequestedBy", err)
	}
	if len(r.Context) > MaxContextLen {
		p.addf("Context", "%d bytes, longer than the limit of %d", len(r.Context), MaxContextLen)
	}
	if len(r.BootID) > MaxBootIDLen {
		p.addf("BootID", "%d bytes, longer than the limit of %d", len(r.BootID), MaxBootIDLen)
	}
	return p.err(subjectRequest)
}

// BlockerKind says what kind of object holds a drain back.
type BlockerKind string

// Blocker kinds the coordinator reports; decoders accept other non-empty
// kinds so that a newer coordinator may add some.
const (
	// BlockerPod is a pod that refuses eviction.
	BlockerPod BlockerKind = "Pod"
	// BlockerVolume is a volume whose data is not yet safe elsewhere.
	BlockerVolume BlockerKind = "Volume"
	// BlockerNode is a node that is not back yet (the return gate).
	BlockerNode BlockerKind = "Node"
)

// Blocker is one object that holds a drain back, with the reason.
type Blocker struct {
	Kind      BlockerKind `json:"Kind"`
	Namespace string      `json:"Namespace,omitempty"`
	Name      string      `json:"Name"`
	Reason    string      `json:"Reason"`
	Progress  int         `json:"Progress,omitempty"` // percent 0..100 where meaningful (rebuild), else 0
}

// validate adds b's problems to p under the field path prefix.
func (b Blocker) validate(p *problems, prefix string) {
	if b.Kind == "" {
		p.addf(prefix+".Kind", "required")
	}
	if b.Name == "" {
		p.addf(prefix+".Name", "required")
	}
	if b.Reason == "" {
		p.addf(prefix+".Reason", "required")
	}
	if b.Progress < 0 || b.Progress > 100 {
		p.addf(prefix+".Progress", "%d is outside 0..100", b.Progress)
	}
}

// NodeDrainStatus is what the coordinator publishes (key: node name) at every
// step of a node's drain.
type NodeDrainStatus struct {
	Node         string      `json:"Node"`
	RequestID    string      `json:"RequestID,omitempty"` // the request this answers
	Status       DrainStatus `json:"Status"`
	RequestedBy  Requester   `json:"RequestedBy,omitempty"`
	Attempt      int         `json:"Attempt,omitempty"`
	Message      string      `json:"Message,omitempty"`
	Blockers     []Blocker   `json:"Blockers,omitempty"`
	StartedAt    time.Time   `json:"StartedAt,omitzero"`
	UpdatedAt    time.Time   `json:"UpdatedAt,omitzero"`
	CordonedByUs bool        `json:"CordonedByUs,omitempty"` // the coordinator cordoned the node itself
	// ReturningSince is set (on NOTREQUESTED) while the node, back from its operation, still
	// holds its admission slot until it is healthy again (the return gate, DESIGN §9).
	ReturningSince time.Time `json:"ReturningSince,omitzero"`
	// SlotReleased is set (on COMPLETE) when the node never came back (deleted, or NotReady for
	// too long) and its admission slot was released; the message says why. A decommission's
	// CORDONED keeps it while the drain checks again after its COMPLETE could not be published
	// (its Node object was deleted).
	SlotReleased bool `json:"SlotReleased,omitempty"`
	// DeclaredShutdown says the request declared a planned whole-cluster shutdown (its node
	// has no return gate), so that a coordinator resuming after the request is gone knows.
	DeclaredShutdown bool `json:"DeclaredShutdown,omitempty"`
	// Decommission says the request asked for a decommission (DeclaresDecommission): on
	// COMPLETE the node's Node object has been deleted and the node holds no admission slot.
	Decommission bool `json:"Decommission,omitempty"`
	// CompleteSent says a COMPLETE of this request was sent whose publication failed: it may
	// have landed all the same (a lost reply) and the node gone down on it, so a withdrawal
	// starts the return gate as after a COMPLETE (also for a coordinator resuming later).
	CompleteSent bool `json:"CompleteSent,omitempty"`
	// APIUnreachable is set on a COMPLETE of the API-unreachable rule: the coordinator could not
	// reach the Kubernetes API for --api-unreachable-timeout and let the operation run without
	// finishing the drain. An agent whose node reaches the API does not act on it: the outage is
	// the coordinator's alone, and the drain can finish once it is over.
	APIUnreachable bool `json:"APIUnreachable,omitempty"`
	// Term and Seq order the coordinator's statuses: Term is the bus revision of the term record
	// of the coordinator run that published it (a later run has a higher one), Seq counts that
	// run's publications. An agent refuses a status older than one it already accepted.
	Term int `json:"Term,omitempty"`
	Seq  int `json:"Seq,omitempty"`
	// SignedBy names the key (KeyID) whose Signature covers every other field and the key the
	// status is stored under (DESIGN §10); agents act on no status that does not verify.
	SignedBy  string `json:"SignedBy,omitempty"`
	Signature string `json:"Signature,omitempty"`
}

// RequestOf is the request st answers, as far as the status tells (a coordinator resuming
// without the request itself); context says where it comes from, after the declaration of a
// whole-cluster shutdown if st records one.
func RequestOf(st NodeDrainStatus, context string) *NodeDrainRequest {
	at := st.StartedAt
	if at.IsZero() {
		at = st.UpdatedAt
	}
	switch {
	case st.DeclaredShutdown:
		context = ClusterShutdownContext + " " + context
	case st.Decommission:
		context = DecommissionContext + " " + context
	}
	return &NodeDrainRequest{Node: st.Node, RequestID: st.RequestID, RequestedAt: at, RequestedBy: st.RequestedBy, Context: context}
}

// HoldsSlot reports whether this status alone shows the node holding an admission slot: a drain
// under way, or back from its operation and not yet healthy (the return gate). A COMPLETE node
// holds one too until it is back, which the status cannot show: admission's holdsSlot, which
// knows the request and the node's readiness, is the whole rule.
func (s NodeDrainStatus) HoldsSlot() bool { return s.Status.draining() || !s.ReturningSince.IsZero() }

// Validate reports every way s breaks the contract, as one error matching ErrInvalid.
func (s NodeDrainStatus) Validate() error {
	var p problems
	checkNode(&p, s.Node)
	if s.RequestID != "" {
		checkRequestID(&p, s.RequestID)
	}
	if err := statusSpec.checkValid(int(s.Status)); err != nil {
		p.add("Status", err)
	}
	if s.RequestedBy != 0 {
		if err := requesterSpec.checkValid(int(s.RequestedBy)); err != nil {
			p.add("RequestedBy", err)
		}
	}
	checkTime(&p, "StartedAt", s.StartedAt)
	checkTime(&p, "UpdatedAt", s.UpdatedAt)
	checkTime(&p, "ReturningSince", s.ReturningSince)
	if s.Attempt < 0 {
		p.addf("Attempt", "%d is negative", s.Attempt)
	}
	if s.Term < 0 || s.Seq < 0 {
		p.addf("Term", "term %d and sequence %d must not be negative", s.Term, s.Seq)
	}
	if len(s.SignedBy) > maxSignatureField || len(s.Signature) > maxSignatureField {
		p.addf("Signature", "longer than %d bytes", maxSignatureField)
	}
	if len(s.Blockers) > MaxBlockers {
		p.addf("Blockers", "%d blockers, more than the limit of %d", len(s.Blockers), MaxBlockers)
	} else {
		for i, b := range s.Blockers {
			b.validate(&p, blockerPath(i))
		}
	}
	return p.err(subjectStatus)
}

// StatusOverride is the forced-status file of DESIGN §4, e.g.
// {"Status":9,"RequestedBy":2}; DecodeOverride requires the Status key.
type StatusOverride struct {
	Status      DrainStatus `json:"Status"`
	RequestedBy Requester   `json:"RequestedBy,omitempty"`
}

// Validate reports every way o breaks the contract, as one error matching ErrInvalid.
func (o StatusOverride) Validate() error {
	var p problems
	if err := statusSpec.checkValid(int(o.Status)); err != nil {
		p.add("Status", err)
	}
	if o.RequestedBy != 0 {
		if err := requesterSpec.checkValid(int(o.RequestedBy)); err != nil {
			p.add("RequestedBy", err)
		}
	}
	return p.err(subjectOverride)
}
