package coordinator

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// BenchmarkAdmissionPass is the coordinator's admission pass as it runs after every event, on
// its node informer's cache (client-go's indexer and lister) and its Core: a fleet of 100 or
// 1000 Ready nodes, 100 of which asked for an update, 10 draining (max-concurrent-drains 10).
// Issue 13's goal: under 10 ms at 1000 nodes. (The scale bench measures the same pass on a
// loaded machine: bench/scale.)
func BenchmarkAdmissionPass(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			reqs := map[string]*nodedrain.NodeDrainRequest{}
			sts := map[string]nodedrain.NodeDrainStatus{}
			for i := range n {
				name := fmt.Sprintf("node-%04d", i)
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
				if err := indexer.Add(node); err != nil {
					b.Fatal(err)
				}
				if i < 100 {
					reqs[name] = &nodedrain.NodeDrainRequest{Node: name, RequestID: name + "-r", RequestedAt: now.Add(time.Duration(i) * time.Millisecond),
						RequestedBy: nodedrain.RequesterUpdate}
					st := nodedrain.StatusRequested
					if i < 10 {
						st = nodedrain.StatusCordoned
					}
					sts[name] = nodedrain.NodeDrainStatus{Node: name, RequestID: name + "-r", Status: st, Attempt: 1, UpdatedAt: now}
				}
			}
			e := &Engine{nodes: listersv1.NewNodeLister(indexer), core: NewCore(nodedrain.DefaultLimits(), 10)}
			e.core.SetStaleHolderTimeout(10 * time.Minute)
			e.core.Resume(ResumeInput{Requests: reqs, Statuses: sts}, now)
			e.core.Admit(e.nodeInfos(now), AdmissionVerdict{}, now)
			b.ReportAllocs()
			for b.Loop() {
				if actions, _ := e.core.Admit(e.nodeInfos(now), AdmissionVerdict{}, now); len(actions) != 0 {
					b.Fatalf("%d actions in a steady pass", len(actions))
				}
			}
		})
	}
}
