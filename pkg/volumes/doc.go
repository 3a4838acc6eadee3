// Package volumes is edgedrain's volume safety gate (DESIGN §5): it tells the coordinator whether
// a node may go down without taking with it data that nothing else has.
//
// The gate reads everything from informer caches, so that it answers quickly and still answers
// (with its last known view) when the Kubernetes API is unreachable:
//
//   - Replicated volumes come from Sources. Longhorn (longhorn.io/v1beta2 volumes, replicas,
//     engines and nodes, read through the dynamic client) is the built-in one; when its CRDs are
//     absent the gate says so once and allows. A Source turns its objects into storage-neutral
//     Volume facts, and an ordered list of small Rules (like kubectl's drain filters) decides, for
//     each volume, whether it blocks the node and why.
//   - Node-local volumes (PersistentVolumes with node affinity to the node) keep their data across
//     a reboot and never block by themselves; when a drainer Job template is configured for the
//     PVC (DrainerTemplateAnnotation on the PVC or on its StatefulSet) the gate runs that Job on
//     the node once its pods are gone, and blocks until it succeeded. Users write those
//     templates but the coordinator creates the Jobs, so a DrainerPolicy (Config.Drainers)
//     bounds them: nothing privileged, no host access, one ServiceAccount, allowed namespaces
//     only; a template asking for more is refused and blocks, with an Event on the PVC.
//   - Orphaned PVCs of a scaled-down StatefulSet get the same drainer Job from Gate.Run, the loop
//     the coordinator runs while it is the leader.
//
// Policy says what a blocking volume does: PolicyWait blocks, PolicyEvict also asks Longhorn to
// move the node's replicas away (undone by Release), PolicyAllow only reports.
package volumes
