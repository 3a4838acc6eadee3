package volumes

import "errors"

// Sentinel errors of the package; test for them with errors.Is.
var (
	// ErrInvalidConfig is returned by Config.Validate and New for a configuration the gate
	// cannot run with.
	ErrInvalidConfig = errors.New("invalid volume gate configuration")
	// ErrInvalidPolicy is returned by ParsePolicy for a name that is not a policy.
	ErrInvalidPolicy = errors.New("invalid volume policy")
	// ErrInvalidTemplate is returned by ParseDrainerTemplate for a drainer Job template that
	// does not decode or cannot run.
	ErrInvalidTemplate = errors.New("invalid drainer template")
	// ErrTemplateRefused is returned by DrainerPolicy.Admit for a drainer template that asks for
	// more than the operator allowed (privileges, host access, another ServiceAccount), and for a
	// drainer in a namespace the operator did not allow.
	ErrTemplateRefused = errors.New("drainer template refused")
	// ErrNotStarted is returned by Check, Run, Release and Held before Start succeeded.
	ErrNotStarted = errors.New("volume gate not started")
	// ErrAlreadyStarted is returned by a second call of Start.
	ErrAlreadyStarted = errors.New("volume gate already started")
	// ErrNotSynced is returned by Start when the caches do not fill within Config.SyncTimeout.
	ErrNotSynced = errors.New("volume gate caches not synced")
)
