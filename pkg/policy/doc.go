// Package policy is edgedrain's maintenance policy (DESIGN §9): when a node may be drained
// (maintenance windows per requester), what holds a drain back (pods matching a selector,
// Prometheus alerts and queries), and in which order waiting nodes go (priorities, failure
// domains never two at once).
//
// Operators write the policy as YAML under the key policy.yaml of a ConfigMap (by default
// edgedrain-system/edgedrain-policy; deploy/base/policy-configmap.example.yaml shows every
// field). Parse decodes it strictly: an unknown field, a value of the wrong type, an anchor or a
// second document is an error naming the field path. A Source watches the ConfigMap and keeps
// the last valid policy, so a bad edit never loosens or tightens what the coordinator enforces;
// the problem is reported in its State, the log, a Warning Event on the ConfigMap and the
// metric edgedrain_policy_config_valid. Without the ConfigMap there are no restrictions.
//
// A Window is a weekly schedule in one time zone. Open says whether it is open at an instant
// and, when it is closed, when it opens next; both follow the zone's daylight saving changes.
package policy
