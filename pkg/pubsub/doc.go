// Package pubsub publishes keyed, last-value records over NATS JetStream
// key-value buckets and runs an embedded NATS server for single machines and
// tests.
//
// A Bucket[T] holds one typed value per key. Publish and Unpublish write a
// key's value or remove it; Get reads one key; Watch delivers the current
// value of every key, then one EventSnapshotDone marker, then every change in
// order (a value overwritten before a watcher received it may be skipped:
// the latest value of every key always arrives). Watchers ride out NATS
// reconnects and server restarts: after the connection comes back they resume
// after the last revision they delivered, so nothing is lost and nothing is
// delivered twice.
//
// The package knows nothing about what the values mean.
package pubsub
