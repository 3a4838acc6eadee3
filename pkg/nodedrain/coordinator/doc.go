// Package coordinator drains nodes on request (DESIGN §3): it watches NodeDrainRequests on the
// bus, runs each node's drain through the pure state machine of package nodedrain, performs the
// machine's actions against Kubernetes (cordon, volume gate, eviction, uncordon), and publishes
// every NodeDrainStatus. One Engine is active per cluster (RunWithLeaderElection).
//
// The layers, as in etcd's raft: nodedrain.Step decides one drain (pure); Core holds every
// node's drain and admission, still without I/O (core.go); Engine is the I/O loop that feeds
// Core events and carries out what it decides (engine.go, exec.go).
//
// One request, followed through the files:
//
//	requests.go     a change of the node's request key enters (requestEvent), copies are told
//	                from the agent's own writes, and the drain is stepped (EvRequest)
//	core.go         Core.Handle runs nodedrain.Step and returns the node's actions
//	admission.go    after every event: the maintenance policy is asked, waiting drains admitted
//	exec.go         each Start runs in its own goroutine: cordon.go, evict.go, checks.go
//	                (volume gate, policy blockers, cordon check, return check), decommission.go
//	statuses.go     each Publish is signed and written, fenced (fence.go) by the leader only
//	engine.go       the loop: bus watches, informers, timers, results posted back as events
//
// Around it: leader.go and outage.go (who may act, and the API-outage mode), condition.go and
// lifecycle.go (the Node conditions), evictionrequest*.go (KEP-4563), rebooted.go, stranded.go,
// vanished.go and landed.go (a node that went down, a cordon left behind, a Node deleted, a
// COMPLETE already written), metrics.go.
package coordinator
