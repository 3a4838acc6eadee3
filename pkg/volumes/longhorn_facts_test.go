package volumes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestLonghornFacts(t *testing.T) {
	l := newLonghornFromObjects(
		lhVolume("pvc-1", 3, "attached", "shop", "data-db-0"),
		lhReplica("pvc-1-r-a", "pvc-1", "a", "healthy", "10.0.0.1"),
		lhReplica("pvc-1-r-b", "pvc-1", "b", "failed", "10.0.0.2"),
		lhReplica("pvc-1-r-c", "pvc-1", "c", "rebuilding", "10.0.0.3"),
		lhEngine("pvc-1", "a",
			map[string]string{"pvc-1-r-a": "10.0.0.1:10000", "pvc-1-r-c": "10.0.0.3:10000"},
			map[string]string{"pvc-1-r-a": "RW", "pvc-1-r-c": "WO"},
			rebuild{to: "10.0.0.3:10000", progress: 45, from: []string{"10.0.0.1:10000"}}),
		// A detached volume whose stopped replicas are intact; no PVC.
		lhVolume("vol-2", 2, "detached", "", ""),
		lhReplica("vol-2-r-a", "vol-2", "a", "stopped", "10.0.0.1"),
		lhReplica("vol-2-r-b", "vol-2", "b", "new", "10.0.0.2"),
		// A replica on another node only.
		lhReplica("vol-3-r-b", "vol-3", "b", "healthy", "10.0.0.2"),
		lhNode("a", true), lhNode("b", false),
	)
	vols, err := l.Volumes("a")
	require.NoError(t, err)
	require.Len(t, vols, 2, "volumes with a replica on a")

	v := vols[0]
	assert.Equal(t, "pvc-1", v.Name)
	assert.Equal(t, "shop/data-db-0", v.PVC())
	assert.Equal(t, 3, v.DesiredReplicas)
	assert.False(t, v.Detached)
	assert.Equal(t, []Replica{
		{Name: "pvc-1-r-a", Node: "a", Intact: true, Running: true},
		{Name: "pvc-1-r-b", Node: "b"},
		{Name: "pvc-1-r-c", Node: "c", Running: true, Rebuilding: true, Progress: 45, Sources: []string{"pvc-1-r-a"}},
	}, v.Replicas)

	v = vols[1]
	assert.Equal(t, "vol-2", v.Name)
	assert.Empty(t, v.PVC())
	assert.True(t, v.Detached)
	assert.Equal(t, []Replica{{Name: "vol-2-r-a", Node: "a", Intact: true}, {Name: "vol-2-r-b", Node: "b", Running: true}}, v.Replicas)

	assert.Equal(t, map[string]StorageNode{"a": {}, "b": {Unplaceable: "Longhorn scheduling disabled"}}, l.StorageNodes())
}

// What Longhorn's Nodes say, read as its scheduler and node controller read them.
func TestLonghornNodeFacts(t *testing.T) {
	set := func(u *unstructured.Unstructured, value any, path ...string) *unstructured.Unstructured {
		require.NoError(t, unstructured.SetNestedField(u.Object, value, path...))
		return u
	}
	notReady := lhNode("down", true)
	set(notReady, []any{map[string]any{"type": "Ready", "status": "False", "reason": "KubernetesNodeNotReady"}}, "status", "conditions")
	cordoned := lhNode("cordoned", true)
	set(cordoned, []any{map[string]any{"type": "Ready", "status": "True"},
		map[string]any{"type": "Schedulable", "status": "False", "reason": "KubernetesNodeCordoned"}}, "status", "conditions")
	evicting := set(lhNode("evicting", false), true, "spec", "evictionRequested")
	diskEvicting := lhNode("disk-evicting", true)
	disks, _, _ := unstructured.NestedMap(diskEvicting.Object, "spec", "disks")
	for name := range disks {
		set(diskEvicting, false, "spec", "disks", name, "allowScheduling")
		set(diskEvicting, true, "spec", "disks", name, "evictionRequested")
	}
	noDisks := set(lhNode("no-disks", true), map[string]any{}, "spec", "disks")
	zoned := set(lhNode("zoned", true), "z1", "status", "zone")
	pressure := lhNode("pressure", true)
	set(pressure, []any{map[string]any{"type": "Ready", "status": "False", "reason": "KubernetesNodePressure"}}, "status", "conditions")
	fresh := lhNode("fresh", true)
	delete(fresh.Object, "status")
	l := newLonghornFromObjects(notReady, cordoned, evicting, diskEvicting, noDisks, zoned, fresh, pressure)

	got := l.StorageNodes()
	assert.Equal(t, StorageNode{Unplaceable: "Longhorn node not Ready (KubernetesNodeNotReady)", Down: "Longhorn node not Ready (KubernetesNodeNotReady)"}, got["down"])
	assert.Equal(t, StorageNode{Unplaceable: "Longhorn node not Schedulable (KubernetesNodeCordoned)"}, got["cordoned"])
	assert.Equal(t, StorageNode{Unplaceable: "Longhorn scheduling disabled"}, got["evicting"])
	assert.Contains(t, got["disk-evicting"].Unplaceable, "no Longhorn disk takes replicas (default-disk-disk-evicting: scheduling disabled)")
	assert.Empty(t, got["disk-evicting"].Down, "its replicas still serve while they are moved")
	assert.Equal(t, StorageNode{Unplaceable: "no Longhorn disk"}, got["no-disks"])
	assert.Equal(t, StorageNode{Zone: "z1"}, got["zoned"])
	assert.Equal(t, StorageNode{Unplaceable: "Longhorn has not reported the node Ready"}, got["fresh"])
	assert.Equal(t, StorageNode{Unplaceable: "Longhorn node not Ready (KubernetesNodePressure)"}, got["pressure"],
		"its instance manager still serves the replicas there, as Longhorn's drain check counts them")
}

