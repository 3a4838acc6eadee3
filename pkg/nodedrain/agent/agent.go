package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/internal/ratelog"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// staleAfter is how long the loop may go without a turn before Healthy reports it stuck.
const staleAfter = 30 * time.Second

// Agent is the runtime around the decision machine: one loop that feeds Step with bus events,
// file polls, local requests, command results and timers, performs its actions, and saves its
// State after every step.
type Agent struct {
	cfg      Config
	log      logrus.FieldLogger
	metrics  *Metrics
	store    *StateStore
	override *overrideFile
	events   chan Event     // from the bus and the commands
	calls    chan localCall // from the local socket
	queue    []Event        // events the loop made itself, handled before waiting again
	bus      *bus
	timer    *time.Timer

	m       Machine
	saved   []byte // the state as last saved
	unsaved saveFailure
	// overrideLeft is the error of the last removal of an override file that was acted on (it
	// let an operation run), nil once removed: no command starts meanwhile (NotRecorded), and the
	// removal is tried again at every step.
	overrideLeft error
	view         View       // the effective status last logged
	call         *localCall // the local request being stepped
	sentinelErr  map[Operation]string
	foreignLog   ratelog.Limiter
	heartbeat    atomic.Int64
	// catcher holds the logind locks when catching shutdowns (nil: not); wroteDropIn says the
	// agent raised InhibitDelayMaxSec with its drop-in (catching.go).
	catcher     *catcher
	wroteDropIn bool
	// shuttingDown: logind says a shutdown is under way (PreparingForShutdown): the locks, once
	// let go, are not taken again until it is called off.
	shuttingDown bool
}

// New checks cfg and returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		cfg.Logger = l
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.WithField("node", cfg.Node), metrics: cfg.Metrics,
		store: NewStateStore(cfg.StateDir), override: newOverrideFile(cfg.OverrideFile),
		events: make(chan Event, 64), calls: make(chan localCall), sentinelErr: map[Operation]string{}}
	a.heartbeat.Store(time.Now().UnixNano())
	return a, nil
}

// Healthy reports an error when the agent's loop has not turned for a while.
func (a *Agent) Healthy() error {
	if since := time.Since(time.Unix(0, a.heartbeat.Load())); since > staleAfter {
		return fmt.Errorf("agent loop stuck for %s", since.Round(time.Second))
	}
	return nil
}

// Run works until ctx ends and returns nil then; it fails early only when it cannot start (the
// boot ID cannot be read, the state file cannot be read, the socket cannot be opened). Ending
// Run never starts or stops a command: a command under way goes on, and the state file lets
// the next Run carry on.
func (a *Agent) Run(ctx context.Context) error {
	boot, err := ReadBootID(a.cfg.BootIDFile)
	if err != nil {
		return err
	}
	st, fresh, err := a.loadState()
	if err != nil {
		return err
	}
	a.m = Machine{Node: a.cfg.Node, State: st}
	a.saved = encodeForCompare(st)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.cfg.Socket != "" {
		l, err := listenSocket(a.cfg.Socket)
		if err != nil {
			return err
		}
		// Closed (and so unlinked) before Run returns, not by serveSocket's goroutine later: a
		// late close unlinked the socket of an agent started meanwhile on the same path.
		defer l.Close()
		go serveSocket(ctx, l, a.calls, a.log)
	}
	a.bus = newBus(a.cfg.JetStream, a.cfg.Node, a.cfg.TrustedKeys, a.log.WithField("component", "bus"), a.metrics, a.events)
	a.bus.probe = a.cfg.APIProbe
	go a.bus.run(ctx)
	a.timer = time.NewTimer(time.Hour)
	a.timer.Stop()
	defer a.timer.Stop()
	caught := a.startCatching(ctx)
	defer a.stopCatching()

	a.log.WithFields(logrus.Fields{"phase": st.Phase, "operation": st.Operation, "request": st.RequestID,
		"bootID": boot}).Info("agent starting")
	if err := checkOutcomePath(a.cfg.OutcomeFile); err != nil {
		a.log.WithError(err).Warn("outcome file off: a command that succeeded just before an agent restart may run again")
		a.cfg.OutcomeFile = ""
	}
	start := EvStart{BootID: boot, Fresh: fresh, Succeeded: ReadOutcome(a.cfg.OutcomeFile)}
	if a.cfg.OutcomeFile != "" {
		if err := os.MkdirAll(filepath.Dir(a.cfg.OutcomeFile), 0o755); err != nil {
			a.log.WithError(err).Warn("cannot make the outcome file's directory: a command that succeeded just before an agent restart may run again")
		}
	}
	if fresh && a.cfg.BootTimeFile != "" {
		bt, err := ReadBootTime(a.cfg.BootTimeFile)
		if err != nil {
			a.log.WithError(err).Warn("cannot read the node's boot time")
		}
		start.BootTime = bt
	}
	a.step(ctx, start)
	poll := time.NewTicker(a.pollEvery())
	defer poll.Stop()
	a.tick(ctx)
	var sentinel *time.Timer
	var sentinelC <-chan time.Time // nil: no sentinel files configured
	if a.haveSentinels() {
		sentinel = time.NewTimer(jittered(0, a.cfg.SentinelJitter))
		defer sentinel.Stop()
		sentinelC = sentinel.C
	}
	for {
		a.heartbeat.Store(time.Now().UnixNano())
		for len(a.queue) > 0 && ctx.Err() == nil {
			ev := a.queue[0]
			a.queue = a.queue[1:]
			a.step(ctx, ev)
		}
		select {
		case <-ctx.Done():
			a.entry().Info("agent stopping; nothing is undone, the state file keeps the operation")
			return nil
		case ev := <-a.events:
			a.step(ctx, ev)
		case sig := <-caught:
			a.onCaught(ctx, sig)
		case c := <-a.calls:
			a.local(ctx, c)
		case <-poll.C:
			a.tick(ctx)
		case <-sentinelC:
			a.checkSentinels(ctx)
			sentinel.Reset(jittered(a.cfg.SentinelInterval, a.cfg.SentinelJitter))
		case <-a.timer.C:
			a.step(ctx, EvTimer{RequestID: a.newRequestID()})
		}
	}
}

