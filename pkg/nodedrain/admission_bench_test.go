package nodedrain

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// BenchmarkAdmit is one admission pass of a fleet in rolling maintenance: every node has asked,
// max-concurrent-drains 10 of them hold a slot, the rest wait (the goal: under 10 ms
// at 1000 nodes; the coordinator runs one pass after every event).
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			drains := make(map[string]Drain, n)
			names := make([]string, n)
			for i := range n {
				names[i] = fmt.Sprintf("node-%04d", i)
				st := StatusRequested
				if i < 10 {
					st = StatusCordoned
				}
				drains[names[i]] = drainIn(st, names[i], time.Duration(i)*time.Millisecond)
			}
			ns := nodes(names...)
			b.ReportAllocs()
			for b.Loop() {
				if a := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 10}); len(a.Admit) != 0 || len(a.Queued) != n-10 {
					b.Fatalf("admitted %d, queued %d", len(a.Admit), len(a.Queued))
				}
			}
		})
	}
}

// A drain far back in the queue keeps its message as the queue moves: the coordinator
// republishes a status only when it changes, so one admission must not change every waiting
// node's message (messages per drain would grow with the fleet).
func TestQueuedMessageStableFarBack(t *testing.T) {
	drains := map[string]Drain{}
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("n%02d", i)
		names = append(names, name)
		st := StatusRequested
		if i < 2 {
			st = StatusCordoned
		}
		drains[name] = drainIn(st, name, time.Duration(i)*time.Second)
	}
	ns := nodes(names...)
	before := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2}).Queued
	assert.Equal(t, "waiting: n00, n01 in maintenance (max-concurrent-drains 2); queued behind n02, n03", before["n04"])
	assert.Equal(t, "waiting: max-concurrent-drains 2 reached; queued behind 4 or more earlier drains", before["n06"])

	// n00 is done; n02 takes its slot.
	delete(drains, "n00")
	d := drains["n02"]
	d.Status.Status = StatusCordoned
	drains["n02"] = d
	after := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2}).Queued
	changed := 0
	for name, msg := range after {
		if before[name] != msg {
			changed++
		}
	}
	assert.Equal(t, namedAhead+1, changed, "only the drains near the head name what changed")
	assert.Equal(t, before["n19"], after["n19"])
}
