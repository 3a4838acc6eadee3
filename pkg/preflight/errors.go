package preflight

import "errors"

// Sentinel errors of the package; test for them with errors.Is.
var (
	// ErrInvalidConfig is returned by Config.Validate and Predict for a configuration that cannot
	// predict anything.
	ErrInvalidConfig = errors.New("invalid pre-flight configuration")
	// ErrNodeNotFound is returned by Predict for a node the Kubernetes API does not know.
	ErrNodeNotFound = errors.New("node not found")
)
