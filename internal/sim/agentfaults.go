package sim

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// Agent faults: what an agent's process and its node's disk do to it, as unkind as reality.
//
//   - A pause (SIGSTOP, a frozen cgroup, a starved CPU): the process handles nothing for a while.
//     Everything that happens to it meanwhile — its status watch's deliveries, the replies to its
//     bus requests (a confirmation read's too), its timers, its command's exit, its file polls —
//     is held and handled in order when it resumes, late; the bus serves what it had sent, and a
//     command it started runs on (the machine goes down when the command says so).
//   - A disk fault: the state file cannot be saved (a full disk), or neither it nor the override
//     file can be written or removed (read-only; the override file's mount for half as long
//     again). The runtime then does nothing the file does not record first (agent.NotRecorded:
//     no command starts, no request is published, nor a command started while the override file
//     acted on is left) and tries the save again with backoff. The agent crashes at the worst
//     moment: right after its command returned while the fault lasts, or else late in it.
//   - An override file saying NOTSUPPORTED, which lets the operation run as a COMPLETE does.
//   - An agent alive but cut off from the bus, or paused, while its node stays NotReady past the
//     stale-holder timeout: the coordinator releases its slot (a stale holder's) under a live
//     agent, which must not run its operation on that COMPLETE.
//
// Pauses and isolations strike at once, or (the "at read" kinds) as the agent next asks for its
// confirmation read: between a COMPLETE and the command, where they matter.

// The agent fault kinds (random plans draw them after every other happening: appendAgentFaults).
const (
	AgentPause          Kind = "agent-pause"                // the agent process is paused for For
	AgentPauseAtRead    Kind = "agent-pause-at-read"        // ... from its next confirmation read
	DiskFull            Kind = "agent-disk-full"            // the state file cannot be saved for For
	DiskReadOnly        Kind = "agent-disk-read-only"       // ... nor the override file removed
	OverrideUnsupported Kind = "override-notsupported"      // an operator writes the override file: NOTSUPPORTED
	AgentCutNotReady    Kind = "agent-cut-node-notready"    // from its next read, the agent cut off and its node NotReady past the stale-holder timeout
	AgentPausedNotReady Kind = "agent-paused-node-notready" // ... the agent paused
)

// agentFaultKinds are weighted like faultKinds.
var agentFaultKinds = []weightedKind{
	{AgentPause, 2}, {AgentPauseAtRead, 3}, {DiskFull, 2}, {DiskReadOnly, 2}, {OverrideUnsupported, 2},
	{AgentCutNotReady, 2}, {AgentPausedNotReady, 2},
}

// armWindow is how long an "at read" fault waits for the agent's next confirmation read before
// it strikes anyway.
const armWindow = 3 * time.Minute

// errDiskFault is a state save's failure under a disk fault; errReadOnly an override file's
// removal's under a read-only one.
var (
	errDiskFault = errors.New("write /var/lib/edgedrain/agent/state.json: read-only file system or no space left on device (simulated)")
	errReadOnly  = errors.New("remove /persist/kube-status/force-NodeDrainStatus-global.json: read-only file system (simulated)")
)

// saveRetryMax mirrors the agent runtime's bound on the backoff of a failed state save.
const saveRetryMax = time.Minute

// appendAgentFaults draws one or two agent faults onto p when cfg has them (drawn after every
// other draw: plans of runs without them stay what they were).
func appendAgentFaults(p Plan, cfg Config, rng *rand.Rand, at func() time.Duration) Plan {
	if !cfg.AgentFaults {
		return p
	}
	for range 1 + rng.IntN(2) {
		k := drawKind(agentFaultKinds, rng)
		d := time.Duration(1+rng.IntN(40)) * time.Second
		switch k {
		case DiskFull, DiskReadOnly:
			d = time.Duration(5+rng.IntN(90)) * time.Second
		case AgentCutNotReady, AgentPausedNotReady:
			d = time.Duration(5+rng.IntN(60)) * time.Second // beyond the stale-holder timeout
		}
		p = append(p, Fault{At: at(), Kind: k, Target: rng.IntN(cfg.Nodes), For: d})
	}
	return p
}

