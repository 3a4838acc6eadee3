package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// agentProc is one node's agent: the real agent.Step, with its runtime's I/O (bus, state file,
// commands, sentinel files, the override file) performed against the model.
type agentProc struct {
	s     *Sim
	node  *node
	alive bool
	// inc numbers the process's lives: replies to an earlier life are dropped.
	inc       int
	m         agent.Machine
	persisted agent.State
	// guard is the process's agent.StatusGuard: a new process starts with a fresh one.
	guard    *agent.StatusGuard
	conn     *conn
	watch    *watcher
	timerGen int
	// deliveries are the status watch's events its bus layer has not handled yet; checking: it
	// waits to read a delivered status again (see enqueue).
	deliveries []delivery
	checking   bool
	// files on the node's disk: sentinel modification times (0: no file) and the override file.
	sentinel map[agent.Operation]int64
	override *nodedrain.StatusOverride
	// outcome is the agent's outcome file (agent.DefaultOutcomeFile): the request whose command's
	// own shell recorded its success. It is in the pod's memory: an agent restart keeps it, a
	// failing disk does not refuse it, the machine going down or the pod's deletion loses it.
	outcome string
	// cmdRequest is the request whose command took the machine down last.
	cmdRequest  string
	cmdByBus    bool
	cmdDeclared bool // the request it went down for declared a whole-cluster shutdown
	// shutdown: an operator declared a whole-cluster shutdown: the shutdown asked carries the
	// documented context.
	shutdown bool
	// noState: the state file is missing (a new node, or lost): the next start is fresh.
	noState bool
	// podGone: the agent's pod was deleted with its Node (Kubernetes' pod garbage collector):
	// no agent runs on the machine until its Node registers again.
	podGone bool
	// twin is a second agent started with this node's name (a misconfiguration), sharing its
	// machine and files but not its state.
	twin *agentProc
	// f is the process's side of the agent faults (agentfaults.go).
	f agentFaultState
}

func (s *Sim) newAgent(n *node) *agentProc {
	a := &agentProc{s: s, node: n, conn: &conn{b: s.bus, name: "agent/" + n.name}, sentinel: map[agent.Operation]int64{},
		persisted: agent.State{Phase: agent.PhaseIdle}, noState: true}
	a.start()
	return a
}

// later runs f in the agent process after d (late, if the process is paused then).
func (a *agentProc) later(d time.Duration, what string, f func()) {
	inc := a.inc
	a.s.w.after(d, what, func() {
		if a.alive && a.inc == inc {
			a.inProcess(f)
		}
	})
}

// command runs f after d, unless the process died meanwhile (its command with it): what a
// command the agent started does on its own, paused agent or not.
func (a *agentProc) command(d time.Duration, what string, f func()) {
	inc := a.inc
	a.s.w.after(d, what, func() {
		if a.alive && a.inc == inc {
			f()
		}
	})
}

// start runs the agent process: load the state file, EvStart, watch the status, poll files.
func (a *agentProc) start() {
	a.inc++
	a.alive, a.conn.alive = true, true
	a.newLife()
	a.m = agent.Machine{Node: a.node.name, State: wallOnly(a.persisted)} // (as the state file gives it back)
	a.guard = &agent.StatusGuard{Keys: trusted}
	a.deliveries, a.checking = nil, false
	a.step(agent.EvStart{BootID: a.bootID(), Fresh: a.noState, BootTime: a.s.bootTime(a.node), Succeeded: a.outcome})
	a.noState = a.noState && a.f.unsaved > 0 // (no state file yet if its first save failed)
	a.openWatch()
	if a.override != nil {
		o := *a.override
		a.later(a.s.w.between(0, 250*time.Millisecond), "override poll", func() { a.step(agent.EvOverride{Override: &o}) })
	}
	a.later(a.s.w.between(0, 2*time.Second), "sentinel poll", a.pollSentinels)
}

// bootTimeNow is the runtime's Agent.bootTimeNow: the boot time read again (it moves with the
// clock) while the start-up clean-up is pending.
func (a *agentProc) bootTimeNow(before time.Time) time.Time {
	if before.IsZero() {
		return before
	}
	return a.s.bootTime(a.node)
}

