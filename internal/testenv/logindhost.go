package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// LogindHost is a machine with a real systemd as PID 1, D-Bus, systemd-logind and polkit, booted
// by systemd-nspawn from a copy of hack/logind-host.sh's root filesystem: what the agent meets on
// a real node when it reboots through logind, holds inhibitor locks or asks polkit. It shares the
// test's network namespace (the agent inside reaches the test's bus on loopback); it has its own
// PID, mount, IPC and UTS namespaces, and a boot ID of its own at every boot. A reboot from inside
// ends the nspawn process with exit code 133 (a power-off with 0); Boot starts it again, a new
// boot of the same machine (same root filesystem and machine ID, new boot ID).
type LogindHost struct {
	t     testing.TB
	Root  string // the machine's root filesystem, on the host
	name  string
	cg    string // the nspawn process's cgroup in the unified hierarchy
	lock  *os.File
	dir   string // logs
	binds []Bind

	mu     sync.Mutex
	cmd    *exec.Cmd
	pid1   int
	done   chan struct{}
	code   int       // the exit code of the last boot's nspawn, once done is closed
	downAt time.Time // when it exited
	boots  int
}

// Bind is a host path mounted into the machine at every boot.
type Bind struct {
	Host, Machine string
	ReadOnly      bool
}

// LogindHostOptions configure a LogindHost.
type LogindHostOptions struct {
	// Binds are mounted into the machine at every boot (systemd-nspawn --bind / --bind-ro).
	Binds []Bind
	// Files are written into the machine's root filesystem before its first boot (path inside
	// the machine → content; mode 0644, or 0755 for a path under a bin directory).
	Files map[string]string
	// Enable lists units (written with Files) enabled at boot: linked into multi-user.target.wants.
	Enable []string
	// Suite is the Debian release the machine runs: bookworm (the default: systemd 252) or
	// trixie (systemd 257).
	Suite string
}

// logindHostLocks: a live machine holds a lock named after it; the next machine started on the
// host removes the cgroups of machines whose test process was killed (their lock unheld).
const logindHostLocks = "/run/lock/edgedrain-logind-host-"

// NeedLogindHost skips t, saying why, when this machine cannot boot a LogindHost: not root, or
// systemd-nspawn or mmdebstrap missing (.ci/run installs both: CI never skips).
func NeedLogindHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a real logind host needs root (systemd-nspawn)")
	}
	for _, bin := range []string{"systemd-nspawn", "mmdebstrap"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("a real logind host needs %s (Debian packages systemd-container and mmdebstrap; .ci/run installs them)", bin)
		}
	}
}

// StartLogindHost prepares a machine from the cached root filesystem (built on first use) and
// boots it; everything it used is removed when the test ends.
func StartLogindHost(t testing.TB, opts LogindHostOptions) *LogindHost {
	t.Helper()
	NeedLogindHost(t)
	removeDeadLogindHosts()
	src, err := logindRootfs(opts.Suite)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "edgedrain-logind-host-")
	if err != nil {
		t.Fatal(err)
	}
	h := &LogindHost{t: t, Root: filepath.Join(dir, "root"), name: filepath.Base(dir), dir: dir}
	if h.lock, err = holdLock(logindHostLocks + h.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cleanup)
	if out, err := exec.Command("cp", "-a", src, h.Root).CombinedOutput(); err != nil {
		t.Fatalf("logind host: copy its root filesystem: %v: %s", err, out)
	}
	for path, content := range opts.Files {
		mode := os.FileMode(0o644)
		if strings.Contains(path, "/bin/") {
			mode = 0o755
		}
		full := filepath.Join(h.Root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	wants := filepath.Join(h.Root, "etc/systemd/system/multi-user.target.wants")
	for _, unit := range opts.Enable {
		if err := os.MkdirAll(wants, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/systemd/system/"+unit, filepath.Join(wants, unit)); err != nil {
			t.Fatal(err)
		}
	}
	if h.cg, err = logindHostCgroup(h.name); err != nil {
		t.Fatal(err)
	}
	h.binds = opts.Binds
	h.Boot()
	return h
}

// logindRootfs runs hack/logind-host.sh, which builds the root filesystem of suite (empty: its
// default) on first use, and returns its directory.
func logindRootfs(suite string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	args := []string{filepath.Join(root, "hack", "logind-host.sh")}
	if suite != "" {
		args = append(args, suite)
	}
	cmd := exec.Command("bash", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build the logind host's root filesystem (hack/logind-host.sh): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// unifiedCgroupRoot is the machine's cgroup v2 hierarchy: all of /sys/fs/cgroup, or the
// "unified" one beside the v1 controllers' (systemd's hybrid layout).
func unifiedCgroupRoot() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
				return dir, nil
			}
		}
	}
	return "", errors.New("logind host: no cgroup v2 hierarchy (systemd in the machine needs one)")
}

