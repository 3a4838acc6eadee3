package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the demo's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The demo runs to the end non-interactively, as `make demo` does in CI: the reboot request is
// drained to COMPLETE only after the volume's rebuild, the reboot command runs, the node is
// uncordoned when it is back, and its admission slot is freed only once its replica caught up.
func TestDemoRunsToTheEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster and the programs")
	}
	var out syncBuffer
	d := &demo{out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err := d.run(ctx)
	d.cleanup(true)
	t.Log(out.String())
	require.NoError(t, err)
	text := out.String()
	for _, want := range []string{
		"node-1   REQUESTED",
		"node-1   CORDONED      waiting for 1 volume(s) to be safe on other nodes",
		"blocked by volume logs",
		"rebuilt and healthy",
		"node-1   COMPLETE",
		"the agent ran the reboot command",
		"is schedulable again",
		"holding its admission slot until it is healthy again",
		"volume db: replica on node-1 100% caught up",
		"is healthy again: its admission slot is free",
		"edgedrain_drain_completion_time_seconds_count",
		"export KUBECONFIG=",
	} {
		assert.Contains(t, text, want)
	}
	assert.Less(t, strings.Index(text, "rebuilt and healthy"), strings.Index(text, "node-1   COMPLETE"),
		"COMPLETE before the volume was safe")
	assert.Less(t, strings.Index(text, "node-1   COMPLETE"), strings.Index(text, "the agent ran the reboot command"))
	assert.Less(t, strings.Index(text, "100% caught up"), strings.Index(text, "is healthy again: its admission slot is free"),
		"the return gate ended before the node's replica caught up")
}
