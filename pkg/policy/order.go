package policy

import (
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// MaxPriority bounds every priority in a policy: each lies within ±MaxPriority.
const MaxPriority = 1_000_000

// Order ranks the nodes waiting to be drained: higher Priority first, and never two nodes of
// one failure domain at once. The zero Order ranks every node 0 and has no failure domains.
type Order struct {
	// RequesterPriority is each requester's priority; absent: 0.
	RequesterPriority map[nodedrain.Requester]int
	// NodePriority gives nodes a priority by label; the first entry whose selector matches
	// wins; no match: 0.
	NodePriority []NodePriority
	// FailureDomainLabel is the node label naming a node's failure domain (such as
	// topology.kubernetes.io/zone); empty: no failure domains.
	FailureDomainLabel string
}

// NodePriority is the priority of the nodes a selector matches.
type NodePriority struct {
	// Selector matches node labels; never nil in a parsed policy (an empty selector in the
	// policy matches every node).
	Selector labels.Selector
	// Priority is added to the requester's priority.
	Priority int
}

// Priority returns the rank of a node with nodeLabels whose drain r requested: r's priority
// plus that of the first NodePriority matching the node. Higher goes first.
func (o Order) Priority(nodeLabels map[string]string, r nodedrain.Requester) int {
	p := o.RequesterPriority[r]
	set := labels.Set(nodeLabels)
	for _, np := range o.NodePriority {
		if np.Selector != nil && np.Selector.Matches(set) {
			return p + np.Priority
		}
	}
	return p
}

// Domain returns the failure domain of a node with nodeLabels: the value of
// FailureDomainLabel, or "" when failure domains are off or the node lacks the label (such a
// node shares a domain with no other).
func (o Order) Domain(nodeLabels map[string]string) string {
	if o.FailureDomainLabel == "" {
		return ""
	}
	return nodeLabels[o.FailureDomainLabel]
}

func decodeOrder(p *problems, path string, v any) Order {
	m := p.object(path, v, "requesterPriority", "nodePriority", "failureDomainLabel")
	var o Order
	rp := fieldPath(path, "requesterPriority")
	rpm := p.mapping(rp, m["requesterPriority"])
	for _, key := range sortedKeys(rpm) {
		kp := fieldPath(rp, key)
		r, ok := parseRequesterKey(key)
		if !ok {
			p.add(kp, "unknown requester (want one of %s)", requesterNames)
			continue
		}
		if _, dup := o.RequesterPriority[r]; dup {
			p.add(kp, "priority for %s given twice", r)
			continue
		}
		n, ok := p.integer(kp, rpm[key])
		if !ok {
			continue
		}
		if o.RequesterPriority == nil {
			o.RequesterPriority = map[nodedrain.Requester]int{}
		}
		o.RequesterPriority[r] = n
	}
	np := fieldPath(path, "nodePriority")
	for i, item := range p.list(np, m["nodePriority"]) {
		ip := itemPath(np, i)
		if item == nil {
			p.add(ip, "empty entry (want selector and priority)")
			continue
		}
		e := p.object(ip, item, "selector", "priority")
		entry := NodePriority{Selector: labels.Everything()}
		if s, ok := p.str(fieldPath(ip, "selector"), e["selector"]); ok {
			sel, err := labels.Parse(s)
			if err != nil {
				p.add(fieldPath(ip, "selector"), "invalid label selector %q: %v", s, err)
				continue
			}
			entry.Selector = sel
		} else if e["selector"] == nil {
			p.add(fieldPath(ip, "selector"), "required (\"\" matches every node)")
		}
		if n, ok := p.integer(fieldPath(ip, "priority"), e["priority"]); ok {
			entry.Priority = n
		} else if e["priority"] == nil {
			p.add(fieldPath(ip, "priority"), "required")
		}
		o.NodePriority = append(o.NodePriority, entry)
	}
	fp := fieldPath(path, "failureDomainLabel")
	if s, ok := p.str(fp, m["failureDomainLabel"]); ok && s != "" {
		if errs := validation.IsQualifiedName(s); len(errs) > 0 {
			p.add(fp, "%q is not a label key: %s", s, strings.Join(errs, "; "))
		} else {
			o.FailureDomainLabel = s
		}
	}
	return o
}
