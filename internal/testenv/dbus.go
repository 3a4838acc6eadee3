package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// dbusConfig is a private bus for one test: a real dbus-daemon (Debian's dbus-daemon) listening
// on a socket in the test's directory, open to its user.
const dbusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// DBus is a dbus-daemon started by a test.
type DBus struct {
	Address string // its unix:path= address
	cmd     *exec.Cmd
}

// Kill stops the daemon at once (SIGKILL), as a host going down does: every connection closes.
func (d *DBus) Kill() { _ = d.cmd.Process.Kill() }

// StartDBus starts a dbus-daemon for the test; it stops with the test. The test fails, rather
// than skips, without dbus-daemon (.ci/run installs it).
func StartDBus(t testing.TB) *DBus {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Fatalf("dbus-daemon is needed (Debian package dbus-daemon): %v", err)
	}
	dir, err := os.MkdirTemp("", "dbus") // short: a socket path holds at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, dbusConfig, filepath.Join(dir, "system_bus_socket")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dbus-daemon: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			t.Fatalf("dbus-daemon printed no address: %s", stderr.String())
		}
		return &DBus{Address: a, cmd: cmd}
	case <-time.After(30 * time.Second):
		t.Fatalf("dbus-daemon did not start: %s", stderr.String())
	}
	return nil
}

// LogindCall is one call the stand-in logind received.
type LogindCall struct {
	Method      string // Reboot or PowerOff
	Interactive bool
	Refused     bool // answered with the error Fail set
	At          time.Time
}

// Logind stands in for systemd-logind on a test bus: it owns org.freedesktop.login1 and answers
// login1.Manager's Reboot and PowerOff, recording each call (logind itself needs systemd as PID
// 1, which a test cannot have). Fail makes it answer the next calls with an error instead.
type Logind struct {
	mu     sync.Mutex
	calls  []LogindCall
	fail   *dbus.Error
	onCall func(LogindCall)
}

// StartLogind connects to the bus at address and serves login1.Manager's Reboot and PowerOff
// there until the test ends; onCall (may be nil) runs after each call is recorded.
func StartLogind(t testing.TB, address string, onCall func(LogindCall)) *Logind {
	t.Helper()
	l, stop, err := ServeLogind(address, onCall)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return l
}

// ServeLogind is StartLogind for a caller that is not the test's goroutine (a node's logind
// served again after its reboot): it returns the error, and a stop function to call.
func ServeLogind(address string, onCall func(LogindCall)) (*Logind, func(), error) {
	conn, err := dbus.Connect(address)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting the stand-in logind: %w", err)
	}
	stop := func() { _ = conn.Close() }
	l := &Logind{onCall: onCall}
	if err := conn.Export(logindManager{l}, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		stop()
		return nil, nil, err
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		stop()
		return nil, nil, fmt.Errorf("the stand-in logind could not own its name: %v (reply %d)", err, reply)
	}
	return l, stop, nil
}

// Calls returns the calls received so far.
func (l *Logind) Calls() []LogindCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]LogindCall(nil), l.calls...)
}

// Fail makes later calls answer the D-Bus error name with message; "" answers them again.
func (l *Logind) Fail(name, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail = nil
	if name != "" {
		l.fail = dbus.NewError(name, []any{message})
	}
}

func (l *Logind) record(method string, interactive bool) *dbus.Error {
	l.mu.Lock()
	fail, onCall := l.fail, l.onCall
	c := LogindCall{Method: method, Interactive: interactive, Refused: fail != nil, At: time.Now()}
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	if fail != nil {
		return fail
	}
	if onCall != nil {
		onCall(c)
	}
	return nil
}

// logindManager holds only the exported D-Bus methods.
type logindManager struct{ l *Logind }

func (m logindManager) Reboot(interactive bool) *dbus.Error { return m.l.record("Reboot", interactive) }

func (m logindManager) PowerOff(interactive bool) *dbus.Error {
	return m.l.record("PowerOff", interactive)
}
