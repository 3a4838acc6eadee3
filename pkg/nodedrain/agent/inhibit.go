package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// CatchMode says how the agent meets shutdowns it did not ask for (caught.go has the machine's
// side): through logind's inhibitor locks on "shutdown", which cover reboots and power-offs.
type CatchMode string

const (
	// CatchOff takes no lock: a reboot typed on the node goes ahead undrained.
	CatchOff CatchMode = "off"
	// CatchDelay holds a delay lock: logind announces the shutdown (PrepareForShutdown) and
	// waits, at most InhibitDelayMaxSec, until the agent lets it go, after the drain.
	CatchDelay CatchMode = "delay"
	// CatchBlock holds a block lock too, whose reason tells the person to ask the agent
	// instead: the callers logind checks are refused; those it lets through (root on systemd
	// before 257, see docs/concepts/agent.md) are caught by the delay lock.
	CatchBlock CatchMode = "block"
)

// ParseCatchMode parses off, delay or block.
func ParseCatchMode(s string) (CatchMode, error) {
	switch m := CatchMode(strings.ToLower(strings.TrimSpace(s))); m {
	case CatchOff, CatchDelay, CatchBlock:
		return m, nil
	case "":
		return CatchOff, nil
	}
	return "", fmt.Errorf("catch-shutdown mode %q: want off, delay or block", s)
}

// DefaultLogindConfDir is where the agent puts its logind drop-in raising InhibitDelayMaxSec.
const DefaultLogindConfDir = "/etc/systemd/logind.conf.d"

// logindDropIn is the drop-in's name: after the kubelet's (99-kubelet.conf), so that its value
// is the one logind takes.
const logindDropIn = "zz-edgedrain-agent.conf"

// MaxInhibitDelay bounds --inhibit-delay-max: a shutdown typed on the node is never held longer.
const MaxInhibitDelay = time.Hour

const blockWhy = "edgedrain drains this node before it goes down: ask with `agent request reboot` " +
	"(or `agent request shutdown`) in the edgedrain agent's pod, or edgedrainctl"

// caughtSignal is logind's PrepareForShutdown as the catcher hands it to the agent's loop.
type caughtSignal struct {
	start bool
	op    Operation
	what  string // what logind said is coming, for the request's context
	// stopping: logind called its shutdown off, but systemd is stopping the machine all the same
	// (another shutdown's job took its place): the node still goes down.
	stopping bool
}

// catcher holds the agent's inhibitor locks on the system bus and listens for
// PrepareForShutdown. Its goroutine (run) owns the D-Bus connection and takes the locks while
// they are wanted; the agent's loop says when they are (hold, release).
type catcher struct {
	mode    CatchMode
	address string
	log     logrus.FieldLogger
	out     chan<- caughtSignal
	kick    chan struct{}
	locked  prometheus.Gauge // 1 while the delay lock is held

	mu        sync.Mutex
	want      bool // the locks are wanted (not let go for a shutdown)
	noBlock   bool // the block lock is let go (the agent's own command runs)
	delayFD   int  // -1: none held
	blockFD   int
	announced bool // the PreparingForShutdown last handed to the agent's loop
}

func newCatcher(mode CatchMode, address string, log logrus.FieldLogger, out chan<- caughtSignal, locked prometheus.Gauge) *catcher {
	return &catcher{mode: mode, address: address, log: log, out: out, kick: make(chan struct{}, 1), locked: locked,
		want: true, delayFD: -1, blockFD: -1}
}

// hold asks for the delay lock to be held again, and the block lock too when block (the
// agent's own command is not under way); idempotent.
func (c *catcher) hold(block bool) {
	c.mu.Lock()
	changed := !c.want || (block && c.noBlock)
	c.want = true
	if block {
		c.noBlock = false
	}
	c.mu.Unlock()
	if changed {
		c.poke()
	}
}

