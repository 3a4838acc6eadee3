// Package testenv gives tests real components: an embedded NATS server and a local Kubernetes control plane.
package testenv
