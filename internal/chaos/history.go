package chaos

// This file is the history: every event the harness saw, with its time. Statuses and requests
// carry the time the NATS server stored them (its stream timestamp); Node, pod and Lease
// changes the time the harness's informers saw them; command runs the time the command's own
// shell wrote in its record; faults and reboots the time the harness made them.

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Kind says what an Event records.
type Kind string

// The kinds of events of a history.
const (
	// KindStatus is a value stored under a node's key of the status bucket (Status nil: a delete).
	KindStatus Kind = "status"
	// KindRequest is a value stored under a node's key of the request bucket (Deleted: a withdrawal).
	KindRequest Kind = "request"
	// KindNode is a Node object as the informer saw it change (Deleted: gone).
	KindNode Kind = "node"
	// KindPod is a pod bound to a node, or its deletion (Deleted), or its termination starting.
	KindPod Kind = "pod"
	// KindLease is the coordinators' Lease changing hands.
	KindLease Kind = "lease"
	// KindRun is an operation command an agent ran (from the command's own record).
	KindRun Kind = "run"
	// KindFault is a fault injected (What: its kind; Detail: "start", "end", "skipped ...").
	KindFault Kind = "fault"
	// KindAsk is an operation the workload asked of a node's agent (Op): a reboot by its
	// sentinel, an update by `agent request update`; Detail "skipped ..." when it could not.
	KindAsk Kind = "ask"
	// KindReboot is the harness playing a node's machine: What "down" (the agent killed, the
	// Node NotReady) or "up" (a new boot ID, the Node Ready, the agent started again).
	KindReboot Kind = "reboot"
	// KindReplica is a Longhorn replica (Target) of Volume on Node changing state (What:
	// healthy, failed, rebuilding), as the harness, playing Longhorn, wrote it.
	KindReplica Kind = "replica"
	// KindTerm is a coordinator run's term record (Holder: the coordinator; Rev: the revision its
	// statuses carry as their Term).
	KindTerm Kind = "term"
	// KindAgent is an agent's own report of its state (What: its phase), taken at the end.
	KindAgent Kind = "agent"
	// KindPhase marks the run's phases: What "start", "faults-stop" (every fault healed, the
	// quiet period begins), "end" (the quiet period is over: L1 is judged here).
	KindPhase Kind = "phase"
)

// Event is one thing that happened. Fields not meaningful for its Kind are empty.
type Event struct {
	At   time.Time `json:"at"`
	Kind Kind      `json:"kind"`
	Node string    `json:"node,omitempty"`

	// Config: the run's own settings, on its "start" phase event, so that a kept history is
	// judged again as it was (ConfigOf).
	Config *Config `json:"config,omitempty"`

	// KindStatus and KindRequest: the bucket revision (the stream sequence), and whether the
	// value carries the coordinator's writer header.
	Rev     uint64                     `json:"rev,omitempty"`
	Status  *nodedrain.NodeDrainStatus `json:"status,omitempty"`
	Marked  bool                       `json:"marked,omitempty"`
	Deleted bool                       `json:"deleted,omitempty"`
	// RequestID: of a request (KindRequest), of a command run (KindRun), of an agent's state.
	RequestID string `json:"requestID,omitempty"`

	// KindNode.
	Unschedulable bool `json:"unschedulable,omitempty"`
	Annotated     bool `json:"annotated,omitempty"` // edgedrain's cordon record
	Ready         bool `json:"ready,omitempty"`

	// KindPod: namespace/name, whether kubectl drain would evict it, whether it is terminating.
	Pod         string `json:"pod,omitempty"`
	UID         string `json:"uid,omitempty"`
	Evictable   bool   `json:"evictable,omitempty"`
	Terminating bool   `json:"terminating,omitempty"`

	// KindReplica: the volume.
	Volume string `json:"volume,omitempty"`

	// KindLease, KindTerm: the coordinator.
	Holder string `json:"holder,omitempty"`

	// KindRun: the operation; KindFault, KindReboot, KindAgent, KindPhase: what.
	Op     string `json:"op,omitempty"`
	What   string `json:"what,omitempty"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Recorder collects a history from many goroutines.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Add records e.
func (r *Recorder) Add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns the history so far, in time order (stable: events of the same time keep the
// order they were recorded in).
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	out := append([]Event(nil), r.events...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// WriteHistory writes events as JSON lines.
func WriteHistory(w io.Writer, events []Event) error {
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// ReadHistory reads a history WriteHistory wrote (to judge a run again: `go test -run
// TestJudgeHistory -chaos.history FILE`).
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// ConfigOf returns the settings a history's "start" event recorded, or fallback when it has none.
func ConfigOf(events []Event, fallback Config) Config {
	for _, e := range events {
		if e.Kind == KindPhase && e.What == "start" && e.Config != nil {
			return *e.Config
		}
	}
	return fallback
}
