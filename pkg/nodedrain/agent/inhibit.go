package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// before 257, see README) are caught by the delay lock.
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

	mu      sync.Mutex
	want    bool // the locks are wanted (not let go for a shutdown)
	noBlock bool // the block lock is let go (the agent's own command runs)
	delayFD int  // -1: none held
	blockFD int
}

func newCatcher(mode CatchMode, address string, log logrus.FieldLogger, out chan<- caughtSignal, locked prometheus.Gauge) *catcher {
	return &catcher{mode: mode, address: address, log: log, out: out, kick: make(chan struct{}, 1), locked: locked,
		want: true, delayFD: -1, blockFD: -1}
}

// hold asks for the locks to be held again (idempotent).
func (c *catcher) hold() {
	c.mu.Lock()
	changed := !c.want || c.noBlock
	c.want, c.noBlock = true, false
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
	for wait := time.Second; ctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
		err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if err.Error() != warned {
			c.log.WithError(err).Warn("logind inhibitor: no lock held; a reboot typed on the node goes ahead undrained until this is fixed (retrying)")
			warned = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// session is one connection to the bus: subscribe, take the locks, hand on signals; it returns
// when the connection fails.
func (c *catcher) session(ctx context.Context) error {
	conn, err := dbus.Connect(c.address, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("cannot reach the system D-Bus at %s: %w", c.address, err)
	}
	defer conn.Close()
	signals := make(chan *dbus.Signal, 16)
	conn.Signal(signals)
	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(logindPath), dbus.WithMatchInterface(logindName+".Manager"),
		dbus.WithMatchMember("PrepareForShutdown")); err != nil {
		return fmt.Errorf("subscribing to logind's PrepareForShutdown: %w", err)
	}
	if err := c.takeWanted(ctx, conn); err != nil {
		return err
	}
	c.log.WithField("mode", c.mode).Info("logind inhibitor lock held on shutdown: a reboot or power-off typed on this node waits for its drain")
	// A shutdown already under way (the agent restarted during one): it is caught now.
	if v, err := conn.Object(logindName, logindPath).GetProperty(logindName + ".Manager.PreparingForShutdown"); err == nil {
		if b, ok := v.Value().(bool); ok && b {
			c.signal(ctx, conn, true)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.kick:
			if err := c.takeWanted(ctx, conn); err != nil {
				return err
			}
		case sig, ok := <-signals:
			if !ok {
				return errors.New("the system D-Bus connection closed")
			}
			if sig.Name != logindName+".Manager.PrepareForShutdown" || len(sig.Body) != 1 {
				continue
			}
			if start, ok := sig.Body[0].(bool); ok {
				c.signal(ctx, conn, start)
			}
		}
	}
}

// signal hands PrepareForShutdown(start) to the agent's loop, with what logind says is coming.
func (c *catcher) signal(ctx context.Context, conn *dbus.Conn, start bool) {
	s := caughtSignal{start: start, op: OpShutdown, what: "a shutdown or reboot (this systemd does not say which)"}
	if start {
		// systemd 255 and later say which: PreparingForShutdownWithMetadata's "type".
		if v, err := conn.Object(logindName, logindPath).GetProperty(logindName + ".Manager.PreparingForShutdownWithMetadata"); err == nil {
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
}

// takeWanted takes the locks that are wanted and not held.
func (c *catcher) takeWanted(ctx context.Context, conn *dbus.Conn) error {
	c.mu.Lock()
	needDelay, needBlock := c.want && c.delayFD < 0, c.want && !c.noBlock && c.mode == CatchBlock && c.blockFD < 0
	c.mu.Unlock()
	if needDelay {
		fd, err := inhibit(ctx, conn, "delay", "edgedrain drains this node before it goes down")
		if err != nil {
			return err
		}
		c.keep(&c.delayFD, fd, false)
	}
	if needBlock {
		fd, err := inhibit(ctx, conn, "block", blockWhy)
		if err != nil {
			return err
		}
		c.keep(&c.blockFD, fd, true)
	}
	return nil
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

// inhibit takes one logind lock on shutdown and returns its descriptor.
func inhibit(ctx context.Context, conn *dbus.Conn, mode, why string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var fd dbus.UnixFD
	err := conn.Object(logindName, logindPath).CallWithContext(cctx, logindName+".Manager.Inhibit", 0,
		"shutdown", "edgedrain-agent", why, mode).Store(&fd)
	if err != nil {
		return -1, fmt.Errorf("taking logind's %s lock on shutdown: %w", mode, err)
	}
	return int(fd), nil
}

// InhibitDelay reads logind's InhibitDelayMaxSec: how long it holds a shutdown back for a delay lock.
func InhibitDelay(ctx context.Context, address string) (time.Duration, error) {
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	v, err := conn.Object(logindName, logindPath).GetProperty(logindName + ".Manager.InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec is a %T", v.Value())
	}
	return time.Duration(us) * time.Microsecond, nil
}

// raiseInhibitDelay makes logind hold a shutdown back for up to want: when it holds it for
// less, it writes the agent's drop-in in dir and has logind reload its configuration (SIGHUP
// through systemd). It returns the delay logind has now and whether it wrote the drop-in.
func raiseInhibitDelay(ctx context.Context, address, dir string, want time.Duration) (time.Duration, bool, error) {
	have, err := InhibitDelay(ctx, address)
	if err != nil {
		return 0, false, fmt.Errorf("reading logind's InhibitDelayMaxSec: %w", err)
	}
	path := filepath.Join(dir, logindDropIn)
	if want <= 0 || have >= want {
		// A drop-in of an earlier run that ended without removing it (killed) is this one's to
		// remove.
		_, err := os.Stat(path)
		return have, err == nil, nil
	}
	content := fmt.Sprintf("# Written by the edgedrain agent, removed when it stops: logind holds a shutdown typed on\n"+
		"# this node back for up to this long while the node is drained.\n[Login]\nInhibitDelayMaxSec=%d\n", int64(want/time.Second))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return have, false, fmt.Errorf("logind drop-in directory %s: %w", dir, err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return have, false, fmt.Errorf("writing logind drop-in %s: %w", path, err)
	}
	if err := reloadLogind(ctx, address); err != nil {
		return have, true, err
	}
	// logind reads its configuration when it handles the signal: wait for it, a little.
	got := have
	for deadline := time.Now().Add(3 * time.Second); got < want && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if got, err = InhibitDelay(ctx, address); err != nil {
			return have, true, fmt.Errorf("reading logind's InhibitDelayMaxSec after the reload: %w", err)
		}
	}
	return got, true, nil
}

// restoreInhibitDelay removes the agent's drop-in and has logind reload.
func restoreInhibitDelay(ctx context.Context, address, dir string) error {
	if err := os.Remove(filepath.Join(dir, logindDropIn)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return reloadLogind(ctx, address)
}

// reloadLogind sends logind SIGHUP through systemd (KillUnit), which has it read its
// configuration again (InhibitDelayMaxSec among it).
func reloadLogind(ctx context.Context, address string) error {
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		return err
	}
	defer conn.Close()
	call := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").CallWithContext(ctx,
		"org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "main", int32(syscall.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("asking systemd to reload logind (SIGHUP to systemd-logind.service): %w", call.Err)
	}
	return nil
}