// now is time.Now in the agent's process (clocks.go).
func (a *agentProc) now() time.Time { return a.s.agentNow(a.node) }

func (a *agentProc) bootID() string { return fmt.Sprintf("boot-%d", a.node.bootID) }

// openWatch opens the status watch once the bus answers (the agent retries in the background).
func (a *agentProc) openWatch() {
	if !a.conn.connected() {
		a.later(time.Second, "open bus", a.openWatch)
		return
	}
	inc := a.inc
	a.watch = a.s.bus.watch(a.conn, bucketStatus, a.node.name, func(_ string, r revision) {
		if a.alive && a.inc == inc {
			a.inProcess(func() { a.enqueue(delivery{r: r}) })
		}
	}, func() {
		if a.alive && a.inc == inc {
			a.inProcess(func() { a.enqueue(delivery{snapshot: true}) })
		}
	})
}

func (a *agentProc) crash(why string) {
	if !a.alive {
		return
	}
	a.s.w.logf("agent of %s stops (%s)", a.node.name, why)
	a.alive, a.conn.alive = false, false
	if a.watch != nil {
		a.watch.stop()
		a.watch = nil
	}
	if why == "machine down" || why == "machine retired" {
		a.f.caught = nil
	} else {
		a.lockLost()
	}
}

func (a *agentProc) pollSentinels() {
	for _, op := range agent.Operations {
		if mt := a.sentinel[op]; mt != 0 && a.m.State.Phase == agent.PhaseIdle {
			ctx := string(op)
			if op == agent.OpShutdown && a.shutdown {
				ctx = nodedrain.ClusterShutdownContext
			}
			a.step(agent.EvTrigger{Operation: op, Context: ctx, RequestID: a.s.newRequestID(a.node.name),
				Sentinel: "/var/run/" + string(op) + "-required", SentinelModTime: mt})
		}
	}
	a.later(a.s.w.between(5*time.Second, 15*time.Second), "sentinel poll", a.pollSentinels)
}

// step feeds the real agent.Step, saves the state (before acting, as the runtime does) and
// performs the actions. As the runtime (Agent.step), what could not be recorded first is not done
// (agent.NotRecorded: a command's start or a request's publication the state file could not
// record, a command while the override file acted on could not be removed): agent.Step hears of
// it once this step is over, and a failed save is tried again on a timer, a failed removal at
// every step.
func (a *agentProc) step(ev agent.Event) {
	before := a.m.State
	m, actions := agent.Step(a.m, ev, a.now(), a.s.cfg.AgentPolicy)
	a.m = m
	a.noteOverride(ev, before)
	saved := a.save()
	if a.f.overrideLeft {
		a.removeOverride()
	}
	for _, act := range actions {
		var unsaved, left error
		if !saved {
			unsaved = errDiskFault
		}
		if a.f.overrideLeft {
			left = errReadOnly
		}
		if ev := agent.NotRecorded(act, unsaved, left); ev != nil {
			a.f.queue = append(a.f.queue, ev)
			continue
		}
		a.perform(act)
	}
	a.timerGen++
	next := a.m.NextWake()
	if retry := a.f.saveRetryAt; !retry.IsZero() && (next.IsZero() || retry.Before(next)) {
		next = retry
	}
	if !next.IsZero() {
		gen := a.timerGen
		a.later(max(next.Sub(a.now()), 0), "agent timer", func() {
			if gen == a.timerGen {
				a.step(agent.EvTimer{RequestID: a.s.newRequestID(a.node.name)})
			}
		})
	}
	a.drainQueue()
}