// logindHostCgroup creates the cgroup the machine's nspawn runs in: systemd inside takes the
// cgroup v2 tree below it as its own, and nothing of the machine's cgroup mounts changes.
func logindHostCgroup(name string) (string, error) {
	root, err := unifiedCgroupRoot()
	if err != nil {
		return "", err
	}
	cg := filepath.Join(root, name)
	if err := os.MkdirAll(cg, 0o755); err != nil {
		return "", fmt.Errorf("logind host: cgroup: %w", err)
	}
	return cg, nil
}

// Boot starts the machine and waits until logind answers on its bus. The previous boot must have
// ended (a reboot or power-off from inside, or Kill).
func (h *LogindHost) Boot() {
	h.t.Helper()
	h.mu.Lock()
	if h.cmd != nil {
		select {
		case <-h.done:
		default:
			h.mu.Unlock()
			h.t.Fatal("logind host: Boot while it is up")
		}
	}
	h.boots++
	boot := h.boots
	h.mu.Unlock()
	args := []string{"-D", h.Root, "-M", "edgedrain-host", "--boot", "--register=no", "--keep-unit",
		"--console=read-only", "--kill-signal=SIGRTMIN+3"}
	for _, b := range h.binds {
		opt := "--bind="
		if b.ReadOnly {
			opt = "--bind-ro="
		}
		args = append(args, opt+b.Host+":"+b.Machine)
	}
	logFile, err := os.Create(filepath.Join(h.dir, fmt.Sprintf("boot-%d.log", boot)))
	if err != nil {
		h.t.Fatal(err)
	}
	// The launcher joins the machine's cgroup first: nspawn then runs there (--keep-unit), and
	// the machine's systemd below it.
	script := `echo $$ > "$1/cgroup.procs" && shift && exec systemd-nspawn "$@"`
	cmd := exec.Command("sh", append([]string{"-c", script, "sh", h.cg}, args...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		h.t.Fatalf("logind host: start systemd-nspawn: %v", err)
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.cmd, h.done, h.pid1 = cmd, done, 0
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		h.mu.Lock()
		h.code, h.downAt = code, time.Now()
		h.mu.Unlock()
		close(done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if pid := h.findPID1(cmd.Process.Pid); pid != 0 && h.logindAnswers(pid) == nil {
			h.mu.Lock()
			h.pid1 = pid
			h.mu.Unlock()
			return
		}
		select {
		case <-done:
			h.t.Fatalf("logind host: boot %d ended before logind answered (exit %d):\n%s", boot, h.exitCode(), h.bootLog(boot, 30))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("logind host: logind did not answer within 60 s of boot %d:\n%s", boot, h.bootLog(boot, 30))
		}
	}
}

// findPID1 returns the machine's PID 1 as the host sees it: the process below nspawn running
// systemd (0: not yet).
func (h *LogindHost) findPID1(nspawn int) int {
	for _, child := range childrenOf(nspawn) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child)); strings.HasSuffix(exe, "/systemd") {
			return child
		}
	}
	return 0
}

// childrenOf lists pid's child processes.
func childrenOf(pid int) []int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var kids []int
	for _, f := range strings.Fields(string(data)) {
		if k, err := strconv.Atoi(f); err == nil {
			kids = append(kids, k)
		}
	}
	return kids
}

