package volumes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

	assert.Equal(t, map[string]bool{"b": true}, l.StorageDisabled())
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
