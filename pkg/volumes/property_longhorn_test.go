package volumes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// The property on Longhorn's real CRDs: each random volume of randomLayout is written as
// Longhorn writes it into a cluster serving a release's CRDs, read back through the API server
// (whose structural schema drops every field the release does not know), and read by the gate's
// own parsing: it must give back the very facts it was written from, and the rules on those
// keep the property. A field the gate reads that a release renamed, retyped or dropped fails
// here. Longhorn v1.12.1 (the package's cluster) and v1.7.3 (a cluster of its own).
func TestPropertyOnLonghornsRealCRDs(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	for _, release := range []string{testenv.LonghornLatest, testenv.LonghornOldest} {
		t.Run(release, func(t *testing.T) {
			if _, err := testenv.LonghornRelease(release); errors.Is(err, os.ErrNotExist) {
				t.Skipf("Longhorn's real CRDs are not beside the project: %v", err)
			}
			rc := c
			if c.Longhorn != release {
				rc = testenv.StartTestCluster(t, testenv.ClusterConfig{Longhorn: release})
			}
			ensureLonghornNamespace(t, rc.Client)
			rng := rand.New(rand.NewPCG(5, 6))
			for i := range 60 {
				l := randomLayout(rng)
				if release == testenv.LonghornOldest {
					oneSource(&l) // Longhorn 1.7 rebuilds from one replica
				}
				got := roundTrip(t, rc.Dynamic, l, fmt.Sprintf("prop-%d", i))
				want := l.vol
				want.Source, want.Name = "longhorn", got.Name
				if !assert.Equal(t, want, got, "layout %d: the facts read back differ from those written:\n%s", i, l) {
					return
				}
				l.vol = got
				findings := Evaluate([]Volume{got}, &View{Node: "n0", WholeCluster: l.whole, Policy: l.policy, Nodes: l.nodes}, DefaultRules())
				lastCopy, onlySource, exempt := oracle(l)
				require.False(t, (lastCopy || onlySource) && !exempt && !Blocks(findings),
					"layout %d: safe although the node holds the last healthy replica or the only rebuild source:\n%s%v", i, l, findings)
			}
		})
	}
}

// oneSource keeps at most one source for each rebuild of l.
func oneSource(l *layout) {
	for i := range l.vol.Replicas {
		if len(l.vol.Replicas[i].Sources) > 1 {
			l.vol.Replicas[i].Sources = l.vol.Replicas[i].Sources[:1]
		}
	}
}

// roundTrip writes l's volume as Longhorn objects named after prefix, reads them back and
// returns the facts the gate makes of them, replica names without the prefix. The objects are
// removed before it returns.
func roundTrip(t *testing.T, dyn dynamic.Interface, l layout, prefix string) Volume {
	t.Helper()
	ctx := context.Background()
	objs, deleting := longhornObjectsOf(l, prefix)
	_, err := testenv.ApplyLonghorn(ctx, dyn, objs...)
	defer removeAll(t, dyn, objs)
	require.NoError(t, err)
	for _, name := range deleting {
		// As Longhorn's own finalizer holds a replica being deleted.
		require.NoError(t, dyn.Resource(longhornReplicas).Namespace(lhNS).Delete(ctx, name, metav1.DeleteOptions{}))
	}
	var back []*unstructured.Unstructured
	for _, o := range objs {
		u, err := dyn.Resource(gvrOf(o)).Namespace(lhNS).Get(ctx, o.GetName(), metav1.GetOptions{})
		require.NoError(t, err)
		back = append(back, u)
	}
	v, err := newLonghornFromObjects(back...).volume(prefix)
	require.NoError(t, err)
	strip := func(s string) string { return strings.TrimPrefix(s, prefix+"-") }
	for i := range v.Replicas {
		v.Replicas[i].Name = strip(v.Replicas[i].Name)
		for j := range v.Replicas[i].Sources {
			v.Replicas[i].Sources[j] = strip(v.Replicas[i].Sources[j])
		}
	}
	return v
}

// longhornObjectsOf is l's volume as Longhorn writes it: its Volume, a Replica each, and the
// Engine with the replicas' modes and rebuilds; deleting names the replicas to delete (held by
// a finalizer).
func longhornObjectsOf(l layout, prefix string) (objs []*unstructured.Unstructured, deleting []string) {
	v := l.vol
	state := "attached"
	if v.Detached {
		state = "detached"
	}
	vol := testenv.LonghornVolume(prefix, int64(v.DesiredReplicas), state, "", "")
	aa := func(soft bool) string {
		if soft {
			return "enabled"
		}
		return "disabled"
	}
	vol.Object["spec"].(map[string]any)["replicaSoftAntiAffinity"] = aa(v.SoftNodeAntiAffinity)
	vol.Object["spec"].(map[string]any)["replicaZoneSoftAntiAffinity"] = aa(!v.HardZoneAntiAffinity)
	objs = append(objs, vol)
	addrs, modes, ips := map[string]string{}, map[string]string{}, map[string]string{}
	var rebuilds []testenv.Rebuild
	for i, r := range v.Replicas {
		name := prefix + "-" + r.Name
		ips[r.Name] = fmt.Sprintf("10.9.%d.%d", len(prefix)%200, i+1)
		addrs[name] = ips[r.Name] + ":10000"
		st := testenv.ReplicaState("failed")
		switch {
		case r.Intact && r.Running:
			st, modes[name] = "healthy", "RW"
		case r.Intact:
			st = "stopped"
		case r.Running:
			st = "new"
		}
		rep := testenv.LonghornReplica(name, prefix, r.Node, st, ips[r.Name])
		if st == "failed" {
			rep.Object["spec"].(map[string]any)["healthyAt"] = "" // never used or failed: neither counts
		}
		spec := rep.Object["spec"].(map[string]any)
		spec["engineName"], spec["active"], spec["evictionRequested"] = prefix+"-e-0", !r.Inactive, r.Evicting
		if r.Deleting {
			rep.SetFinalizers([]string{"longhorn.io"})
			deleting = append(deleting, name)
		}
		objs = append(objs, rep)
	}
	for _, r := range v.Replicas {
		if !r.Rebuilding {
			continue
		}
		modes[prefix+"-"+r.Name] = "WO"
		rb := testenv.Rebuild{To: ips[r.Name] + ":10000", Progress: int64(r.Progress)}
		for _, s := range r.Sources {
			rb.From = append(rb.From, ips[s]+":10000")
		}
		rebuilds = append(rebuilds, rb)
	}
	objs = append(objs, testenv.LonghornEngine(prefix, "n0", addrs, modes, rebuilds...))
	return objs, deleting
}

// removeAll deletes objs, releasing the finalizers that held some.
func removeAll(t *testing.T, dyn dynamic.Interface, objs []*unstructured.Unstructured) {
	ctx := context.Background()
	for _, o := range objs {
		res := dyn.Resource(gvrOf(o)).Namespace(lhNS)
		if len(o.GetFinalizers()) > 0 {
			_, _ = res.Patch(ctx, o.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		if err := res.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Errorf("remove %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}
