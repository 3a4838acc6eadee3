package volumes

import (
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Finding is a volume some rule warned about or blocked on.
type Finding struct {
	// Volume is the volume concerned.
	Volume *Volume
	// Rule is the name of the rule that decided.
	Rule string
	// Decision is the rule's verdict (Warn or Block), reason and progress.
	Decision Decision
}

// Evaluate runs the rules, in order, over each volume as seen in w, and returns what they warned
// about or blocked on. It is pure: no I/O, no clock.
func Evaluate(volumes []Volume, w *View, rules []Rule) []Finding {
	var out []Finding
	for i := range volumes {
		v := &volumes[i]
	rules:
		for _, rule := range rules {
			d := rule.Apply(v, w)
			switch d.Verdict {
			case Skip:
				break rules
			case Warn:
				out = append(out, Finding{Volume: v, Rule: rule.Name, Decision: d})
			case Block:
				out = append(out, Finding{Volume: v, Rule: rule.Name, Decision: d})
				break rules
			}
		}
	}
	return out
}

// Blocks reports whether any finding blocks.
func Blocks(findings []Finding) bool {
	for _, f := range findings {
		if f.Decision.Verdict == Block {
			return true
		}
	}
	return false
}

// Blocker returns the finding as a drain status blocker: the volume's name, its claim's
// namespace, and the reason (with the claim and the storage system named).
func (f Finding) Blocker() nodedrain.Blocker {
	reason := f.Decision.Reason
	if f.Decision.Verdict == Warn {
		reason = "not blocking: " + reason
	}
	return volumeBlocker(f.Volume.Source, f.Volume.Name, f.Volume.PVCNamespace, f.Volume.PVCName, reason, f.Decision.Progress)
}

// volumeBlocker builds a Volume blocker: Name is the volume (Longhorn volume or PV), Namespace
// the claim's namespace where known; the reason names the source and the claim.
func volumeBlocker(source, volume, pvcNamespace, pvcName, reason string, progress int) nodedrain.Blocker {
	prefix := source + " volume"
	if pvcName != "" {
		prefix += " (PVC " + pvcNamespace + "/" + pvcName + ")"
	}
	return nodedrain.Blocker{Kind: nodedrain.BlockerVolume, Namespace: pvcNamespace, Name: volume,
		Reason: prefix + ": " + reason, Progress: clampPercent(progress)}
}
