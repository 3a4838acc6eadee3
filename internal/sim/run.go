package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// Result is the outcome of one run.
type Result struct {
	Seed      uint64
	Config    Config
	Plan      Plan
	Violation *Violation
	// Story is the run told line by line.
	Story []string
	// Events is how many events ran; States the distinct states reached (see Sim.check).
	Events int
	States map[string]bool
	// Outages is how many times a leader went on in API-outage mode; Fenced how many of its
	// status writes the term fence refused.
	Outages, Fenced int
	// Policy counts what the maintenance policy did (holds by reason, return gates by result,
	// stale releases), to show the runs exercised it.
	Policy map[string]int
	// Forged counts the forger's writes, Refused the statuses agents' guards refused, Repairs
	// the values coordinators repaired, CopiesTaken the server copies that reached agent.Step
	// through a failed checked read (see agentProc.delivered).
	Forged, Refused, Repairs, CopiesTaken int
}

// ConfigFor draws a cluster for a seed: 2 to 4 nodes (mostly 3), one or two coordinators,
// max-concurrent 1 (sometimes 2), a volume policy, a few volumes and ReplicaSets.
func ConfigFor(seed uint64) Config {
	cfg := configOneSlotWithWait(seed)
	// The operator's bus identity putting requests of its own (operatorbus.go), in one run in three.
	cfg.OperatorBus = rand.New(rand.NewPCG(seed, 0x0b05)).IntN(3) == 0
	// Several slots with the wait policy: two nodes that hold the only two copies of a volume
	// must not be in maintenance together (each drain would wait for the other's copy), in one
	// run in two of 3 nodes or more, with failure domains in one of those in three.
	if wrng := rand.New(rand.NewPCG(seed, 0x5107)); cfg.Nodes >= 3 && cfg.VolumePolicy == volumes.PolicyWait && wrng.IntN(2) == 0 {
		cfg.MaxConcurrent = 2
		if wrng.IntN(3) == 0 {
			cfg.Domains = 2
		}
	}
	// Pods landing on cordoned nodes (evictor.go) and API writes landing late or unanswered
	// (apiwrites.go), each in one run in two, from streams of their own.
	cfg.UnkindPods = rand.New(rand.NewPCG(seed, 0xe71c7)).IntN(2) == 0
	cfg.LateWrites = rand.New(rand.NewPCG(seed, 0xa91c1)).IntN(2) == 0
	// Clock faults (clocks.go), from a stream of their own: in one run in two.
	cfg.Clocks = rand.New(rand.NewPCG(seed, 0xc10c)).IntN(2) == 0
	// --node-selector changes (selector.go), from a stream of their own: in one run in three.
	cfg.Selector = rand.New(rand.NewPCG(seed, 0x5e1ec7)).IntN(3) == 0
	// Reboots typed by an administrator (typedreboot.go), in one run in two; the agents catch
	// them in three of four of those, logind holding a reboot back from 20 s to 10 min.
	if trng := rand.New(rand.NewPCG(seed, 0x7eb007)); trng.IntN(2) == 0 {
		cfg.TypedReboots, cfg.CatchShutdown = true, trng.IntN(4) > 0
		cfg.InhibitDelay = time.Duration(20+trng.IntN(580)) * time.Second
		if trng.IntN(2) == 0 { // (drawn last: the draws above keep their values)
			cfg.ShutdownJobFailures = 0.2
		}
	}
	// Informers as late as real ones (informerlag.go), in one run in two.
	cfg.InformersBehind = rand.New(rand.NewPCG(seed, 0x1a90)).IntN(2) == 0
	return cfg
}

