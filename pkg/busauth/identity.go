package busauth

import (
	"fmt"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Role is what a bus client is.
type Role int

// The roles.
const (
	RoleAgent Role = iota + 1
	RoleOperator
	RoleCoordinator
)

func (r Role) String() string {
	switch r {
	case RoleAgent:
		return "agent"
	case RoleOperator:
		return "operator"
	case RoleCoordinator:
		return "coordinator"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Identity is an authenticated bus client.
type Identity struct {
	Role Role
	// Node is an agent's node, taken from its token's pod binding.
	Node string
	// Subject names the client in logs: the ServiceAccount and pod of an agent, the user name
	// of the others.
	Subject string
	// Expires is when the credential stops being valid (an agent's token); the server closes
	// the connection then and the client reconnects with its rotated token. Zero: never.
	Expires time.Time
}

func (id Identity) String() string {
	if id.Role == RoleAgent {
		return fmt.Sprintf("agent of node %s (%s)", id.Node, id.Subject)
	}
	return fmt.Sprintf("%s %s", id.Role, id.Subject)
}

// Permissions are the subjects a client may publish to and subscribe to; nil lists mean
// unrestricted (the coordinator only).
type Permissions struct {
	Publish, Subscribe []string
}

func stream(bucket string) string { return "KV_" + bucket }

func keySubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// PermissionsFor returns what id may do on the bus.
//
// An agent (each line is a JetStream API call nats.go makes for it):
//   - put and delete its node's request: publish to $KV.nodedrain-requests.<node>;
//   - find both buckets: STREAM.INFO of their streams (it waits while they do not exist);
//   - read its node's request and status: DIRECT.GET of that one subject (the buckets allow
//     direct gets);
//   - watch its node's status: CONSUMER.CREATE on the status stream whose subject names the
//     filter (the server checks that the consumer's filter is that subject), flow-control
//     replies of that stream, CONSUMER.DELETE of the status stream's consumers (their names
//     are random and cannot be listed: an agent can delete only the ones it made);
//   - receive replies only under its own inbox prefix.
//
// Nothing else: no other key, no status write, no stream administration or purge, no consumer
// listing.
// An operator reads every key of both buckets through consumers (not direct gets: their replies,
// the stored message itself, could be aimed at another key), watches them, and may put or delete
// any request
// (NATS cannot tell a delete from a put by subject; a forged request drains a node but never
// reboots it, since its agent ignores a status for a request it did not make).
func PermissionsFor(id Identity) Permissions {
	req, st := nodedrain.RequestsBucket, nodedrain.StatusBucket
	switch id.Role {
	case RoleAgent:
		return Permissions{
			Publish: []string{
				keySubject(req, id.Node),
				"$JS.API.STREAM.INFO." + stream(req),
				"$JS.API.STREAM.INFO." + stream(st),
				"$JS.API.DIRECT.GET." + stream(req) + "." + keySubject(req, id.Node),
				"$JS.API.DIRECT.GET." + stream(st) + "." + keySubject(st, id.Node),
				"$JS.API.CONSUMER.CREATE." + stream(st) + ".*." + keySubject(st, id.Node),
				// A watch deletes its consumer when it stops or replaces it (pubsub; else the
				// server keeps it until it is inactive); consumer names are random and no agent
				// may list them.
				"$JS.API.CONSUMER.DELETE." + stream(st) + ".*",
				"$JS.FC." + stream(st) + ".>",
			},
			Subscribe: []string{nodedrain.AgentInboxPrefix(id.Node) + ".>"},
		}
	case RoleOperator:
		var pub []string
		for _, b := range []string{req, st} {
			pub = append(pub,
				"$JS.API.STREAM.INFO."+stream(b),
				"$JS.API.CONSUMER.CREATE."+stream(b)+".>",
				"$JS.API.CONSUMER.DELETE."+stream(b)+".>",
				"$JS.FC."+stream(b)+".>")
		}
		return Permissions{Publish: append(pub, "$KV."+req+".>"), Subscribe: []string{"_INBOX.>"}}
	case RoleCoordinator:
		return Permissions{}
	}
	// Unknown roles get nothing (a deny-all list: an empty allow list would mean "anything").
	return Permissions{Publish: []string{"_edgedrain.nothing"}, Subscribe: []string{"_edgedrain.nothing"}}
}
