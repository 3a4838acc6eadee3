package coordinator

import (
	"fmt"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Window is a maintenance window (pkg/policy's Window implements it).
type Window interface {
	// Open reports whether the window is open at now; when closed, next is when it opens.
	Open(now time.Time) (open bool, next time.Time)
	String() string
}

// Preflight says what a pre-flight prediction that something would block does.
type Preflight int

const (
	// PreflightOff predicts nothing.
	PreflightOff Preflight = iota
	// PreflightWarn publishes the prediction with REQUESTED and starts the drain anyway.
	PreflightWarn
	// PreflightHold keeps the drain REQUESTED until the prediction is clear.
	PreflightHold
)

// ParsePreflight parses --preflight's value: off, warn or hold.
func ParsePreflight(s string) (Preflight, error) {
	switch s {
	case "off":
		return PreflightOff, nil
	case "warn":
		return PreflightWarn, nil
	case "hold":
		return PreflightHold, nil
	}
	return PreflightOff, fmt.Errorf("pre-flight mode %q: want off, warn or hold", s)
}

func (p Preflight) String() string {
	return [...]string{"off", "warn", "hold"}[p]
}

// Verdict is the latest background check of a waiting drain: the maintenance policy's blockers
// on its node and the pre-flight prediction.
type Verdict struct {
	RequestID string
	// Generation is the policy's generation the check was made under: after a change of the
	// policy, older verdicts do not count.
	Generation uint64
	// At is when the check ran.
	At time.Time
	// Blockers are the policy's blockers (pods matching its selector, Prometheus alerts and
	// queries); Err says the check failed (admission fails closed).
	Blockers []nodedrain.Blocker
	Err      error
	// Predicted is what the pre-flight predicts would block the drain.
	Predicted []nodedrain.Blocker
}

// HoldInput is what DecideHolds decides from.
type HoldInput struct {
	Waiting []Waiting
	Now     time.Time
	// Window returns a requester's window; nil: always open.
	Window func(nodedrain.Requester) Window
	// NeedsCheck says admission needs a fresh Verdict (blockers configured or pre-flight on).
	NeedsCheck bool
	Verdicts   map[string]Verdict
	// MaxAge is how old a Verdict may be when a drain is admitted on it.
	MaxAge time.Duration
	// Generation is the policy's generation now (see Verdict.Generation).
	Generation uint64
	Preflight  Preflight
	// Invalid, when set, is why the policy cannot be used (invalid, and no valid one was ever
	// read): every admission is held until it is fixed.
	Invalid error
}

// DecideHolds applies the maintenance policy to the waiting drains: a closed window, a check
// not yet done (or too old), blockers, a failed check (fail closed) and, with PreflightHold, a
// prediction that something would block keep a drain REQUESTED with the reason; with
// PreflightWarn the prediction is a warning published before admission.
func DecideHolds(in HoldInput) AdmissionVerdict {
	out := AdmissionVerdict{Holds: map[string]nodedrain.Hold{}, Warnings: map[string]nodedrain.Hold{}}
	for _, w := range in.Waiting {
		if h, held := decideOne(in, w); held {
			out.Holds[w.Node] = h
			continue
		}
		if v, ok := in.Verdicts[w.Node]; ok && in.Preflight == PreflightWarn && len(v.Predicted) > 0 {
			out.Warnings[w.Node] = nodedrain.Hold{Reason: "preflight", Blockers: v.Predicted, Message: fmt.Sprintf(
				"pre-flight predicts %d blocker(s) for this drain; starting anyway (--preflight=warn)", len(v.Predicted))}
		}
	}
	return out
}

func decideOne(in HoldInput, w Waiting) (nodedrain.Hold, bool) {
	if in.Invalid != nil {
		return nodedrain.Hold{Reason: "policy-invalid", Message: fmt.Sprintf(
			"waiting: the maintenance policy cannot be used (%v); admissions are held until it is fixed", in.Invalid)}, true
	}
	if in.Window != nil {
		win := in.Window(w.Request.RequestedBy)
		if open, next := win.Open(in.Now); !open {
			return nodedrain.Hold{Reason: "window", Message: fmt.Sprintf(
				"waiting: the %s maintenance window (%s) is closed; it opens at %s (in %s)", w.Request.RequestedBy, win,
				next.Format("Mon 2006-01-02 15:04 MST"), next.Sub(in.Now).Round(time.Minute))}, true
		}
	}
	if !in.NeedsCheck {
		return nodedrain.Hold{}, false
	}
	v, ok := in.Verdicts[w.Node]
	switch {
	case !ok || v.RequestID != w.Request.RequestID || v.Generation != in.Generation || in.Now.Sub(v.At) > in.MaxAge:
		return nodedrain.Hold{Reason: "checking", Message: "waiting: checking the maintenance policy's blockers and the pre-flight prediction"}, true
	case v.Err != nil:
		return nodedrain.Hold{Reason: "blockers", Message: fmt.Sprintf(
			"waiting: cannot check the maintenance policy, failing closed: %v", v.Err)}, true
	case len(v.Blockers) > 0:
		return nodedrain.Hold{Reason: "blockers", Blockers: v.Blockers, Message: fmt.Sprintf(
			"waiting: %d blocker(s) of the maintenance policy", len(v.Blockers))}, true
	case in.Preflight == PreflightHold && len(v.Predicted) > 0:
		return nodedrain.Hold{Reason: "preflight", Blockers: v.Predicted, Message: fmt.Sprintf(
			"waiting: pre-flight predicts %d blocker(s) for this drain (--preflight=hold)", len(v.Predicted))}, true
	}
	return nodedrain.Hold{}, false
}
