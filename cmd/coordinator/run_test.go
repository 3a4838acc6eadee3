package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// An engine that stops early is restarted within its term; the orphaned-PVC loop is not: one
// loop per term, stopped before the term's function returns (so before the next term starts).
func TestOneOrphanLoopPerTermAcrossEngineRestarts(t *testing.T) {
	log := logrus.New()
	log.SetLevel(logrus.PanicLevel)
	var loops, maxLoops, engineRuns atomic.Int32
	orphans := func(ctx context.Context) error {
		n := loops.Add(1)
		defer loops.Add(-1)
		for m := maxLoops.Load(); n > m && !maxLoops.CompareAndSwap(m, n); m = maxLoops.Load() {
		}
		<-ctx.Done()
		return nil
	}
	var failures atomic.Int32 // engine runs left that stop at once, like a bus watch that ended
	engine := func(ctx context.Context) error {
		engineRuns.Add(1)
		if failures.Add(-1) >= 0 {
			return errors.New("bus watch ended")
		}
		<-ctx.Done()
		return nil
	}
	active := activeTerm(log, engine, orphans)

	for term := 1; term <= 2; term++ {
		failures.Store(2)
		engineRuns.Store(0)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- active(ctx) }()
		require.Eventually(t, func() bool { return engineRuns.Load() == 3 }, 30*time.Second, 10*time.Millisecond,
			"term %d: the engine was not restarted twice", term)
		require.Equal(t, int32(1), loops.Load(), "term %d: orphaned PVC loops running", term)
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("term %d did not end with its context", term)
		}
		require.Zero(t, loops.Load(), "term %d: the orphaned PVC loop outlived its term", term)
	}
	require.Equal(t, int32(1), maxLoops.Load(), "orphaned PVC loops at once")
}
