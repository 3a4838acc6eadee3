// Package agent is edgedrain's per-node agent (DESIGN §4): it notices that its node wants a
// reboot, shutdown, OS update or decommission (a sentinel file, or a local request over a unix
// socket), publishes a NodeDrainRequest on the bus, holds the operation back until the
// coordinator has drained the node (COMPLETE for that very request), runs the operation's
// command, and withdraws the request once the node is back (a new boot ID) so the coordinator
// uncordons it. An update that does not reboot, and a decommission (for which the coordinator
// deletes the Node object before COMPLETE), end when their command returns: the agent withdraws
// the request then, and the coordinator uncordons the node or, for a decommission, removes its
// keys from the bus.
//
// Its decisions are a pure state machine (Step), tested with tables of events; Agent is the
// runtime around it: one loop that feeds it bus events, file polls, command results and timers,
// performs its actions and keeps its State in a file that survives restarts. The agent speaks
// only NATS; it links no Kubernetes client.
package agent
