package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// The checker: the invariants of docs/design.md (§8) decided from a history alone.
// It implements a subset, each said where it is judged:
//
//   - S1 (agent side, check_s1s2.go): every command run for a request r had, stored before it,
//     COMPLETE or NOTSUPPORTED for r under its node's key, a value the key still held (not
//     slot-released, unless a decommission's) at most ConfirmMaxAge before the command started.
//     S1-cordoned, its own rule: the node was cordoned when the command started, unless an
//     operator uncordoned it, or its Node was deleted and registered again, since that COMPLETE.
//   - S2 (in part, check_s1s2.go): a COMPLETE (not a re-publication) is stored only while its
//     node is cordoned, no evictable pod is left on it, and every Longhorn volume with a healthy
//     replica on it has a healthy replica on another node up and Ready; a change made behind
//     edgedrain's back within Slack of the decision excuses it.
//   - S3 (check_s3s4.go): at most MaxConcurrent nodes in maintenance for longer than Slack at
//     once, a node in maintenance when its status holds a slot (STARTING, CORDONED,
//     DRAINRETRYING, the return gate), when the bus shows COMPLETE or NOTSUPPORTED for its live
//     request (not released), or from the moment its command ran until it is back and Ready.
//   - S4 (check_s3s4.go): a node carrying edgedrain's cordon and record, with no live request and
//     out of its return gate, is uncordoned within S4Bound, counting only time while no fault
//     that takes the leader's API or bus away is under way (the design's bound applies only while
//     a leader reaches the API and a healthy bus); and a cordon an operator made is not removed
//     while the operator keeps it.
//   - S5 (in part, check_l1.go): an operation runs once per request; no published attempt number
//     is past its limit.
//   - L1 (check_l1.go): at the end of the quiet period no request is left, every status is
//     NOTREQUESTED out of its return gate, no node carries edgedrain's cordon record or a
//     cordon, every agent is idle, and every operation asked for (a sentinel, `agent request`)
//     ran, unless an operator withdrew a request of the node since.
//   - H: the history is complete: no revision of the bus was lost by the recorder. A run judged
//     on a history with holes passes on what it could not see.
//   - C: no process exited on its own: a crash is a finding, whatever the invariants say.
//
// The coordinator's side of S1 is judged by term records (checkFenced), not by the Lease.
// Not judged yet: S5's attempts per drain cycle, L1's volume-gate eviction requests, N1, N2, E1, O1,
// R1-R3.

// Slack is how long a condition must have held to count against a decision: an API or bus round
// trip, also the lag of the harness's own informers. It must equal the simulation's freshness
// (internal/sim), the tolerance of a check-then-act there; no product constant says it.
const Slack = time.Second

// The invariants the checker names beside the design's.
const (
	// InvHistory: the recorder lost revisions of the bus and could not read them back.
	InvHistory = "H"
	// InvCrash: a process (a coordinator, an agent) exited on its own.
	InvCrash = "C"
	// InvRunCordoned: an operation's command ran on a node not cordoned.
	InvRunCordoned = "S1-cordoned"
)

// What the harness records for a process that exited on its own (a KindFault event's What) and
// for a revision it lost (a KindPhase event's What).
const (
	faultCrash = "crash"
	phaseLost  = "lost"
)

// Config says what the checker holds the history to.
type Config struct {
	// Seed is the fault schedule's seed, printed with every violation.
	Seed uint64
	// MaxConcurrent is the coordinators' --max-concurrent-drains.
	MaxConcurrent int
	// ConfirmMaxAge is how old the agent's confirmation read may be when its command starts
	// (zero: agent.ConfirmMaxAge).
	ConfirmMaxAge time.Duration
	// CordonAttempts and DrainAttempts are the coordinators' limits (zero: nodedrain's defaults).
	CordonAttempts, DrainAttempts int
	// Slack is how long a condition must have held to count against a decision (zero: Slack).
	Slack time.Duration
}

// Violation is one broken invariant with the story that shows it.
type Violation struct {
	Invariant string
	At        time.Time
	Node      string
	What      string
	Story     string
	Lost      int // revisions the recorder could not read (the history is incomplete)
}

func (v Violation) String() string { return fmt.Sprintf("%s on %s: %s", v.Invariant, v.Node, v.What) }

// history is a history indexed for the checks.
type history struct {
	cfg      Config
	all      []Event
	start    time.Time
	end      time.Time // the quiet period's end; zero if the run did not get there
	status   map[string][]Event
	request  map[string][]Event
	node     map[string][]Event
	pods     map[string][]Event // by pod
	runs     []Event
	faults   []Event
	terms    []Event
	lost     []Event             // revisions the recorder could not read back
	replicas map[string][]Event  // by volume/replica
	volumes  map[string][]string // volume -> its replicas' keys
	reboots  map[string][]Event
	sentinel map[string][]Event
	agents   map[string]Event // the final reports
	nodes    []string
}

