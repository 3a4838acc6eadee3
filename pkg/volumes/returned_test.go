package volumes

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

func TestReturnCheckFacts(t *testing.T) {
	healthy := func(name, node string) Replica {
		return Replica{Name: name, Node: node, Intact: true, Running: true}
	}
	tests := []struct {
		name     string
		vol      Volume
		want     []string
		progress int
	}{
		{name: "all healthy", vol: Volume{DesiredReplicas: 2, Replicas: []Replica{healthy("a", "back"), healthy("b", "other")}}},
		{name: "detached, stopped", vol: Volume{DesiredReplicas: 2, Detached: true,
			Replicas: []Replica{{Name: "a", Node: "back", Intact: true}, {Name: "b", Node: "other", Intact: true}}}},
		{name: "rebuilding here", vol: Volume{DesiredReplicas: 2, Replicas: []Replica{
			{Name: "a", Node: "back", Running: true, Rebuilding: true, Progress: 45}, healthy("b", "other")}},
			want: []string{"replica a on this node rebuilding 45%", "volume degraded: 1 of 2 replicas healthy"}, progress: 45},
		{name: "failed here", vol: Volume{DesiredReplicas: 2, Replicas: []Replica{{Name: "a", Node: "back"}, healthy("b", "other")}},
			want: []string{"replica a on this node not healthy (failed, or not rebuilt yet)", "volume degraded: 1 of 2 replicas healthy"}},
		{name: "stopped here while attached", vol: Volume{DesiredReplicas: 2, Replicas: []Replica{
			{Name: "a", Node: "back", Intact: true}, healthy("b", "other")}},
			want: []string{"replica a on this node stopped while the volume is attached", "volume degraded: 1 of 2 replicas healthy"}},
		{name: "degraded elsewhere", vol: Volume{DesiredReplicas: 3, Replicas: []Replica{
			healthy("a", "back"), healthy("b", "other"), {Name: "c", Node: "third", Running: true, Rebuilding: true, Progress: 120}}},
			want: []string{"volume degraded: 2 of 3 replicas healthy"}, progress: 100},
		{name: "fewer replicas than wanted", vol: Volume{DesiredReplicas: 3, Replicas: []Replica{healthy("a", "back"), healthy("b", "other")}},
			want: []string{"volume degraded: 2 of 3 replicas healthy"}},
		{name: "count unknown: every replica", vol: Volume{Replicas: []Replica{healthy("a", "back"), {Name: "b", Node: "other"}}},
			want: []string{"volume degraded: 1 of 2 replicas healthy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, progress := notHealthyAgain(&tt.vol, "back")
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.progress, progress)
		})
	}
}

// A node back from maintenance: its Longhorn replicas not healthy again, and their volumes
// still degraded, are listed until Longhorn has rebuilt them.
func TestReturnCheckLonghorn(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	nodes := c.AddNodes(t, "back", 3)
	g := startGate(t, c, nil)
	rebuilding := volumeOn{name: "vol-back-rebuild", nodes: nodes, state: []replicaState{"rebuilding", "healthy", "healthy"}}
	rebuilding.rebs = []rebuild{{to: rebuilding.addr(0), progress: 45, from: []string{rebuilding.addr(1)}}}
	failed := volumeOn{name: "vol-back-failed", nodes: nodes[:2], state: []replicaState{"failed", "healthy"}}
	stopped := volumeOn{name: "vol-back-stopped", nodes: nodes[:2], state: []replicaState{"stopped", "healthy"}}
	degraded := volumeOn{name: "vol-back-degraded", nodes: nodes[:2], state: []replicaState{"healthy", "failed"}}
	fine := volumeOn{name: "vol-back-fine", nodes: nodes[:2], state: []replicaState{"healthy", "healthy"}}
	var objs []*unstructured.Unstructured
	for _, v := range []volumeOn{rebuilding, failed, stopped, degraded, fine} {
		objs = append(objs, v.objects()...)
	}
	// A detached volume: Longhorn stops its replicas, which still hold its data.
	objs = append(objs, lhVolume("vol-back-detached", 2, "detached", "shop", "data-detached"),
		lhReplica("vol-back-detached-r-0", "vol-back-detached", nodes[0], "stopped", "10.2.0.1"),
		lhReplica("vol-back-detached-r-1", "vol-back-detached", nodes[1], "stopped", "10.2.0.2"))
	applyLonghorn(t, c.Dynamic, objs...)

	var got []nodedrain.Blocker
	require.Eventually(t, func() bool {
		var err error
		got, err = g.ReturnCheck(context.Background(), nodes[0])
		return err == nil && len(got) == 4
	}, 30*time.Second, 50*time.Millisecond, "four volumes not healthy again: %+v", got)
	blocker := func(vol, reason string, progress int) nodedrain.Blocker {
		return nodedrain.Blocker{Kind: nodedrain.BlockerVolume, Namespace: "shop", Name: vol, Progress: progress,
			Reason: "longhorn volume (PVC shop/data-" + vol + "): " + reason}
	}
	assert.Equal(t, []nodedrain.Blocker{
		blocker("vol-back-degraded", "volume degraded: 1 of 2 replicas healthy", 0),
		blocker("vol-back-failed", "replica vol-back-failed-r-0 on this node not healthy (failed, or not rebuilt yet); volume degraded: 1 of 2 replicas healthy", 0),
		blocker("vol-back-rebuild", "replica vol-back-rebuild-r-0 on this node rebuilding 45%; volume degraded: 2 of 3 replicas healthy", 45),
		blocker("vol-back-stopped", "replica vol-back-stopped-r-0 on this node stopped while the volume is attached; volume degraded: 1 of 2 replicas healthy", 0),
	}, got)

	none, err := g.ReturnCheck(context.Background(), "back-nowhere")
	require.NoError(t, err)
	assert.Empty(t, none, "a node without replicas")

	// Longhorn rebuilds everything.
	objs = nil
	for _, v := range []volumeOn{rebuilding, failed, stopped, degraded} {
		v.state, v.rebs = []replicaState{"healthy", "healthy", "healthy"}[:len(v.nodes)], nil
		objs = append(objs, v.objects()...)
	}
	applyLonghorn(t, c.Dynamic, objs...)
	require.Eventually(t, func() bool {
		var err error
		got, err = g.ReturnCheck(context.Background(), nodes[0])
		return err == nil && len(got) == 0
	}, 30*time.Second, 50*time.Millisecond, "healthy again: %+v", got)
	assert.NotNil(t, got, "an empty list, not null, in JSON")
}