// logindAnswers checks that logind owns its name on the machine's bus.
func (h *LogindHost) logindAnswers(pid1 int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := dbus.Connect(busAddressOf(pid1), dbus.WithContext(ctx))
	if err != nil {
		return err
	}
	defer conn.Close()
	var has bool
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.login1").Store(&has); err != nil {
		return err
	}
	if !has {
		return errors.New("logind is not on the bus yet")
	}
	return nil
}

func busAddressOf(pid1 int) string {
	return fmt.Sprintf("unix:path=/proc/%d/root/run/dbus/system_bus_socket", pid1)
}

// BusAddress is the machine's system bus as the host reaches it (method calls work; an
// inhibitor lock must be taken from inside, see Exec).
func (h *LogindHost) BusAddress() string { return busAddressOf(h.PID1()) }

// PID1 is the machine's systemd as the host sees it (0 while it is down).
func (h *LogindHost) PID1() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return 0
	default:
		return h.pid1
	}
}

// BootID is the machine's current boot ID, as a program inside it reads it.
func (h *LogindHost) BootID() string {
	h.t.Helper()
	out, err := h.Exec("cat", "/proc/sys/kernel/random/boot_id")
	if err != nil {
		h.t.Fatalf("logind host: boot ID: %v: %s", err, out)
	}
	return strings.TrimSpace(out)
}

// Exec runs a command inside the machine (all its namespaces, as root) and returns its output.
func (h *LogindHost) Exec(args ...string) (string, error) {
	pid := h.PID1()
	if pid == 0 {
		return "", errors.New("logind host: the machine is down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--"}, args...)...).CombinedOutput()
	return string(out), err
}

// LogindProperty reads one of logind's Manager properties inside the machine, as busctl prints
// it (e.g. "b true", "t 5000000").
func (h *LogindHost) LogindProperty(name string) (string, error) {
	out, err := h.Exec("busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", name)
	return strings.TrimSpace(out), err
}

// WaitDown waits up to timeout for the machine to go down and returns nspawn's exit code: 133
// for a reboot, 0 for a power-off. ok is false if it is still up.
func (h *LogindHost) WaitDown(timeout time.Duration) (code int, ok bool) {
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	select {
	case <-done:
		return h.exitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// DownAt is when the machine's last boot ended (zero while it is up).
func (h *LogindHost) DownAt() time.Time {
	if !h.Down() {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.downAt
}

// Down reports whether the machine's last boot has ended.
func (h *LogindHost) Down() bool {
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (h *LogindHost) exitCode() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.code
}

// Kill ends the machine at once, every process in it, as a power cut does.
func (h *LogindHost) Kill() {
	_ = os.WriteFile(filepath.Join(h.cg, "cgroup.kill"), []byte("1"), 0o644)
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
}

// bootLog returns the last n lines of boot's console.
func (h *LogindHost) bootLog(boot, n int) string {
	data, _ := os.ReadFile(filepath.Join(h.dir, fmt.Sprintf("boot-%d.log", boot)))
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (h *LogindHost) cleanup() {
	h.Kill()
	if h.t.Failed() {
		h.mu.Lock()
		boots := h.boots
		h.mu.Unlock()
		for b := 1; b <= boots; b++ {
			h.t.Logf("logind host, console of boot %d:\n%s", b, h.bootLog(b, 40))
		}
	}
	removeCgroupTree(h.cg)
	_ = os.RemoveAll(h.dir)
	releaseLock(h.lock)
}

// removeDeadLogindHosts kills and removes the cgroups of machines whose test process was
// killed (their lock unheld), and their directories.
func removeDeadLogindHosts() {
	root, err := unifiedCgroupRoot()
	if err != nil {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "edgedrain-logind-host-*"))
	for _, cg := range dirs {
		name := filepath.Base(cg)
		f, err := holdLock(logindHostLocks + name)
		if err != nil {
			continue // alive
		}
		_ = os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0o644)
		removeCgroupTree(cg)
		_ = os.RemoveAll(filepath.Join(os.TempDir(), name))
		releaseLock(f)
	}
}