// agentFaultState is an agent process's side of the agent faults, and what the checks follow of
// its reads, runs and overrides.
type agentFaultState struct {
	// caught: a typed reboot logind holds back for this process's lock (typedreboot.go).
	caught *caughtShutdown
	// paused: the process handles nothing; held are the things that happened to it meanwhile.
	paused   bool
	pauseEnd time.Time
	held     []func()
	// armed strikes at the agent's next confirmation read (until armedUntil).
	armed      []func()
	armedUntil time.Time
	// diskUntil: the state file cannot be saved until then; persistROUntil: the override file
	// cannot be removed until then (its mount, read-only, is made writable again later than the
	// state's). unsaved counts the failed saves in a row; saveRetryAt is when the runtime tries
	// again without waiting for an event. crashArmed: the agent crashes right after its next
	// command returns while the fault lasts.
	diskUntil, persistROUntil time.Time
	// overrideLeft: the override file acted on could not be removed; tried again at every step
	// (the runtime's Agent.overrideLeft), no command starts meanwhile.
	overrideLeft bool
	unsaved      int
	saveRetryAt  time.Time
	crashArmed   bool
	// queue holds the events the runtime made itself (agent.NotRecorded's), handled after the step.
	queue    []agent.Event
	draining bool
	// lastRead is the last confirmation read the bus served for this life of the process: when,
	// and what the key held then (found false: nothing).
	lastRead readServed
	// overrideID numbers the override file overrideFile (each write is a new one); fedOverride
	// is the one this life of the process last fed to agent.Step (0: none); clearedBy maps a
	// request to the override that cleared its operation.
	overrideFile            *nodedrain.StatusOverride
	overrideID, fedOverride int
	clearedBy               map[string]int
	// overrideOps maps an override file to the requests whose operation it let run (O1);
	// updates counts the successful update commands per request (S5); ranReleased lists the
	// requests whose command started while the bus showed their COMPLETE with its slot released
	// (S3).
	overrideOps map[int]map[string]bool
	updates     map[string]int
	ranReleased map[string]bool
}

type readServed struct {
	at    time.Time
	r     revision
	found bool
	ok    bool
}

// inProcess runs f as the agent process does: at once, or, while it is paused, when it resumes
// (unless it died meanwhile).
func (a *agentProc) inProcess(f func()) {
	if !a.f.paused {
		f()
		return
	}
	inc := a.inc
	a.f.held = append(a.f.held, func() {
		if a.alive && a.inc == inc {
			f()
		}
	})
}

// pause stops the process for d (a pause within a pause lasts to the later end).
func (a *agentProc) pause(d time.Duration, why string) {
	if !a.alive {
		return
	}
	end := a.s.w.now.Add(d)
	if a.f.paused && !end.After(a.f.pauseEnd) {
		return
	}
	a.s.w.logf("the agent of %s is paused for %s (%s)", a.node.name, d, why)
	a.f.paused, a.f.pauseEnd = true, end
	inc := a.inc
	a.s.w.at(end, "agent resumes", func() {
		if a.alive && a.inc == inc && !a.s.w.now.Before(a.f.pauseEnd) {
			a.resume()
		}
	})
}

// resume handles, in order, what happened to the paused process.
func (a *agentProc) resume() {
	if !a.f.paused {
		return
	}
	a.s.w.logf("the agent of %s resumes: %d things happened to it meanwhile", a.node.name, len(a.f.held))
	a.f.paused = false
	held := a.f.held
	a.f.held = nil
	for _, f := range held {
		f()
	}
}

// newLife resets what belongs to one life of the process (start).
func (a *agentProc) newLife() {
	a.f.paused, a.f.held, a.f.queue, a.f.draining = false, nil, nil, false
	a.f.lastRead, a.f.fedOverride = readServed{}, 0
	a.f.unsaved, a.f.saveRetryAt, a.f.overrideLeft = 0, time.Time{}, false
}