// Replica fields beyond health, and anti-affinity from the volume and Longhorn's Settings.
func TestLonghornReplicaStateAndAntiAffinity(t *testing.T) {
	inactive := lhReplica("v-r-b", "v", "b", "healthy", "10.0.0.2")
	require.NoError(t, unstructured.SetNestedField(inactive.Object, false, "spec", "active"))
	evicting := lhReplica("v-r-c", "v", "c", "healthy", "10.0.0.3")
	require.NoError(t, unstructured.SetNestedField(evicting.Object, true, "spec", "evictionRequested"))
	deleting := lhReplica("v-r-d", "v", "d", "healthy", "10.0.0.4")
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)
	zoneHard := lhVolume("w", 2, "attached", "", "")
	require.NoError(t, unstructured.SetNestedField(zoneHard.Object, "disabled", "spec", "replicaZoneSoftAntiAffinity"))
	l := newLonghornFromObjects(lhVolume("v", 3, "attached", "", ""), lhReplica("v-r-a", "v", "a", "healthy", "10.0.0.1"),
		inactive, evicting, deleting, zoneHard, lhReplica("w-r-a", "w", "a", "healthy", "10.0.0.1"))
	vols, err := l.Volumes("a")
	require.NoError(t, err)
	require.Len(t, vols, 2)
	v := vols[0]
	assert.Equal(t, []Replica{
		{Name: "v-r-a", Node: "a", Intact: true, Running: true},
		{Name: "v-r-b", Node: "b", Intact: true, Running: true, Inactive: true},
		{Name: "v-r-c", Node: "c", Intact: true, Running: true, Evicting: true},
		{Name: "v-r-d", Node: "d", Intact: true, Running: true, Deleting: true},
	}, v.Replicas)
	assert.False(t, v.SoftNodeAntiAffinity, "Longhorn's default: one replica a node")
	assert.False(t, v.HardZoneAntiAffinity, "Longhorn's default: zones are soft")
	assert.True(t, vols[1].HardZoneAntiAffinity, "the volume's own setting")

	require.NoError(t, l.settings.Add(lhSetting("replica-soft-anti-affinity", "true")))
	require.NoError(t, l.settings.Add(lhSetting("replica-zone-soft-anti-affinity", "false")))
	vols, err = l.Volumes("a")
	require.NoError(t, err)
	assert.True(t, vols[0].SoftNodeAntiAffinity)
	assert.True(t, vols[0].HardZoneAntiAffinity)
}

func TestLonghornFactsTolerateOddObjects(t *testing.T) {
	// Wrong types and missing fields are read as absent, never a panic.
	odd := lhReplica("r", "v", "a", "healthy", "")
	odd.Object["status"] = "not a map"
	eng := lhEngine("v", "a", nil, nil)
	_ = unstructured.SetNestedField(eng.Object, "not a map", "status", "rebuildStatus")
	_ = unstructured.SetNestedField(eng.Object, map[string]any{"r": int64(3)}, "status", "replicaModeMap")
	l := newLonghornFromObjects(odd, eng)
	vols, err := l.Volumes("a")
	require.NoError(t, err)
	require.Len(t, vols, 1)
	assert.Equal(t, []Replica{{Name: "r", Node: "a", Intact: true}}, vols[0].Replicas)
}

func TestLonghornRebuildKeyedByName(t *testing.T) {
	// Some Longhorn versions and tools key rebuildStatus by replica name; both are accepted.
	eng := lhEngine("v", "a", nil, map[string]string{"r-b": "WO"})
	_ = unstructured.SetNestedField(eng.Object, map[string]any{"r-b": map[string]any{"isRebuilding": true, "progress": int64(70),
		"fromReplicaAddress": "r-a"}}, "status", "rebuildStatus")
	l := newLonghornFromObjects(lhReplica("r-a", "v", "a", "healthy", "10.0.0.1"), lhReplica("r-b", "v", "b", "rebuilding", "10.0.0.2"), eng)
	vols, err := l.Volumes("a")
	require.NoError(t, err)
	require.Len(t, vols, 1)
	assert.Equal(t, Replica{Name: "r-b", Node: "b", Running: true, Rebuilding: true, Progress: 70, Sources: []string{"r-a"}}, vols[0].Replicas[1])
}