func (a *agentProc) perform(act agent.Action) {
	s := a.s
	name := a.node.name
	switch x := act.(type) {
	case agent.PublishRequest:
		req := x.Request
		req.RequestedAt = req.RequestedAt.Round(0) // (what crosses the wire has no monotonic reading)
		inc := a.inc
		before := a.bootTimeNow(x.Before)
		s.bus.op(a.conn, func() error {
			// As the runtime: never over another agent's request.
			if cur, ok := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest); ok &&
				cur.RequestID != req.RequestID && !slices.Contains(x.Own, cur.RequestID) && !agent.Stale(cur, before, x.Boot) {
				return agent.ErrForeignRequest
			}
			s.bus.write(bucketRequests, name, req, "agent/"+name)
			return nil
		}, func(err error) {
			if a.alive && a.inc == inc {
				a.inProcess(func() { a.step(agent.EvBusDone{Publish: true, RequestID: req.RequestID, Err: err}) })
			}
		})
	case agent.WithdrawRequest:
		inc := a.inc
		before := a.bootTimeNow(x.Before)
		s.bus.op(a.conn, func() error {
			// As the runtime: read the request, delete it at that revision only if it is ours,
			// or made before the boot while the start-up clean-up is pending; one made since the
			// boot (by the clock now) is left, and the clean-up tried again.
			r, ok := s.bus.value(bucketRequests, name).(nodedrain.NodeDrainRequest)
			switch {
			case !ok:
			case slices.Contains(x.Own, r.RequestID):
				s.bus.write(bucketRequests, name, nil, "agent/"+name)
			case agent.Stale(r, before, x.Boot):
				s.w.logf("agent of %s withdraws request %s, left from before the boot (made at %s in %s, booted at %s in %s by its clock)",
					name, r.RequestID, r.RequestedAt.Format(time.RFC3339), r.BootID, before.Format(time.RFC3339), x.Boot)
				s.bus.write(bucketRequests, name, nil, "agent/"+name)
			case !before.IsZero():
				return agent.ErrMadeSinceBoot
			}
			return nil
		}, func(err error) {
			if a.alive && a.inc == inc {
				a.inProcess(func() { a.step(agent.EvBusDone{RequestID: x.RequestID, Err: err}) })
			}
		})
	case agent.ReadStatus:
		inc := a.inc
		var read revision
		found := false
		s.forger.onRead(name)
		s.bus.op(a.conn, func() error {
			r, ok, lagged := s.bus.direct(bucketStatus, name) // (a direct get)
			read, found = r, ok && r.val != nil               // (a delete marker: not found, at its revision)
			if lagged {
				s.w.logf("agent of %s: its read is answered by a lagging follower: revision %d", name, r.seq)
			}
			if a.inc == inc { // what S1 judges a run on
				a.f.lastRead = readServed{at: s.w.now, r: read, found: found, ok: true}
			}
			return nil
		}, func(err error) {
			if a.alive && a.inc == inc {
				a.inProcess(func() { a.step(a.readResult(read, found, err)) })
			}
		})
		a.onReadAsked()
	case agent.RunCommand:
		a.runCommand(x)
	case agent.LetShutdownProceed:
		a.letProceed(x)
	case agent.UndrainedShutdown:
		s.w.logf("agent of %s: the %s for request %s went ahead undrained (drain %s)", name, x.Operation, x.RequestID, x.Phase)
	case agent.RemoveOverride:
		a.removeOverride()
	case agent.Report:
		s.w.logf("agent of %s: %s", name, x.Message)
	case agent.DrainFailed:
		s.w.logf("agent of %s: drain %s; asking again at t=%.1fs", name, x.Status, x.RetryAt.Sub(epoch).Seconds())
	case agent.CommandFailed:
		s.w.logf("agent of %s: %s command failed (%s)", name, x.Operation, x.Reason)
	}
}