// release lets go of the locks at once (closing their descriptors is enough: logind goes on as
// soon as no delay lock is left), until hold.
func (c *catcher) release(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = false
	held := c.delayFD >= 0 || c.blockFD >= 0
	c.closeLocked()
	if held {
		c.log.WithField("why", why).Info("logind inhibitor locks released: a shutdown held back goes ahead")
	}
}

// releaseBlock lets go of the block lock only (before the agent's own command, which it would
// refuse); the delay lock stays.
func (c *catcher) releaseBlock() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noBlock = true
	if c.blockFD >= 0 {
		_ = syscall.Close(c.blockFD)
		c.blockFD = -1
	}
}

func (c *catcher) closeLocked() {
	for _, fd := range []*int{&c.delayFD, &c.blockFD} {
		if *fd >= 0 {
			_ = syscall.Close(*fd)
			*fd = -1
		}
	}
	c.locked.Set(0)
}

func (c *catcher) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run keeps a connection to the system bus, the wanted locks and the PrepareForShutdown
// subscription until ctx ends; a lost bus is reconnected.
func (c *catcher) run(ctx context.Context) {
	defer func() {
		c.mu.Lock()
		c.closeLocked()
		c.mu.Unlock()
	}()
	warned := ""
	for wait := time.Second; ctx.Err() == nil; {
		listened, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			wait, warned = time.Second, "" // (it worked for a while: a fresh start)
		}
		if c.shuttingDown() {
			c.log.WithError(err).Warn("logind: lost the system bus while a shutdown is under way: a lock still held stays until the drain lets it go (reconnecting)")
		} else {
			// Deaf, a lock would only hold every shutdown back blindly, the agent's own too.
			c.mu.Lock()
			c.closeLocked()
			c.mu.Unlock()
			if err.Error() != warned {
				c.log.WithError(err).Warn("logind: no lock held; a reboot typed on the node goes ahead undrained until this is fixed (retrying)")
				warned = err.Error()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// callTimeout bounds each call to the bus: a wedged logind or bus must not stall the catcher.
const callTimeout = 10 * time.Second

// agentWho is the "who" of the agent's inhibitor locks.
const agentWho = "edgedrain-agent"

// session is one connection to the bus: subscribe, say whether a shutdown is under way, take
// the locks, hand on the announcements. It returns when the connection fails (listened: it got
// as far as listening).
func (c *catcher) session(ctx context.Context) (listened bool, err error) {
	conn, err := dbus.Connect(c.address, dbus.WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("cannot reach the system D-Bus at %s: %w", c.address, err)
	}
	defer conn.Close()
	signals := make(chan *dbus.Signal, 16)
	conn.Signal(signals)
	if err := conn.AddMatchSignal(dbus.WithMatchSender(logindName), dbus.WithMatchObjectPath(logindPath),
		dbus.WithMatchInterface(logindName+".Manager"), dbus.WithMatchMember("PrepareForShutdown")); err != nil {
		return false, fmt.Errorf("subscribing to logind's PrepareForShutdown: %w", err)
	}
	// logind restarting drops a shutdown it held back without saying so: its new connection
	// is the cue to read PreparingForShutdown again.
	if err := conn.AddMatchSignal(dbus.WithMatchSender("org.freedesktop.DBus"), dbus.WithMatchInterface("org.freedesktop.DBus"),
		dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, logindName)); err != nil {
		return false, fmt.Errorf("subscribing to logind's restarts: %w", err)
	}
	// Whatever the locks do: a shutdown under way (the agent restarted during one), or none
	// any more (one called off while the bus was away).
	if err := c.sync(ctx, conn); err != nil {
		return false, err
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	// While a shutdown is said to be under way, PreparingForShutdown is read again now and then:
	// a cue missed leaves the agent waiting for a shutdown that is no more, its locks let go.
	recheck := time.NewTicker(30 * time.Second)
	defer recheck.Stop()
	lockErr := ""
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-recheck.C:
			if c.shuttingDown() {
				if err := c.sync(ctx, conn); err != nil {
					return true, err
				}
			}
		case <-c.kick:
			retry.Reset(0)
		case <-retry.C:
			if err := c.takeWanted(ctx, conn); err != nil {
				if err.Error() != lockErr {
					c.log.WithError(err).Warn("logind: a lock was refused; trying again every 30 s")
					lockErr = err.Error()
				}
				retry.Reset(30 * time.Second)
			} else if c.holding() && (lockErr != "" || !listened) {
				c.log.WithField("mode", c.mode).Info("logind inhibitor lock held on shutdown: a reboot or power-off typed on this node waits for its drain")
				lockErr = ""
				c.reportOtherLocks(ctx, conn)
			}
			listened = true
		case sig, ok := <-signals:
			if !ok {
				return true, errors.New("the system D-Bus connection closed")
			}
			if sig.Name == "org.freedesktop.DBus.NameOwnerChanged" {
				if err := c.sync(ctx, conn); err != nil {
					return true, err
				}
				continue
			}
			if sig.Name != logindName+".Manager.PrepareForShutdown" || sig.Path != logindPath {
				continue
			}
			if !c.fromLogind(ctx, conn, sig.Sender) {
				c.log.WithField("sender", sig.Sender).Warn("logind: a PrepareForShutdown not sent by logind, ignored")
				continue
			}
			if err := c.sync(ctx, conn); err != nil {
				return true, err
			}
		}
	}
}

// fromLogind reports whether sender is logind's connection on the bus now: anyone may send a
// signal with logind's path and interface, and one sent to the agent's connection directly
// passes no match rule.
func (c *catcher) fromLogind(ctx context.Context, conn *dbus.Conn, sender string) bool {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var owner string
	err := conn.BusObject().CallWithContext(cctx, "org.freedesktop.DBus.GetNameOwner", 0, logindName).Store(&owner)
	return err == nil && owner == sender
}

// sync hands the agent's loop logind's PreparingForShutdown when it changed since last handed:
// the property, not a signal's body, decides (a signal heard twice, or missed while the bus was
// away, changes nothing).
func (c *catcher) sync(ctx context.Context, conn *dbus.Conn) error {
	v, err := getProperty(ctx, conn, "PreparingForShutdown")
	if err != nil {
		return fmt.Errorf("reading logind's PreparingForShutdown: %w", err)
	}
	start, ok := v.Value().(bool)
	if !ok {
		return fmt.Errorf("logind's PreparingForShutdown is a %T", v.Value())
	}
	c.mu.Lock()
	same := c.announced == start
	c.announced = start
	c.mu.Unlock()
	if same {
		return nil
	}
	s := caughtSignal{start: start, op: OpShutdown, what: "a shutdown or reboot (this systemd does not say which)"}
	if !start {
		s.stopping = systemStopping(ctx, conn)
	}
	if start {
		// systemd 255 and later say which: PreparingForShutdownWithMetadata's "type".
		if v, err := getProperty(ctx, conn, "PreparingForShutdownWithMetadata"); err == nil {
			if md, ok := v.Value().(map[string]dbus.Variant); ok {
				if t, ok := md["type"].Value().(string); ok && t != "" {
					s.what = t
					if strings.Contains(t, "reboot") || t == "kexec" {
						s.op = OpReboot
					}
				}
			}
		}
	}
	select {
	case c.out <- s:
	case <-ctx.Done():
	}
	return nil
}

// holding reports whether the delay lock is held.
func (c *catcher) holding() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.delayFD >= 0
}

