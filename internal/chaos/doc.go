// Package chaos runs the real programs — coordinator replicas, agents, a three-server NATS
// cluster, the local control plane with kwok nodes — under random real faults drawn from a seed,
// records what they did (a history), and judges afterwards, from the history alone, whether the
// invariants of docs/design.md held: the simulation runs the real decision code, this runs the
// real processes, whose timing and I/O no model covers. The harness is a test (chaos_test.go,
// guarded by the local cluster: `go test -short` skips it); `make chaos DURATION=30m SEED=...`
// runs a long one.
package chaos