// configOneSlotWithWait is ConfigFor as it was before it drew several slots with the wait
// policy: the regressions found before keep the configuration they were found with.
func configOneSlotWithWait(seed uint64) Config {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := Config{Nodes: []int{2, 3, 3, 3, 4}[rng.IntN(5)], Coordinators: 1 + rng.IntN(2), MaxConcurrent: 1,
		Policy: simPolicy(), AgentPolicy: simAgentPolicy(), VolumePolicy: volumes.PolicyWait,
		APIUnreachableTimeout: time.Minute, Volumes: rng.IntN(4), Replicas: 2, Groups: 1 + rng.IntN(2), PodsPerGroup: 2,
		CommandFailure: 0.1, Active: time.Duration(2+rng.IntN(4)) * time.Minute, Quiet: 20 * time.Minute}
	if rng.IntN(3) == 0 {
		cfg.VolumePolicy = volumes.PolicyEvict
	}
	// Two at once with the evict policy from this stream; with the wait policy from one of its
	// own (below), so that the draws here stay what they were.
	if cfg.Nodes > 3 && cfg.VolumePolicy == volumes.PolicyEvict && rng.IntN(2) == 0 {
		cfg.MaxConcurrent = 2
	}
	if rng.IntN(4) == 0 {
		cfg.Coordinators, cfg.NoLeaderElection = 1, true
	}
	// The maintenance policy (DESIGN §9) from a stream of its own, so that the draws above stay
	// what they were for every seed.
	prng := rand.New(rand.NewPCG(seed, 0x9011c7))
	if prng.IntN(2) == 0 {
		cfg.Policy.ReturnTimeout = time.Duration(30+prng.IntN(150)) * time.Second
	}
	if prng.IntN(2) == 0 {
		cfg.StaleHolderTimeout = time.Duration(20+prng.IntN(100)) * time.Second
	}
	cfg.Maintenance = prng.IntN(2) == 0
	if cfg.MaxConcurrent > 1 && prng.IntN(2) == 0 {
		cfg.Domains = 2
	}
	cfg.Preflight = coordinator.Preflight(prng.IntN(3))
	// The gate's change signals, from a stream of their own too.
	if rrng := rand.New(rand.NewPCG(seed, 0x1f0c4a)); rrng.IntN(4) > 0 {
		cfg.InformerChanges = time.Duration(50+rrng.IntN(2950)) * time.Millisecond
	}
	// Node decommission, from a stream of its own: in one run in four of 3 nodes or
	// more (one decommissioned leaves at least two), with a linger from 1 to 5 min (longer than
	// the agent's pod outlives its deleted Node).
	drng := rand.New(rand.NewPCG(seed, 0xdec0))
	cfg.Decommission = cfg.Nodes >= 3 && drng.IntN(4) == 0
	cfg.Policy.DecommissionLinger = time.Duration(60+drng.IntN(240)) * time.Second
	// Status forgers (signed statuses), from a stream of their own: in one run in three.
	cfg.Forgers = rand.New(rand.NewPCG(seed, 0xf0a9e5)).IntN(3) == 0
	// Process pauses between a check and the write that depends on it, in one run in two.
	cfg.ProcessPauses = rand.New(rand.NewPCG(seed, 0x9a05e)).IntN(2) == 0
	// Agent faults (agentfaults.go), from a stream of their own: in one run in two.
	cfg.AgentFaults = rand.New(rand.NewPCG(seed, 0xa6e47)).IntN(2) == 0
	// Operators acting on Node objects (recordons, keep-cordoned, deletions), in one run in two.
	cfg.Operators = rand.New(rand.NewPCG(seed, 0xc04d0)).IntN(2) == 0
	// A replicated NATS cluster's faults (replicas.go), from a stream of their own: in one run
	// in two.
	cfg.ReplicatedBus = rand.New(rand.NewPCG(seed, 0x4e91ca)).IntN(2) == 0
	return cfg
}

// Run runs one seed with its own random plan.
func Run(seed uint64) Result {
	cfg := ConfigFor(seed)
	plan := RandomPlan(cfg, rand.New(rand.NewPCG(seed, 0x91a4)))
	return RunPlan(seed, cfg, plan)
}

// RunPlan runs cfg with the given plan; seed drives every other choice (latencies, lags).
func RunPlan(seed uint64, cfg Config, plan Plan) Result {
	s := newSim(cfg, seed, plan)
	s.w.runUntil(epoch.Add(cfg.Active+cfg.Quiet), s.check)
	if s.w.livelock != "" {
		s.violation = nil
		s.violate("L1", "livelock: more than %d events, the last %q", maxEvents, s.w.livelock)
	}
	s.checkEnd()
	states := make(map[string]bool, len(s.states))
	for k := range s.states {
		states[k.String()] = true
	}
	return Result{Seed: seed, Config: cfg, Plan: plan, Violation: s.violation, Story: s.w.story, Events: s.w.events, States: states,
		Outages: s.outages, Fenced: s.fenced, Policy: s.policyCount, Forged: s.forger.writes, Refused: s.refusals, Repairs: s.repairs,
		CopiesTaken: s.copiesTaken}
}

// Shrink removes happenings from a failing run's plan while the same invariant still breaks,
// and returns the smallest failing run found.
func Shrink(r Result) Result {
	if r.Violation == nil {
		return r
	}
	best := r
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(best.Plan); i++ {
			cand := append(append(Plan{}, best.Plan[:i]...), best.Plan[i+1:]...)
			if out := RunPlan(best.Seed, best.Config, cand); out.Violation != nil && out.Violation.Invariant == r.Violation.Invariant {
				best, changed = out, true
				i--
			}
		}
	}
	return best
}

// Report tells a failing run: the seed, the plan and the story.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %v\n", r.Seed, r.Violation)
	fmt.Fprintf(&b, "cluster: %d nodes, %d coordinator(s), max-concurrent %d, volume policy %s, %d volume(s), %d ReplicaSet(s)\n",
		r.Config.Nodes, r.Config.Coordinators, r.Config.MaxConcurrent, r.Config.VolumePolicy, r.Config.Volumes, r.Config.Groups)
	fmt.Fprintf(&b, "plan: %v\n", r.Plan)
	b.WriteString(story(r.Story, 80))
	return b.String()
}