// shuttingDown reports whether logind last said a shutdown is under way.
func (c *catcher) shuttingDown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.announced
}

// systemStopping reports whether systemd says the machine is stopping (its SystemState), or has
// a job queued that stops it (a reboot, power-off, halt or kexec target): a shutdown logind
// called off may have lost its place to another. Unknown (an error: systemd is likely going away
// itself) counts as stopping: the node then has --reboot-timeout to go down, as before.
func systemStopping(ctx context.Context, conn *dbus.Conn) bool {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	manager := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	var state dbus.Variant
	if err := manager.CallWithContext(cctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager",
		"SystemState").Store(&state); err != nil || state.Value() == "stopping" {
		return true
	}
	var jobs []struct {
		ID                uint32
		Unit, Type, State string
		JobPath, UnitPath dbus.ObjectPath
	}
	if err := manager.CallWithContext(cctx, "org.freedesktop.systemd1.Manager.ListJobs", 0).Store(&jobs); err != nil {
		return true
	}
	for _, j := range jobs {
		switch j.Unit {
		case "reboot.target", "poweroff.target", "halt.target", "kexec.target", "shutdown.target", "soft-reboot.target":
			return true
		}
	}
	return false
}

// getProperty reads one of logind's Manager properties, within callTimeout.
func getProperty(ctx context.Context, conn *dbus.Conn, name string) (dbus.Variant, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var v dbus.Variant
	err := conn.Object(logindName, logindPath).CallWithContext(cctx, "org.freedesktop.DBus.Properties.Get", 0,
		logindName+".Manager", name).Store(&v)
	return v, err
}