// runCommand checks S1 and S5, then runs the operation: a reboot or shutdown takes the
// machine down (and brings it back with a new boot ID); an update succeeds or fails.
func (a *agentProc) runCommand(x agent.RunCommand) {
	s := a.s
	byBus := !a.m.State.ClearedBy.Override
	s.w.logf("agent of %s runs the %s command for request %s (cleared by %s)", a.node.name, x.Operation, x.RequestID, a.m.State.ClearedBy)
	if byBus {
		s.checkS1(a, x.RequestID)
	} else {
		s.checkO1(a, x.RequestID)
	}
	if st, ok := s.statusOf(a.node.name).(nodedrain.NodeDrainStatus); ok && st.RequestID == x.RequestID && releasedComplete(st) {
		if a.f.ranReleased == nil {
			a.f.ranReleased = map[string]bool{}
		}
		a.f.ranReleased[x.RequestID] = true
	}
	fails := s.w.chance(s.cfg.CommandFailure)
	if x.Operation == agent.OpDecommission {
		a.node.overridden = !byBus
		a.decommission(x, fails)
		return
	}
	goesDown := x.Operation != agent.OpUpdate || s.cfg.AgentPolicy.UpdateReboots
	// (The command's exit reaches the agent late if it is paused; the machine goes down on the
	// command's own account.)
	a.command(s.w.between(100*time.Millisecond, 2*time.Second), "command done", func() {
		var err error
		if fails {
			err = fmt.Errorf("%s command exited 1 (simulated)", x.Operation)
		}
		if err == nil {
			a.recordOutcome(x.RequestID) // (by the command's shell, paused agent or not)
		}
		if err == nil && x.Operation == agent.OpUpdate {
			s.updateDone(a.node.name)
			s.checkS5Update(a, x.RequestID)
		}
		a.inProcess(func() { a.step(agent.EvCommandDone{RequestID: x.RequestID, Err: err}) })
		if err == nil && goesDown {
			a.cmdRequest, a.cmdByBus = x.RequestID, byBus
			down := func() { s.goDown(a, x.RequestID, byBus) }
			if s.cfg.CatchShutdown {
				// logind announces the command's own shutdown to every lock holder, the agent
				// too, and waits for it (typedreboot.go).
				down = func() { s.logindShutdown(a, "the agent's own command", func() { s.goDown(a, x.RequestID, byBus) }) }
			}
			a.command(s.w.between(100*time.Millisecond, 3*time.Second), "machine goes down", down)
		}
		if a.f.crashArmed && a.diskFailing() {
			a.command(s.w.between(0, time.Second), "agent crash (disk fault)", func() { a.crashAndRestart("crash after its command, its disk failing") })
		}
	})
}

// decommission runs a decommission command: it fails, or it powers the machine off for good,
// either before it returns (the agent never withdraws its request: the coordinator's linger
// removes it) or after (the agent withdraws it first).
func (a *agentProc) decommission(x agent.RunCommand, fails bool) {
	s := a.s
	a.command(s.w.between(100*time.Millisecond, 2*time.Second), "command done", func() {
		switch {
		case fails:
			a.inProcess(func() {
				a.step(agent.EvCommandDone{RequestID: x.RequestID, Err: fmt.Errorf("decommission command exited 1 (simulated)")})
			})
		case s.w.chance(0.5):
			a.retire()
		default:
			a.recordOutcome(x.RequestID)
			a.inProcess(func() { a.step(agent.EvCommandDone{RequestID: x.RequestID}) })
			// The command's own doing, whatever becomes of the agent meanwhile (scenario
			// decommission-powers-off-though-agent-crashed).
			s.w.after(s.w.between(100*time.Millisecond, 3*time.Second), "machine powers off", func() {
				if a.node.up {
					a.retire()
				}
			})
		}
	})
}

// recordOutcome is the command's shell writing the outcome file once the command succeeded.
func (a *agentProc) recordOutcome(rid string) {
	if !a.s.cfg.NoOutcomeFile {
		a.outcome = rid
	}
}

// podDeleted stops the agent with its pod (and the twin with its own): no agent runs on the
// machine until the pod is made again, without the pod's memory (the outcome file).
func (a *agentProc) podDeleted() {
	for _, p := range []*agentProc{a, a.twin} {
		if p != nil {
			p.podGone, p.outcome = true, ""
			p.crash("pod deleted")
		}
	}
}

// retire powers the machine off for good.
func (a *agentProc) retire() {
	n := a.node
	a.s.w.logf("%s is powered off for good (decommissioned)", n.name)
	n.retired = true
	a.crash("machine retired")
	if a.twin != nil {
		a.twin.crash("machine retired")
	}
	a.s.cluster.machineDown(n)
}