func index(events []Event, cfg Config) *history {
	h := &history{cfg: cfg, all: events, status: map[string][]Event{}, request: map[string][]Event{}, node: map[string][]Event{},
		pods: map[string][]Event{}, replicas: map[string][]Event{}, volumes: map[string][]string{}, reboots: map[string][]Event{}, sentinel: map[string][]Event{}, agents: map[string]Event{}}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Node != "" && !seen[e.Node] && e.Kind != KindFault && e.Kind != KindReplica {
			seen[e.Node] = true
			h.nodes = append(h.nodes, e.Node)
		}
		switch e.Kind {
		case KindStatus:
			h.status[e.Node] = append(h.status[e.Node], e)
		case KindRequest:
			h.request[e.Node] = append(h.request[e.Node], e)
		case KindNode:
			h.node[e.Node] = append(h.node[e.Node], e)
		case KindPod:
			key := e.UID
			if key == "" {
				key = e.Pod
			}
			h.pods[key] = append(h.pods[key], e)
		case KindTerm:
			h.terms = append(h.terms, e)
		case KindReplica:
			key := e.Volume + "/" + e.Target
			if len(h.replicas[key]) == 0 {
				h.volumes[e.Volume] = append(h.volumes[e.Volume], key)
			}
			h.replicas[key] = append(h.replicas[key], e)
		case KindRun:
			h.runs = append(h.runs, e)
		case KindFault:
			h.faults = append(h.faults, e)
		case KindReboot:
			h.reboots[e.Node] = append(h.reboots[e.Node], e)
		case KindAsk:
			if e.Detail == "" { // not a skipped one
				h.sentinel[e.Node] = append(h.sentinel[e.Node], e)
			}
		case KindAgent:
			h.agents[e.Node] = e
		case KindPhase:
			switch e.What {
			case "start":
				h.start = e.At
			case "end":
				h.end = e.At
			case phaseLost:
				h.lost = append(h.lost, e)
			}
		}
	}
	sort.Strings(h.nodes)
	if h.start.IsZero() && len(events) > 0 {
		h.start = events[0].At
	}
	return h
}

// at returns the last event of list at or before t (list in time order).
func at(list []Event, t time.Time) (Event, bool) {
	i := sort.Search(len(list), func(i int) bool { return list[i].At.After(t) })
	if i == 0 {
		return Event{}, false
	}
	return list[i-1], true
}

// Check judges a history and returns every violation found, each with its story.
func Check(events []Event, cfg Config) []Violation {
	if cfg.ConfirmMaxAge == 0 {
		cfg.ConfirmMaxAge = agent.ConfirmMaxAge
	}
	if cfg.Slack == 0 {
		cfg.Slack = Slack
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = 1
	}
	if cfg.CordonAttempts == 0 {
		cfg.CordonAttempts = nodedrain.DefaultLimits().CordonAttempts
	}
	if cfg.DrainAttempts == 0 {
		cfg.DrainAttempts = nodedrain.DefaultLimits().DrainAttempts
	}
	h := index(events, cfg)
	var out []Violation
	out = append(out, h.checkHistory()...)
	out = append(out, h.checkS1()...)
	out = append(out, h.checkRunCordoned()...)
	out = append(out, h.checkFenced()...)
	out = append(out, h.checkS2()...)
	out = append(out, h.checkS3()...)
	out = append(out, h.checkS4()...)
	out = append(out, h.checkOperatorCordons()...)
	out = append(out, h.checkOnce()...)
	out = append(out, h.checkAttempts()...)
	out = append(out, h.checkL1()...)
	for i := range out {
		out[i].Lost = len(h.lost)
	}
	return out
}

// checkHistory: what makes the history itself a finding. Revisions the recorder lost leave holes
// every check would pass over, so the run cannot pass on them; a process that exited on its own
// (the harness restarts it and records a "crash") is a bug of that process, not a fault the
// schedule injected.
func (h *history) checkHistory() []Violation {
	var out []Violation
	if len(h.lost) > 0 {
		first := h.lost[0]
		out = append(out, h.around(InvHistory, "", first.At,
			"the recorder lost %d revisions of the bus and could not read them back (first at %s: %s): the history is incomplete",
			len(h.lost), h.rel(first.At), first.Detail))
	}
	for _, f := range h.faults {
		if f.What == faultCrash {
			out = append(out, h.around(InvCrash, f.Target, f.At, "%s exited on its own at %s: %s", f.Target, h.rel(f.At), f.Detail))
		}
	}
	return out
}

func (h *history) violation(inv, node string, t time.Time, from, to time.Time, format string, args ...any) Violation {
	return Violation{Invariant: inv, At: t, Node: node, What: fmt.Sprintf(format, args...), Story: h.story(node, from, to, t)}
}

// around is a violation at t whose story is the minute before it and the few seconds after,
// what most decisions depend on.
func (h *history) around(inv, node string, t time.Time, format string, args ...any) Violation {
	return h.violation(inv, node, t, t.Add(-time.Minute), t.Add(5*time.Second), format, args...)
}