// takeWanted takes the locks that are wanted and not held. The block lock is best effort (a
// non-root agent needs polkit's leave for it): its refusal is reported, and the delay lock stays.
func (c *catcher) takeWanted(ctx context.Context, conn *dbus.Conn) error {
	c.mu.Lock()
	needDelay, needBlock := c.want && c.delayFD < 0, c.want && !c.noBlock && c.mode == CatchBlock && c.blockFD < 0
	c.mu.Unlock()
	var errs []error
	if needDelay {
		if fd, err := c.inhibit(ctx, conn, "delay", "edgedrain drains this node before it goes down"); err != nil {
			errs = append(errs, err)
		} else {
			c.keep(&c.delayFD, fd, false)
		}
	}
	if needBlock {
		if fd, err := c.inhibit(ctx, conn, "block", blockWhy); err != nil {
			errs = append(errs, err)
		} else {
			c.keep(&c.blockFD, fd, true)
		}
	}
	return errors.Join(errs...)
}

// keep stores a lock taken, unless it stopped being wanted meanwhile.
func (c *catcher) keep(slot *int, fd int, block bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.want || *slot >= 0 || (block && c.noBlock) {
		_ = syscall.Close(fd)
		return
	}
	*slot = fd
	if !block {
		c.locked.Set(1)
	}
}

// inhibit takes one logind lock on shutdown and returns its descriptor. A call that times out
// may still be answered, with a descriptor godbus then drops unclosed: the stray lock would
// hold every shutdown back until logind's delay runs out, so such descriptors are closed.
func (c *catcher) inhibit(ctx context.Context, conn *dbus.Conn, mode, why string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var fd dbus.UnixFD
	err := conn.Object(logindName, logindPath).CallWithContext(cctx, logindName+".Manager.Inhibit", 0,
		"shutdown", agentWho, why, mode).Store(&fd)
	if err != nil {
		if cctx.Err() != nil {
			_ = conn.Close() // (no late reply lands after this)
			c.closeStray()
		}
		return -1, fmt.Errorf("taking logind's %s lock on shutdown: %w", mode, err)
	}
	return int(fd), nil
}

// closeStray closes the process's descriptors of logind inhibitor locks (logind's FIFOs under
// /run/systemd/inhibit) other than the ones the catcher holds.
func (c *catcher) closeStray() {
	c.mu.Lock()
	defer c.mu.Unlock()
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd == c.delayFD || fd == c.blockFD {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.Contains(target, "/systemd/inhibit/") && strings.HasSuffix(target, ".ref") {
			_ = syscall.Close(fd)
			c.log.WithField("fd", fd).Warn("logind: closed a lock whose call timed out")
		}
	}
}
