package nodedrain

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A node another writer has in maintenance (its MaintenancePlanned or MaintenanceInProgress
// condition) is not taken: its drain waits, saying whose condition holds it, and goes once the
// condition is cleared.
func TestANodeInAnothersMaintenanceWaits(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}
	ns := nodes("a", "b", "c")
	for _, o := range []OtherMaintenance{
		{Condition: "MaintenancePlanned", Reason: "FirmwareRollout", Message: "BIOS update on Friday"},
		{Condition: "MaintenanceInProgress", InProgress: true, Reason: "Remediation"},
	} {
		ns[0].Other = &o
		a := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2})
		assert.Empty(t, a.Admit, o.Condition)
		assert.Contains(t, a.Queued["a"], "the node's "+o.Condition+" condition was set by another writer (reason "+o.Reason)
		if o.Message != "" {
			assert.Contains(t, a.Queued["a"], `"BIOS update on Friday"`)
		}
	}
	ns[0].Other = nil
	a := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2})
	assert.Equal(t, []string{"a"}, a.Admit, "cleared: the drain goes")
}

// Another writer's maintenance in progress on one node takes a slot, as a drain of ours would:
// with one slot nothing of ours starts beside it; one that is only planned takes none.
func TestAnothersMaintenanceInProgressTakesASlot(t *testing.T) {
	drains := map[string]Drain{"a": drainIn(StatusRequested, "a", 0)}
	ns := nodes("a", "b", "c")
	ns[1].Other = &OtherMaintenance{Condition: "MaintenanceInProgress", InProgress: true, Reason: "KernelPatch"}
	a := AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 1})
	assert.Empty(t, a.Admit)
	assert.Equal(t, "waiting: b in maintenance (max-concurrent-drains 1) (in another writer's maintenance by its MaintenanceInProgress condition: b)", a.Queued["a"])

	a = AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2})
	assert.Equal(t, []string{"a"}, a.Admit, "a second slot is free")

	ns[1].Other = &OtherMaintenance{Condition: "MaintenancePlanned", Reason: "KernelPatch"}
	a = AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 1})
	assert.Equal(t, []string{"a"}, a.Admit, "a planned maintenance elsewhere takes no slot")

	// Its failure domain is in maintenance too.
	ns[1].Other = &OtherMaintenance{Condition: "MaintenanceInProgress", InProgress: true, Reason: "KernelPatch"}
	ns[0].Domain, ns[1].Domain = "rack-1", "rack-1"
	a = AdmitWith(AdmitInput{Drains: drains, Nodes: ns, MaxConcurrent: 2})
	assert.Empty(t, a.Admit)
	assert.Contains(t, a.Queued["a"], `b of the same failure domain "rack-1" in maintenance`)
}
