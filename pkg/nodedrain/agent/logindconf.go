package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// The agent's logind drop-in raising InhibitDelayMaxSec (--inhibit-delay-max): how long logind
// holds a shutdown back for a delay lock.

// dropInMark is the drop-in's first line: the agent adopts and removes only a file that carries it.
const dropInMark = "# Written by the edgedrain agent"

// InhibitDelay reads logind's InhibitDelayMaxSec, within callTimeout.
func InhibitDelay(ctx context.Context, address string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	conn, err := dbus.Connect(address, dbus.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	v, err := getProperty(ctx, conn, "InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec is a %T", v.Value())
	}
	return time.Duration(us) * time.Microsecond, nil
}

// dropInContent is the drop-in for want, in whole seconds rounded up (0 would turn every
// holder's delay lock off).
func dropInContent(want time.Duration) []byte {
	secs := max(int64((want+time.Second-1)/time.Second), 1)
	return fmt.Appendf(nil, "%s, removed when it stops: logind holds a shutdown typed on\n"+
		"# this node back for up to this long while the node is drained.\n[Login]\nInhibitDelayMaxSec=%d\n", dropInMark, secs)
}

// ours reports whether path is a drop-in the agent wrote (its mark on the first line).
func ours(path string) bool {
	data, err := os.ReadFile(path)
	return err == nil && bytes.HasPrefix(data, []byte(dropInMark))
}

// raiseInhibitDelay makes logind hold a shutdown back for up to want: when it holds it for
// less, it writes the agent's drop-in in dir (whole, by a rename) and has logind reload its
// configuration (SIGHUP through systemd). It returns the delay logind has now and whether the
// drop-in is the agent's to remove when it stops (written now, or left by an earlier run).
func raiseInhibitDelay(ctx context.Context, address, dir string, want time.Duration) (time.Duration, bool, error) {
	have, err := InhibitDelay(ctx, address)
	if err != nil {
		return 0, false, fmt.Errorf("reading logind's InhibitDelayMaxSec: %w", err)
	}
	path := filepath.Join(dir, logindDropIn)
	if want <= 0 || have >= want {
		return have, ours(path), nil
	}
	if _, err := os.Stat(path); err == nil && !ours(path) {
		return have, false, fmt.Errorf("logind drop-in %s exists and is not the agent's: left as it is", path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return have, false, fmt.Errorf("logind drop-in directory %s: %w", dir, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, dropInContent(want), 0o644); err != nil {
		return have, false, fmt.Errorf("writing logind drop-in %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
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

// restoreInhibitDelay removes the agent's drop-in (only if it carries the agent's mark) and has
// logind reload.
func restoreInhibitDelay(ctx context.Context, address, dir string) error {
	path := filepath.Join(dir, logindDropIn)
	if !ours(path) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return reloadLogind(ctx, address)
}

// reloadLogind sends logind SIGHUP through systemd (KillUnit), which has it read its
// configuration again (InhibitDelayMaxSec among it).
func reloadLogind(ctx context.Context, address string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
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
