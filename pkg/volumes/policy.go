package volumes

import (
	"fmt"
	"strings"
)

// Policy says what the gate does about a volume that is not safe (--volume-policy).
type Policy int

// The policies; the zero value is PolicyWait, the default.
const (
	// PolicyWait blocks the drain until every volume is safe.
	PolicyWait Policy = iota
	// PolicyEvict asks the storage system to move the node's replicas away (Longhorn: the node's
	// spec.evictionRequested, with its scheduling disabled as Longhorn requires), then blocks
	// until replacements are healthy on other nodes. Release undoes the request.
	PolicyEvict
	// PolicyAllow never blocks; volumes that are not safe are still reported.
	PolicyAllow
)

var policyNames = [...]string{"wait", "evict", "allow"}

// ParsePolicy returns the policy named s ("wait", "evict" or "allow", any case).
func ParsePolicy(s string) (Policy, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for i, n := range policyNames {
		if n == name {
			return Policy(i), nil
		}
	}
	return PolicyWait, fmt.Errorf("%w %q: want one of %s", ErrInvalidPolicy, s, strings.Join(policyNames[:], ", "))
}

// String returns the policy's name as ParsePolicy accepts it.
func (p Policy) String() string {
	if p >= 0 && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Set parses s into p, so that a Policy can be a command-line flag (flag.Value).
func (p *Policy) Set(s string) error {
	v, err := ParsePolicy(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Valid reports whether p is one of the defined policies.
func (p Policy) Valid() bool { return p >= PolicyWait && p <= PolicyAllow }
