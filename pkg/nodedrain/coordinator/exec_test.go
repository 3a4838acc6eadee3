package coordinator

import (
	"context"
	"errors"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Every operation of a node runs under the node's one context: a long drain (many cordon,
// gate and eviction attempts) must not pile up a chain of contexts until the drain ends.
func TestNodeContextIsReusedNotChained(t *testing.T) {
	x := newExecutor(&Engine{})
	parent, stop := context.WithCancel(context.Background())
	defer stop()

	first := x.nodeContext(parent, "node-a")
	for i := 0; i < 1000; i++ {
		require.True(t, x.nodeContext(parent, "node-a") == first, "operation %d got a context of its own", i)
	}
	other := x.nodeContext(parent, "node-b")
	require.False(t, other == first, "two nodes share a context")
	require.Len(t, x.nodes, 2, "retained contexts")

	x.cancel("node-a")
	require.Error(t, first.Err(), "cancel(node) did not end the node's operations")
	require.NoError(t, other.Err(), "cancel(node-a) ended node-b's operations")
	require.Len(t, x.nodes, 1, "retained contexts after cancel")

	fresh := x.nodeContext(parent, "node-a")
	require.NoError(t, fresh.Err(), "the operation after cancel got an ended context")
	require.True(t, x.nodeContext(parent, "node-a") == fresh)

	x.stopAll()
	require.Error(t, fresh.Err())
	require.Error(t, other.Err())
	require.Empty(t, x.nodes)
}

// A node context that ended with its parent is not handed out again.
func TestNodeContextAfterParentEnded(t *testing.T) {
	x := newExecutor(&Engine{})
	old, stop := context.WithCancel(context.Background())
	ended := x.nodeContext(old, "node-a")
	stop()
	require.Error(t, ended.Err())
	fresh := x.nodeContext(context.Background(), "node-a")
	require.NoError(t, fresh.Err())
	require.Len(t, x.nodes, 1)
}

// A result an earlier Run's goroutine posted as that run stopped is dropped by the next Run (the
// results channel outlives runs); results of the current run are kept.
func TestResultsOfAnEarlierRunAreDropped(t *testing.T) {
	e := &Engine{results: make(chan nodeEvent, 4)}
	run1, stop1 := context.WithCancel(context.WithValue(context.Background(), runKey{}, uint64(1)))
	run2 := context.WithValue(context.Background(), runKey{}, uint64(2))
	stop1()
	// With run 1 stopped, post may still enqueue (select picks any ready case): force it.
	e.results <- nodeEvent{node: "a", ev: nodedrain.EvResult{Op: nodedrain.OpEvict, RequestID: "r1", Err: errors.New("context canceled")}, run: runOf(run1)}
	e.post(run2, "a", nodedrain.EvTimer{})
	stale, current := <-e.results, <-e.results
	require.False(t, fromThisRun(run2, stale), "a result of run 1 reached run 2")
	require.True(t, fromThisRun(run2, current))
	require.Equal(t, uint64(2), current.run)
}

// A status write whose reply comes after the Lease lapsed (the process was paused between its
// write and its reply) gets no Event: another leader may have announced the node's later
// transitions meanwhile (simulation, seed 64599, E1). While the run leads, a transition is
// announced once.
func TestNoEventForAWriteWhoseReplyCameAfterTheLeaseLapsed(t *testing.T) {
	stopped := 0
	e := &Engine{core: NewCore(nodedrain.DefaultLimits(), 1), log: logrus.New(), stopRun: func() { stopped++ }}
	valid := true
	ctx := WithLeaseCheck(context.Background(), func() bool { return valid })
	st := nodedrain.NodeDrainStatus{Node: "node-a", RequestID: "r1", Status: nodedrain.StatusComplete}
	require.True(t, e.announce(ctx, st))
	require.False(t, e.announce(ctx, st), "a progress update announced again")

	valid = false
	st = nodedrain.NodeDrainStatus{Node: "node-a", RequestID: "r1", Status: nodedrain.StatusNotRequested}
	require.False(t, e.announce(ctx, st), "announced after the Lease lapsed")
	require.Equal(t, 1, stopped, "the run did not stop on the lapsed Lease")
}
