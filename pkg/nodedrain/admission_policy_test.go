package nodedrain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestAdmitHeldDrainsWaitWithoutBlockingOthers(t *testing.T) {
	drains := map[string]Drain{
		"a": drainIn(StatusRequested, "a", 1*time.Second),
		"b": drainIn(StatusRequested, "b", 2*time.Second),
	}
	hold := Hold{Message: "waiting: maintenance window Sat 01:00-05:00 UTC opens at 2026-11-28T01:00:00Z",
		Blockers: []Blocker{{Kind: BlockerPod, Namespace: "x", Name: "batch", Reason: "matches the blocking pod selector"}}}
	a := AdmitWith(AdmitInput{Drains: drains, Nodes: nodes("a", "b", "c"), MaxConcurrent: 1, Holds: map[string]Hold{"a": hold}})
	assert.Equal(t, []string{"b"}, a.Admit, "the held older request does not block the next one")
	assert.Equal(t, hold, a.Held["a"])
	assert.NotContains(t, a.Queued, "a")
}

func TestAdmitByPriorityThenAge(t *testing.T) {
	drains := map[string]Drain{
		"cp":     drainIn(StatusRequested, "cp", 1*time.Second),
		"worker": drainIn(StatusRequested, "worker", 2*time.Second),
		"w2":     drainIn(StatusRequested, "w2", 3*time.Second),
	}
	ns := nodes("cp", "worker", "w2", "spare")
	ns[1].Priority, ns[2].Priority = 5, 5
	a := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 1})
	assert.Equal(t, []string{"worker"}, a.Admit, "higher priority first, then the oldest")
	assert.Contains(t, a.Queued["cp"], "queued behind w2")
}

func TestAdmitNeverTwoOfOneFailureDomain(t *testing.T) {
	drains := map[string]Drain{
		"a1": drainIn(StatusCordoned, "a1", 0),
		"a2": drainIn(StatusRequested, "a2", 1*time.Second),
		"b1": drainIn(StatusRequested, "b1", 2*time.Second),
		"b2": drainIn(StatusRequested, "b2", 3*time.Second),
	}
	ns := nodes("a1", "a2", "b1", "b2", "c1")
	for i, d := range []string{"zone-a", "zone-a", "zone-b", "zone-b", ""} {
		ns[i].Domain = d
	}
	a := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 3})
	assert.Equal(t, []string{"b1"}, a.Admit, "one node per domain, even within the limit")
	assert.Contains(t, a.Queued["a2"], `a1 of the same failure domain "zone-a"`)
	assert.Contains(t, a.Queued["b2"], `b1 of the same failure domain "zone-b"`)
}

func TestAdmitCountsReturningAndReleasedSlots(t *testing.T) {
	back := Drain{Status: NodeDrainStatus{Node: "a", Status: StatusNotRequested, RequestID: "a-r", ReturningSince: t0}}
	gone := drainIn(StatusComplete, "a", 0)
	gone.Status.SlotReleased = true
	for name, tc := range map[string]struct {
		d     Drain
		holds bool
	}{
		"returning holds its slot": {back, true},
		"released slot is free":    {gone, false},
	} {
		t.Run(name, func(t *testing.T) {
			drains := map[string]Drain{"a": tc.d, "b": drainIn(StatusRequested, "b", time.Second)}
			a := AdmitWith(AdmitInput{Drains: drains, Nodes: nodes("a", "b", "c"), MaxConcurrent: 1})
			if tc.holds {
				assert.Empty(t, a.Admit)
				assert.Contains(t, a.Queued["b"], "a in maintenance")
			} else {
				assert.Equal(t, []string{"b"}, a.Admit)
			}
		})
	}
}

func TestAdmitKnowsTheDomainOfAMissingHolder(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusComplete, "a", 0), "b": drainIn(StatusRequested, "b", time.Second)}
	ns := nodes("b", "c")
	ns[0].Domain, ns[1].Domain = "z1", "z2"
	in := AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2}
	assert.Empty(t, AdmitWith(in).Admit, "a's domain unknown (the coordinator restarted while it was gone): counted as b's (review 2)")
	in.Domains = map[string]string{"a": "z1"}
	a := AdmitWith(in)
	assert.Empty(t, a.Admit, "a (down, Node object missing) was in z1")
	assert.Contains(t, a.Queued["b"], "same failure domain")
	in.Domains = map[string]string{"a": "z2"}
	assert.Equal(t, []string{"b"}, AdmitWith(in).Admit, "a was in another domain")
}