// diskFailing reports whether the node's disk refuses the state file's saves now.
func (a *agentProc) diskFailing() bool { return a.s.w.now.Before(a.f.diskUntil) }

// save is the runtime's persist: the state file takes the machine's State, unless the disk
// refuses it. It reports whether the file holds the machine's State now.
func (a *agentProc) save() bool {
	if !a.diskFailing() {
		a.persisted, a.f.unsaved, a.f.saveRetryAt = a.m.State, 0, time.Time{}
		return true
	}
	if sameState(a.m.State, a.persisted) {
		a.f.unsaved, a.f.saveRetryAt = 0, time.Time{}
		return true
	}
	a.f.unsaved++
	a.f.saveRetryAt = a.now().Add(nodedrain.Backoff(a.f.unsaved, a.s.cfg.AgentPolicy.BusRetry, saveRetryMax))
	if a.f.unsaved == 1 {
		a.s.w.logf("agent of %s cannot save its state (disk fault)", a.node.name)
	}
	return false
}

// sameState compares states as the runtime does (their encoding).
func sameState(x, y agent.State) bool {
	bx, err1 := json.Marshal(x)
	by, err2 := json.Marshal(y)
	return err1 == nil && err2 == nil && string(bx) == string(by)
}

// drainQueue handles the events the runtime made itself, after the step that made them.
func (a *agentProc) drainQueue() {
	if a.f.draining {
		return
	}
	a.f.draining = true
	for len(a.f.queue) > 0 && a.alive {
		if a.f.paused { // (paused in the step that queued them: handled when it resumes)
			a.inProcess(a.drainQueue)
			break
		}
		ev := a.f.queue[0]
		a.f.queue = a.f.queue[1:]
		a.step(ev)
	}
	a.f.draining = false
}

// onReadAsked is the agent asking for a confirmation read: an armed fault strikes now.
func (a *agentProc) onReadAsked() {
	if len(a.f.armed) == 0 {
		return
	}
	armed := a.f.armed
	a.f.armed = nil
	if a.s.quiet || a.s.w.now.After(a.f.armedUntil) {
		return
	}
	for _, f := range armed {
		f()
	}
}

// arm has f strike at the agent's next confirmation read, or after armWindow if none comes.
func (a *agentProc) arm(f func()) {
	a.f.armed = append(a.f.armed, f)
	a.f.armedUntil = a.s.w.now.Add(armWindow)
	until := a.f.armedUntil
	a.s.w.at(until, "armed agent fault", func() {
		if a.s.quiet || !a.f.armedUntil.Equal(until) || len(a.f.armed) == 0 {
			return
		}
		armed := a.f.armed
		a.f.armed = nil
		for _, g := range armed {
			g()
		}
	})
}

// applyAgentFault makes an agent fault happen.
func (s *Sim) applyAgentFault(f Fault) {
	w := s.w
	a := s.agents[f.Target%len(s.agents)]
	switch f.Kind {
	case AgentPause:
		a.pause(f.For, "a fault")
	case AgentPauseAtRead:
		w.logf("the agent of %s will be paused at its next confirmation read", a.node.name)
		a.arm(func() { a.pause(f.For, "at its confirmation read") })
	case DiskFull, DiskReadOnly:
		w.logf("the disk of %s refuses writes for %s (read-only %v)", a.node.name, f.For, f.Kind == DiskReadOnly)
		if until := w.now.Add(f.For); until.After(a.f.diskUntil) {
			a.f.diskUntil = until
		}
		if until := w.now.Add(f.For * 3 / 2); f.Kind == DiskReadOnly && until.After(a.f.persistROUntil) {
			a.f.persistROUntil = until
		}
		// The agent crashes while the disk fails: right after its command returns, or else
		// late in the fault.
		a.f.crashArmed = true
		inc := a.inc
		w.after(w.between(f.For/2, f.For), "agent crash (disk fault)", func() {
			if a.inc == inc && a.f.crashArmed && a.diskFailing() {
				a.crashAndRestart("crash while its disk fails")
			}
		})
		w.at(a.f.diskUntil, "disk whole", func() {
			if !a.diskFailing() {
				a.f.crashArmed = false
			}
		})
	case OverrideUnsupported:
		a.writeOverride(nodedrain.StatusNotSupported)
	case AgentCutNotReady, AgentPausedNotReady:
		w.logf("the agent of %s will be isolated, its node NotReady, at its next confirmation read", a.node.name)
		a.arm(func() {
			if s.quiet {
				return
			}
			d := s.cfg.StaleHolderTimeout + f.For
			if s.cfg.StaleHolderTimeout == 0 {
				d = 20*time.Second + f.For
			}
			s.apply(Fault{Kind: KubeletDown, Target: f.Target, For: d})
			iso := max(d+w.between(-10*time.Second, 20*time.Second), s.cfg.StaleHolderTimeout+2*time.Second)
			if f.Kind == AgentPausedNotReady {
				a.pause(iso, "while its node is NotReady")
				return
			}
			s.apply(Fault{Kind: AgentCut, Target: f.Target, For: iso})
		})
	}
}