func (a *Agent) pollEvery() time.Duration {
	if a.cfg.OverrideFile == "" {
		return time.Second
	}
	return a.cfg.OverridePoll
}

func (a *Agent) haveSentinels() bool {
	for _, p := range a.cfg.Sentinels {
		if p != "" {
			return true
		}
	}
	return false
}

// loadState reads the state file; a corrupt one is moved aside and the agent starts idle
// (withdrawing any request: a sentinel still present asks again), never running a command on
// the strength of a file it cannot read.
// fresh is true when there was no usable state file.
func (a *Agent) loadState() (st State, fresh bool, err error) {
	if _, serr := os.Stat(a.store.Path()); errors.Is(serr, fs.ErrNotExist) {
		fresh = true
	}
	st, err = a.store.Load()
	if err == nil || !errors.Is(err, ErrCorruptState) {
		return st, fresh, err
	}
	a.metrics.StateErrors.Inc()
	moved, qerr := a.store.Quarantine(a.cfg.Now())
	if qerr != nil {
		return State{}, false, fmt.Errorf("%w; and %w", err, qerr)
	}
	a.log.WithError(err).WithField("movedTo", moved).Error("state file unreadable: moved aside; starting with no operation (a request served for this node is taken for this agent's and withdrawn)")
	return State{Phase: PhaseIdle}, true, nil
}

// tick polls the override file and refreshes the bus connection gauge.
func (a *Agent) tick(ctx context.Context) {
	connected := 0.0
	if pubsub.Connected(a.cfg.JetStream.Conn()) {
		connected = 1
	}
	a.metrics.BusConnected.Set(connected)
	if a.cfg.OverrideFile == "" {
		return
	}
	ch := a.override.poll()
	if ch.Err != nil {
		a.metrics.OverrideErrors.Inc()
		a.entry().WithError(ch.Err).Warn("ignoring the override file: it changes nothing")
	}
	if !ch.Changed {
		return
	}
	if ch.Override != nil {
		a.entry().WithField("override", ch.Override.Status.String()).Warn("override file in force: it replaces the bus status for this node")
	} else {
		a.entry().Info("override file removed: following the bus status again")
	}
	a.step(ctx, EvOverride{Override: ch.Override})
}

func (a *Agent) checkSentinels(ctx context.Context) {
	for _, op := range Operations {
		path := a.cfg.Sentinels[op]
		if path == "" {
			continue
		}
		hit, found, err := checkSentinel(op, path)
		if err != nil {
			a.sentinelError(op, err)
			continue
		}
		if !found || a.m.State.Phase != PhaseIdle {
			delete(a.sentinelErr, op)
			continue
		}
		opContext, err := requestContext(op, hit.context) // a decommission's declares it
		if err != nil {
			a.sentinelError(op, fmt.Errorf("%s sentinel %s: %w", op, path, err))
			continue
		}
		delete(a.sentinelErr, op)
		a.step(ctx, EvTrigger{Operation: op, Context: opContext, RequestID: a.newRequestID(),
			Sentinel: path, SentinelModTime: hit.modTime})
	}
}

// sentinelError logs err about op's sentinel file, once until it changes.
func (a *Agent) sentinelError(op Operation, err error) {
	if a.sentinelErr[op] != err.Error() {
		a.sentinelErr[op] = err.Error()
		a.entry().WithError(err).Warn("cannot act on a sentinel file")
	}
}

