package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// recorder reads each node's statuses off the bus as they are published and keeps the times the
// coordinator put in them: STARTING, COMPLETE, the withdrawal (ReturningSince, when it saw the
// agent withdraw after its reboot) and the end of the return gate (the first status after that
// which no longer holds the slot).
type recorder struct {
	mu        sync.Mutex
	nodes     map[string]*statusTimes
	remaining int
	err       error
	done      chan struct{}
}

// statusTimes are one node's times as the coordinator published them.
type statusTimes struct {
	started, evicting, complete, withdrawn, idle time.Time
	idleMessage                                  string
	// gateBlocked says the volume gate held the drain before eviction (a volume listed).
	gateBlocked bool
	// returnBlockers are the reasons of the last return gate answer that was not healthy.
	returnBlockers string
	last           nodedrain.NodeDrainStatus
}

func startRecorder(ctx context.Context, statuses *pubsub.Bucket[nodedrain.NodeDrainStatus], nodes []string) (*recorder, error) {
	r := &recorder{nodes: map[string]*statusTimes{}, remaining: len(nodes), done: make(chan struct{})}
	for _, n := range nodes {
		r.nodes[n] = &statusTimes{}
	}
	w, err := statuses.Watch(ctx)
	if err != nil {
		return nil, err
	}
	go func() {
		for ev := range w.Events() {
			if ev.Kind == pubsub.EventPut && r.see(ev.Key, ev.Value) {
				return
			}
		}
	}()
	return r, nil
}

// see records one status; it returns true once every node is idle again or one failed.
func (r *recorder) see(node string, st nodedrain.NodeDrainStatus) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.nodes[node]
	if !ok || r.remaining == 0 {
		return false
	}
	t.last = st
	if st.Status == nodedrain.StatusCordoned && t.evicting.IsZero() {
		for _, b := range st.Blockers {
			t.gateBlocked = t.gateBlocked || b.Kind == nodedrain.BlockerVolume
		}
		if strings.HasPrefix(st.Message, "evicting pods") {
			t.evicting = st.UpdatedAt
		}
	}
	if !st.ReturningSince.IsZero() && len(st.Blockers) > 0 {
		var reasons []string
		for _, b := range st.Blockers {
			reasons = append(reasons, b.Name+": "+b.Reason)
		}
		t.returnBlockers = strings.Join(reasons, "; ")
	}
	switch {
	case st.Status == nodedrain.StatusStarting && t.started.IsZero():
		t.started = st.UpdatedAt
	case st.Status == nodedrain.StatusComplete && t.complete.IsZero():
		t.complete = st.UpdatedAt
	case st.Status == nodedrain.StatusFailedCordon || st.Status == nodedrain.StatusFailedDrain || st.Status == nodedrain.StatusNotSupported:
		r.err = fmt.Errorf("node %s: %s: %s", node, st.Status, st.Message)
	case st.Status != nodedrain.StatusNotRequested || t.complete.IsZero() || !t.idle.IsZero():
		// Not the way back from a reboot.
	case !st.ReturningSince.IsZero():
		if t.withdrawn.IsZero() {
			t.withdrawn = st.ReturningSince
		}
	case !t.withdrawn.IsZero():
		t.idle, t.idleMessage = st.UpdatedAt, st.Message
		r.remaining--
	}
	if r.remaining == 0 || r.err != nil {
		close(r.done)
		r.remaining = 0
		return true
	}
	return false
}

func (r *recorder) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// describe lists the nodes not idle yet with their last status, for a day that did not end.
func (r *recorder) describe() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, n := range sortedKeys(r.nodes) {
		if t := r.nodes[n]; t.idle.IsZero() {
			parts = append(parts, fmt.Sprintf("%s: %s %q", n, t.last.Status, t.last.Message))
		}
	}
	return "not idle: " + strings.Join(parts, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