// writeOverride is an operator writing the override file on the agent's node (as the Override
// fault does, with COMPLETE).
func (a *agentProc) writeOverride(st nodedrain.DrainStatus) {
	w := a.s.w
	w.logf("an operator writes the override file on %s: %s", a.node.name, st)
	o := nodedrain.StatusOverride{Status: st}
	a.override = &o
	a.later(w.between(0, 250*time.Millisecond), "override poll", func() { a.step(agent.EvOverride{Override: &o}) })
}

// noteOverride follows which override file (each write is a new one) the process feeds to
// agent.Step, and which one cleared each operation (O1).
func (a *agentProc) noteOverride(ev agent.Event, before agent.State) {
	if e, ok := ev.(agent.EvOverride); ok {
		a.f.fedOverride = 0
		if e.Override != nil && a.override != nil {
			if a.override != a.f.overrideFile {
				a.f.overrideFile, a.f.overrideID = a.override, a.f.overrideID+1
			}
			a.f.fedOverride = a.f.overrideID
		}
	}
	st := a.m.State
	if st.ClearedBy.Override && (before.ClearedBy != st.ClearedBy || before.RequestID != st.RequestID) {
		if a.f.clearedBy == nil {
			a.f.clearedBy = map[string]int{}
		}
		a.f.clearedBy[st.RequestID] = a.f.fedOverride
	}
}

// crashAndRestart crashes the agent process and starts it again a few seconds later.
func (a *agentProc) crashAndRestart(why string) {
	a.f.crashArmed = false
	a.crash(why)
	a.s.w.after(a.s.w.between(2*time.Second, 10*time.Second), "agent restart", func() {
		if a.node.up && !a.alive && !a.node.retired && !a.podGone {
			a.s.w.logf("agent of %s restarts", a.node.name)
			a.start()
		}
	})
}

// removeOverride is the runtime removing the override file acted on: it fails on a read-only disk
// (the file, ignored by this process until it changes, is read again by the next one).
func (a *agentProc) removeOverride() {
	if a.s.w.now.Before(a.f.persistROUntil) {
		if !a.f.overrideLeft {
			a.s.w.logf("agent of %s cannot remove the override file (read-only disk)", a.node.name)
		}
		a.f.overrideLeft = true
		return
	}
	if a.override != nil {
		a.s.w.logf("agent of %s removes the override file acted on", a.node.name)
	}
	a.override, a.f.overrideLeft = nil, false
}

// healAgentFaults ends the agent faults (the quiet period): paused agents resume, disks work.
func (s *Sim) healAgentFaults() {
	for _, a := range s.agents {
		for _, p := range []*agentProc{a, a.twin} {
			if p == nil {
				continue
			}
			p.f.armed, p.f.diskUntil, p.f.persistROUntil, p.f.crashArmed = nil, time.Time{}, time.Time{}, false
			if p.alive {
				p.resume()
			}
		}
	}
}