// local answers a request from the socket.
func (a *Agent) local(ctx context.Context, c localCall) {
	if c.req.Command == CmdStatus {
		r := a.report()
		c.reply <- SocketReply{OK: true, Status: &r}
		return
	}
	op := c.req.Operation
	refuse := func(msg string) {
		a.entry().WithField("operation", op).Warnf("local request refused: %s", msg)
		c.reply <- SocketReply{Error: msg}
	}
	if a.cfg.Commands[op] == "" {
		refuse(noCommand(op))
		return
	}
	opContext, err := requestContext(op, c.req.Context)
	if err != nil {
		refuse(err.Error())
		return
	}
	a.call = &c
	a.step(ctx, EvTrigger{Operation: op, Context: opContext, RequestID: a.newRequestID()})
	if a.call != nil {
		a.call = nil
		c.reply <- SocketReply{Error: "agent is stopping"}
	}
}

func (a *Agent) report() StatusReport {
	v := a.m.Effective()
	return StatusReport{Node: a.cfg.Node, Status: v.Status, StatusName: v.Status.String(), Source: v.Source,
		Message: v.Message, Bus: a.m.Bus, BusConnected: pubsub.Connected(a.cfg.JetStream.Conn()),
		Override: a.m.Override, State: a.m.State}
}

// noteForeign counts (and logs, sampled) a bus status answering a request this agent never
// made. Step ignores such a status for clearing; this only makes it visible.
func (a *Agent) noteForeign(ev Event) {
	e, ok := ev.(EvBusStatus)
	if !ok || e.Status == nil || e.Status.RequestID == "" || a.m.State.mine(e.Status.RequestID) {
		return
	}
	a.metrics.ForeignStatuses.Inc()
	a.foreignLog.Logger("foreign-status", a.entry()).WithFields(logrus.Fields{"answers": e.Status.RequestID, "status": e.Status.Status}).
		Warn("a drain status on the bus answers a request this agent never made: it clears nothing")
}

// step feeds one event to the machine, saves the state, then performs the actions.
func (a *Agent) step(ctx context.Context, ev Event) {
	if ctx.Err() != nil {
		return
	}
	a.noteForeign(ev)
	m, actions := Step(a.m, ev, a.cfg.Now(), a.cfg.Limits)
	a.m = m
	saved := a.persist()
	if a.overrideLeft != nil {
		a.consumeOverride()
	}
	for _, act := range actions {
		var unsaved error
		if !saved {
			unsaved = a.unsaved.err
		}
		if ev := NotRecorded(act, unsaved, a.overrideLeft); ev != nil {
			a.queue = append(a.queue, ev)
			continue
		}
		a.perform(ctx, act)
	}
	a.metrics.observe(a.m)
	a.syncLocks()
	if v := a.m.Effective(); v != a.view {
		// A new status or request is news; a new message (eviction progress) is detail.
		news := v.Status != a.view.Status || v.RequestID != a.view.RequestID || v.Source != a.view.Source
		a.view = v
		msg := v.Message
		if msg == "" {
			msg = "(no message)"
		}
		e := a.entry().WithFields(logrus.Fields{"source": v.Source, "answers": v.RequestID})
		if news {
			e.Infof("drain status %s: %s", v.Status, msg)
		} else {
			e.Debugf("drain status %s: %s", v.Status, msg)
		}
	}
	a.timer.Stop()
	next := a.m.NextWake()
	if retry := a.unsaved.retryAt; !retry.IsZero() && (next.IsZero() || retry.Before(next)) {
		next = retry // a failed save is tried again then, even if nothing else happens
	}
	if !next.IsZero() {
		a.timer.Reset(max(next.Sub(a.cfg.Now()), 0))
	}
}

// entry is a log entry with the standard fields.
func (a *Agent) entry() *logrus.Entry {
	st := a.m.State
	e := a.log.WithField("status", a.m.Effective().Status.String())
	if st.RequestID != "" {
		e = e.WithFields(logrus.Fields{"request": st.RequestID, "operation": st.Operation, "phase": st.Phase})
	}
	return e
}

// consumeOverride removes the override file that was acted on (it let the operation run). When it
// cannot, no command starts until it can (it is tried again at every step): an agent restarted
// meanwhile would read the file again, and it would let the next operation run without a drain.
func (a *Agent) consumeOverride() {
	if err := os.Remove(a.cfg.OverrideFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if a.overrideLeft == nil {
			a.entry().WithError(err).Error("override acted on (it let the operation run) but its file cannot be removed: " +
				"no operation command starts until it is (it is tried again), or the file would let the next operation run without a drain")
		}
		a.overrideLeft = err
		return
	}
	a.override.forget()
	a.overrideLeft = nil
	a.entry().Info("override acted on (it let the operation run): file removed, the next operation waits for its drain")
}

// newRequestID returns a request ID unique per request: a node prefix, the time and 128 random
// bits. The agent acts on a COMPLETE only for this ID, and no other node can read it (bus
// permissions; the coordinator's Node annotation holds only a digest), so another node cannot
// forge a status this agent would act on, even through a server copy (docs/security.md).
func (a *Agent) newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	prefix := a.cfg.Node
	if len(prefix) > 64 {
		prefix = strings.TrimRight(prefix[:64], ".-")
	}
	return prefix + "-" + a.cfg.Now().UTC().Format("20060102T150405.000Z") + "-" + hex.EncodeToString(b[:])
}
