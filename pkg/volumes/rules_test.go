package volumes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rep builds a replica: kind is "ok" (intact, running), "stopped" (intact, not running),
// "failed", "new" (never used) or "wo" (rebuilding).
func rep(name, node, kind string) Replica {
	r := Replica{Name: name, Node: node}
	switch kind {
	case "ok":
		r.Intact, r.Running = true, true
	case "stopped":
		r.Intact = true
	case "failed":
	case "new":
	case "wo":
		r.Rebuilding, r.Running = true, true
	default:
		panic("unknown replica kind " + kind)
	}
	return r
}

func evicting(r Replica) Replica { r.Evicting = true; return r }
func inactive(r Replica) Replica { r.Inactive = true; return r }
func deleting(r Replica) Replica { r.Deleting = true; return r }

func rebuilding(name, node string, progress int, sources ...string) Replica {
	r := rep(name, node, "wo")
	r.Progress, r.Sources = progress, sources
	return r
}

func readyNodes(names ...string) map[string]NodeState {
	out := map[string]NodeState{}
	for _, n := range names {
		out[n] = NodeState{Exists: true, Ready: true}
	}
	return out
}

func TestRules(t *testing.T) {
	three := readyNodes("a", "b", "c")
	with := func(nodes map[string]NodeState, name string, st NodeState) map[string]NodeState {
		out := map[string]NodeState{}
		for k, v := range nodes {
			out[k] = v
		}
		out[name] = st
		return out
	}
	tests := []struct {
		name     string
		vol      Volume
		nodes    map[string]NodeState
		whole    bool
		policy   Policy
		verdict  Verdict // Continue: no finding
		rule     string
		reason   string
		progress int
	}{
		{name: "healthy replicas elsewhere", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rep("r3", "c", "ok")}}},
		{name: "last healthy replica", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "failed"), rep("r3", "c", "new")}},
			verdict: Block, rule: "last-copy", reason: "last healthy replica"},
		{name: "last healthy replica, rebuilding elsewhere",
			vol:     Volume{Replicas: []Replica{rep("r1", "a", "ok"), rebuilding("r2", "b", 45, "r1")}},
			verdict: Block, rule: "last-copy", reason: "last healthy replica; rebuilding on b 45%", progress: 45},
		{name: "never-used replica here", vol: Volume{Replicas: []Replica{rep("r1", "a", "new"), rep("r2", "b", "ok")}}},
		{name: "failed replica here, nothing else", vol: Volume{Replicas: []Replica{rep("r1", "a", "failed")}}},
		{name: "other copy on a cordoned node", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: with(three, "b", NodeState{Exists: true, Ready: true, Cordoned: true}), verdict: Block, rule: "last-copy",
			reason: "last healthy replica; other healthy replicas unusable: b (cordoned)"},
		{name: "other copy on a node not ready", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: with(three, "b", NodeState{Exists: true}), verdict: Block, rule: "last-copy", reason: "b (not ready)"},
		// Longhorn counts a healthy replica on a node where it places no new ones (its drain
		// check does not read allowScheduling); so does the gate (issue 12: it blocked forever).
		{name: "other copy where storage scheduling is disabled counts",
			vol:   Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: with(three, "b", NodeState{Exists: true, Ready: true, StorageDisabled: true, StorageWhy: "Longhorn scheduling disabled"})},
		{name: "other copy being evicted still counts", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), evicting(rep("r2", "b", "ok"))}}},
		{name: "other copy on a node whose Longhorn Node is not Ready", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: with(three, "b", NodeState{Exists: true, Ready: true, StorageDown: "Longhorn node not Ready (ManagerPodDown)"}), verdict: Block,
			rule: "last-copy", reason: "b (Longhorn node not Ready (ManagerPodDown))"},
		{name: "other copy inactive", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), inactive(rep("r2", "b", "ok"))}},
			verdict: Block, rule: "last-copy", reason: "b (inactive)"},
		{name: "other copy being deleted", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), deleting(rep("r2", "b", "ok"))}},
			verdict: Block, rule: "last-copy", reason: "b (being deleted)"},
		{name: "other copy stopped, volume attached", vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "stopped")}},
			verdict: Block, rule: "last-copy", reason: "b (not running)"},
		{name: "volume detached, copies stopped", vol: Volume{Detached: true, Replicas: []Replica{rep("r1", "a", "stopped"), rep("r2", "b", "stopped")}}},
		{name: "only rebuild source",
			vol:     Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rebuilding("r3", "c", 30, "r1")}},
			verdict: Block, rule: "rebuild-source", reason: "only healthy rebuild source for the replica rebuilding on c 30%", progress: 30},
		{name: "one of two rebuild sources",
			vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rebuilding("r3", "c", 30, "r1", "r2")}}},
		{name: "rebuild sources unknown, another healthy replica",
			vol: Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rebuilding("r3", "c", 30)}}},
		{name: "rebuilding here", vol: Volume{Replicas: []Replica{rebuilding("r1", "a", 10, "r2"), rep("r2", "b", "ok")}}},
		{name: "whole cluster: copy stopped on a node already down",
			vol:   Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "stopped")}},
			nodes: with(three, "b", NodeState{Exists: true, Cordoned: true}), whole: true},
		{name: "whole cluster: last copy, another node up",
			vol:   Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "failed")}},
			nodes: with(three, "b", NodeState{Exists: true, Cordoned: true}), whole: true,
			verdict: Block, rule: "last-copy", reason: "last healthy replica"},
		{name: "whole cluster: last copy, every other node down",
			vol:     Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "failed")}},
			nodes:   map[string]NodeState{"a": {Exists: true, Ready: true, Cordoned: true}, "b": {Exists: true}, "c": {Exists: true, Cordoned: true}},
			whole:   true,
			verdict: Warn, rule: "last-copy", reason: "no other node is up in this whole-cluster shutdown"},
		{name: "whole cluster: rebuild on a node already down is not waited for",
			vol:   Volume{Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "stopped"), rebuilding("r3", "c", 30, "r1")}},
			nodes: with(three, "c", NodeState{Exists: true, Cordoned: true}), whole: true},
		{name: "evict: replacement missing", policy: PolicyEvict,
			vol:     Volume{DesiredReplicas: 2, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rebuilding("r3", "c", 60, "r2")}},
			verdict: Block, rule: "evict-replacement", reason: "evicting replicas from this node: 1 of 2 healthy on other nodes; rebuilding on c 60%", progress: 60},
		{name: "evict: replaced", policy: PolicyEvict,
			vol: Volume{DesiredReplicas: 2, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rep("r3", "c", "ok")}}},
		{name: "evict: no other node to move to", policy: PolicyEvict,
			vol:   Volume{DesiredReplicas: 3, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: with(three, "c", NodeState{Exists: true, Ready: true, Cordoned: true}), verdict: Warn, rule: "evict-replacement",
			reason: "1 healthy on other nodes; Longhorn can place 1 of 3 replicas on other nodes (c: cordoned)"},
		{name: "evict: the only free node takes no replicas", policy: PolicyEvict,
			vol:   Volume{DesiredReplicas: 2, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: with(three, "c", NodeState{Exists: true, Ready: true, StorageDisabled: true, StorageWhy: "no disk takes replicas"}), verdict: Warn,
			rule: "evict-replacement", reason: "Longhorn can place 1 of 2 replicas on other nodes (c: no disk takes replicas)"},
		{name: "evict: a replica being evicted elsewhere is no replacement", policy: PolicyEvict,
			vol:     Volume{DesiredReplicas: 2, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), evicting(rep("r3", "c", "ok"))}},
			verdict: Block, rule: "evict-replacement", reason: "evicting replicas from this node: 1 of 2 healthy on other nodes"},
		{name: "evict: soft node anti-affinity places two on one node", policy: PolicyEvict,
			vol:     Volume{DesiredReplicas: 2, SoftNodeAntiAffinity: true, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes:   map[string]NodeState{"a": {Exists: true, Ready: true, Cordoned: true}, "b": {Exists: true, Ready: true}},
			verdict: Block, rule: "evict-replacement", reason: "1 of 2 healthy on other nodes"},
		{name: "evict: hard zone anti-affinity wins over soft node anti-affinity (review)", policy: PolicyEvict,
			vol: Volume{DesiredReplicas: 3, SoftNodeAntiAffinity: true, HardZoneAntiAffinity: true,
				Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok"), rep("r3", "c", "ok")}},
			nodes: map[string]NodeState{"a": {Exists: true, Ready: true, Cordoned: true, Zone: "z1"}, "b": {Exists: true, Ready: true, Zone: "z1"},
				"c": {Exists: true, Ready: true, Zone: "z2"}},
			verdict: Warn, rule: "evict-replacement", reason: "Longhorn can place 2 of 3 replicas on other nodes"},
		{name: "evict: hard zone anti-affinity, one other zone", policy: PolicyEvict,
			vol: Volume{DesiredReplicas: 2, HardZoneAntiAffinity: true, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
			nodes: map[string]NodeState{"a": {Exists: true, Ready: true, Cordoned: true, Zone: "z1"}, "b": {Exists: true, Ready: true, Zone: "z2"},
				"c": {Exists: true, Ready: true, Zone: "z2"}},
			verdict: Warn, rule: "evict-replacement", reason: "Longhorn can place 1 of 2 replicas on other nodes"},
		{name: "evict: not in a whole-cluster shutdown", policy: PolicyEvict, whole: true,
			vol: Volume{DesiredReplicas: 3, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := tt.nodes
			if nodes == nil {
				nodes = three
			}
			tt.vol.Name, tt.vol.Source = "vol", "longhorn"
			view := &View{Node: "a", WholeCluster: tt.whole, Policy: tt.policy, Nodes: nodes}
			got := Evaluate([]Volume{tt.vol}, view, DefaultRules())
			if tt.verdict == Continue {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.Equal(t, tt.verdict, got[0].Decision.Verdict)
			assert.Equal(t, tt.rule, got[0].Rule)
			assert.Contains(t, got[0].Decision.Reason, tt.reason)
			assert.Equal(t, tt.progress, got[0].Decision.Progress)
			assert.Equal(t, tt.verdict == Block, Blocks(got))
		})
	}
}

func TestBlockerCarriesVolumeClaimAndProgress(t *testing.T) {
	f := Finding{Volume: &Volume{Source: "longhorn", Name: "pvc-123", PVCNamespace: "shop", PVCName: "data-db-0"}, Rule: "last-copy",
		Decision: Decision{Verdict: Block, Reason: "last healthy replica; rebuilding on b 45%", Progress: 45}}
	b := f.Blocker()
	assert.Equal(t, "pvc-123", b.Name)
	assert.Equal(t, "shop", b.Namespace)
	assert.Equal(t, "longhorn volume (PVC shop/data-db-0): last healthy replica; rebuilding on b 45%", b.Reason)
	assert.Equal(t, 45, b.Progress)
	f.Decision.Verdict = Warn
	assert.Contains(t, f.Blocker().Reason, "not blocking: ")
}

func TestCustomRuleRunsInOrder(t *testing.T) {
	noSmall := Rule{Name: "never-small", Apply: func(v *Volume, _ *View) Decision {
		if v.DesiredReplicas == 1 {
			return Decision{Verdict: Block, Reason: "single-replica volumes never leave"}
		}
		return Decision{}
	}}
	vols := []Volume{
		{Name: "one", DesiredReplicas: 1, Replicas: []Replica{rep("r1", "a", "ok"), rep("r2", "b", "ok")}},
		{Name: "skip", DesiredReplicas: 1, Replicas: []Replica{rep("r1", "b", "ok")}},
	}
	got := Evaluate(vols, &View{Node: "a", Nodes: readyNodes("a", "b")}, append(DefaultRules(), noSmall))
	require.Len(t, got, 1, "the holds-data rule skips the volume with nothing on the node before the custom rule runs")
	assert.Equal(t, "one", got[0].Volume.Name)
	assert.Equal(t, "never-small", got[0].Rule)
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"wait": PolicyWait, "EVICT": PolicyEvict, " allow ": PolicyAllow} {
		got, err := ParsePolicy(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got)
		assert.Equal(t, got.String(), want.String())
	}
	_, err := ParsePolicy("drain")
	require.ErrorIs(t, err, ErrInvalidPolicy)
	assert.EqualError(t, err, `invalid volume policy "drain": want one of wait, evict, allow`)
	var p Policy
	require.NoError(t, p.Set("evict"))
	assert.Equal(t, PolicyEvict, p)
	assert.Error(t, p.Set(""))
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().ValidateSettings())
	err := DefaultConfig().Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "a Kubernetes client is required")
	assert.Contains(t, err.Error(), "a dynamic client is required")
	bad := DefaultConfig()
	bad.Policy, bad.DrainerTimeout, bad.DrainerBackoff, bad.LonghornNamespace = Policy(7), 0, 0, ""
	bad.Rules = []Rule{{Name: "empty"}}
	err = bad.ValidateSettings()
	require.ErrorIs(t, err, ErrInvalidConfig)
	for _, want := range []string{"Policy(7)", "drainer timeout", "drainer backoff", "Longhorn namespace", `rule 0 ("empty")`} {
		assert.Contains(t, err.Error(), want)
	}
}
