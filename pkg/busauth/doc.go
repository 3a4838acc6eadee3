// Package busauth decides who may connect to the bus and what each may do there (DESIGN §10).
//
// Three identities exist. An agent proves the node it runs on with a projected, pod-bound
// ServiceAccount token of edgedrain's own audience, checked by TokenReview; it may write and
// delete only its node's request key and read only its node's status. The coordinator may do
// everything. An operator (people's tools, edgedrainctl) reads every key and may put or delete
// any request. Anonymous clients are refused. The same Authenticator serves the embedded server
// (in-process, as nats-server's custom client authentication) and an external NATS cluster
// (auth callout answered by the coordinator), so both grant exactly the same permissions.
package busauth
