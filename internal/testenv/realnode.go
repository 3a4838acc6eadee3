package testenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RealNode is a real Kubernetes node: Debian's containerd and runc and a real kubelet, running
// as a machine of its own would. It lives in a PID and a mount namespace of its own (its PID 1
// is the boot script below) inside the cluster's network namespace, with its own disk (its
// /var/lib, /var/log and /persist are directories of the test's), its own /run (emptied at each
// boot) and its own boot ID: the file the kernel's /proc/sys/kernel/random/boot_id shows inside
// the node, as systemd-nspawn gives its containers — the machine's at the first boot, new at
// every later one. Killing its PID 1 is a power cut: the kernel ends every process of the node,
// pods and shims too, and its mounts go with its mount namespace.
type RealNode struct {
	Name string
	// IP is the node's InternalIP, in the cluster's network namespace.
	IP string
	// PodCIDR is the range its pods take addresses from, on its own bridge.
	PodCIDR string
	// Dir is the node's disk: run/, var-lib/, var-log/, persist/ are its /run, /var/lib,
	// /var/log and /persist.
	Dir string

	cfg      realNodeConfig
	mu       sync.Mutex
	boot     *process // the node's PID 1 (through nsenter and unshare)
	stopped  bool     // the cluster is stopping: no boot any more
	bootID   string
	boots    int
	cgroupOf string // the kubelet's cgroupRoot, in every hierarchy
}

// realNodeConfig is what the cluster gives each node.
type realNodeConfig struct {
	binDir     string
	ns         *NetNS
	kubeconfig string // the kubelet's file, with the node's own client certificate
	clusterDNS string
	index      int
	sandbox    string // the pause image
	labels     map[string]string
	systemBus  bool
}

// SystemBus is the address of the node's system D-Bus, as the test process reaches it; it
// waits until the bus answers. Only for a cluster started with RealClusterConfig.SystemBus.
func (n *RealNode) SystemBus(ctx context.Context) (string, error) {
	if !n.cfg.systemBus {
		return "", fmt.Errorf("node %s has no system bus (RealClusterConfig.SystemBus)", n.Name)
	}
	sock := filepath.Join(n.Dir, "run", "dbus", "system_bus_socket")
	for ctx.Err() == nil {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return "unix:path=" + sock, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("node %s: no system bus at %s: %w\n%s", n.Name, sock, ctx.Err(), tailFile(filepath.Join(n.Dir, "dbus.log"), 10))
}

// nodeDirs are the node's own directories, bound over the machine's inside the node.
var nodeDirs = map[string]string{"run": "/run", "var-lib": "/var/lib", "var-log": "/var/log", "persist": "/persist"}

// bootScript is the node's PID 1, run by unshare in fresh PID and mount namespaces (with a /proc
// of the new PID namespace). Mounts made here are private to the node and end with it. It ends
// (and with it the node) when containerd, the kubelet or the bus daemon ends, saying which.
const bootScript = `set -u
fail() { echo "node $NODE_NAME: $*" >&2; exit 1; }
for d in run var-lib var-log persist; do
	case $d in run) to=/run ;; var-lib) to=/var/lib ;; var-log) to=/var/log ;; persist) to=/persist ;; esac
	mount --bind "$NODE_DIR/$d" "$to" || fail "mount $to"
done
mount --bind "$NODE_DIR/boot_id" /proc/sys/kernel/random/boot_id || fail "mount the boot ID"
for f in "$NODE_DIR"/sysctl/*; do
	mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)" || fail "mount $f"
done
mkdir -p /run/containerd /run/dbus /var/lib/kubelet /var/log/pods
if [ -f "$NODE_DIR/dbus.conf" ]; then
	dbus-daemon --config-file="$NODE_DIR/dbus.conf" --nofork --nopidfile >"$NODE_DIR/dbus.log" 2>&1 &
fi
containerd --config "$NODE_DIR/containerd.toml" >"$NODE_DIR/containerd.log" 2>&1 &
containerd=$!
# The kubelet gives up at once on a runtime that does not answer: wait for it, however loaded
# the machine is.
until ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
	kill -0 $containerd 2>/dev/null || fail "containerd ended before it answered"
	sleep 0.1
done
kubelet --config="$NODE_DIR/kubelet.yaml" --kubeconfig="$NODE_KUBECONFIG" \
	--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --node-labels="$NODE_LABELS" --v=1 >"$NODE_DIR/kubelet.log" 2>&1 &
code=0
wait -n || code=$?
fail "a process of the node ended (exit $code): see kubelet.log, containerd.log, dbus.log"
`

// Boot starts the node: a new boot ID, an empty /run, then containerd and the kubelet.
func (n *RealNode) Boot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.boot != nil && !n.boot.exited() {
		return fmt.Errorf("node %s is running", n.Name)
	}
	if n.stopped {
		return fmt.Errorf("node %s: the cluster is stopping", n.Name)
	}
	if err := os.RemoveAll(filepath.Join(n.Dir, "run")); err != nil {
		return fmt.Errorf("node %s: clear /run: %w", n.Name, err)
	}
	for d := range nodeDirs {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	// The first boot is the machine's own: what a container reads from its own /proc (the
	// kernel's boot ID, as an agent of an older release does) agrees with the node until the
	// node's first reboot. Every later boot gets a new one.
	var id string
	var err error
	if n.boots == 0 {
		var b []byte
		b, err = os.ReadFile("/proc/sys/kernel/random/boot_id")
		id = strings.TrimSpace(string(b))
	} else {
		id, err = newBootID()
	}
	if err != nil {
		return fmt.Errorf("node %s: boot ID: %w", n.Name, err)
	}
	// 0644: a file mode the next boot may replace.
	if err := os.WriteFile(filepath.Join(n.Dir, "boot_id"), []byte(id+"\n"), 0o644); err != nil {
		return fmt.Errorf("node %s: boot ID: %w", n.Name, err)
	}
	n.boots++
	if err := n.makeCgroups(); err != nil {
		return err
	}
	labels := make([]string, 0, len(n.cfg.labels))
	for k, v := range n.cfg.labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	// nsenter enters the cluster's network; unshare makes the node's PID and mount namespaces
	// and, when it dies (the test's end, or the test process killed: Pdeathsig), kills the
	// node's PID 1, which takes the whole PID namespace with it.
	p, err := startProcess(fmt.Sprintf("node-%s-boot-%d", n.Name, n.boots), "nsenter", n.Dir, false,
		"--net="+n.cfg.ns.Path, "--", "unshare", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc",
		"--propagation", "private", "--", "env", "NODE_DIR="+n.Dir, "NODE_NAME="+n.Name, "NODE_IP="+n.IP, "NODE_KUBECONFIG="+n.cfg.kubeconfig, "NODE_LABELS="+strings.Join(labels, ","),
		"PATH="+n.cfg.binDir+":/usr/sbin:/usr/bin:/sbin:/bin", "bash", "-c", bootScript)
	if err != nil {
		return err
	}
	n.boot, n.bootID = p, id
	return nil
}

// newBootID returns a random UUID, as the kernel makes one at each boot.
func newBootID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// BootID is the boot ID the node's processes read now.
func (n *RealNode) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bootID
}

// Path is where the node's path p (under /run, /var/lib, /var/log or /persist) is on the test's disk.
func (n *RealNode) Path(p string) (string, error) {
	for d, to := range nodeDirs {
		if p == to || strings.HasPrefix(p, to+"/") {
			return filepath.Join(n.Dir, d, strings.TrimPrefix(p, to)), nil
		}
	}
	return "", fmt.Errorf("node %s: %s is not on the node's own disk (%v)", n.Name, p, nodeDirs)
}

// Seen is where the node's path p is as its processes see it now, mounts made inside the node
// included (a pod's secret and token volumes are memory file systems mounted there, not on the
// node's disk): through its PID 1's root. Only while the node runs.
func (n *RealNode) Seen(p string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.boot == nil || n.boot.exited() {
		return "", fmt.Errorf("node %s is not running", n.Name)
	}
	init := n.bootInit()
	if init == 0 {
		return "", fmt.Errorf("node %s: no PID 1 found", n.Name)
	}
	return filepath.Join(fmt.Sprintf("/proc/%d/root", init), p), nil
}

// PowerOff cuts the node's power: every process of it ends at once, with no shutdown. It
// returns once they have: the node's PID 1 exits only after the kernel has ended every other
// process of its PID namespace.
func (n *RealNode) PowerOff() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.boot != nil {
		init := n.bootInit()
		_ = n.boot.cmd.Process.Signal(syscall.SIGKILL) // unshare: --kill-child kills the node's PID 1
		<-n.boot.done
		for deadline := time.Now().Add(30 * time.Second); init > 0 && running(init) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	n.removeCgroups()
}

// stop powers the node off for good: a boot asked for later (a reboot played after the test's
// end) is refused.
func (n *RealNode) stop() {
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	n.PowerOff()
}

// bootInit is the node's PID 1 as the machine numbers it: unshare's child.
func (n *RealNode) bootInit() int {
	if kids := childrenOf(n.boot.cmd.Process.Pid); len(kids) > 0 {
		return kids[0]
	}
	return 0
}

// running reports whether pid is a process that has not exited (a zombie has).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// waitContainerd waits until the node's containerd answers on its socket.
func (n *RealNode) waitContainerd(ctx context.Context) error {
	sock := filepath.Join(n.Dir, "run", "containerd", "containerd.sock")
	var out []byte
	var err error
	for range 300 {
		out, err = exec.CommandContext(ctx, "ctr", "--address", sock, "version").CombinedOutput()
		if err == nil {
			return nil
		}
		if n.boot.exited() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("node %s: containerd not answering: %v: %s\n%s\n%s", n.Name, err, out, n.boot.tail(20), n.Log(20))
}

// Log is the last lines of the node's kubelet and containerd logs, for a failure's message.
func (n *RealNode) Log(lines int) string {
	n.mu.Lock()
	boot := n.boot
	n.mu.Unlock()
	var b strings.Builder
	if boot != nil {
		b.WriteString("boot:\n" + boot.tail(lines) + "\n")
	}
	b.WriteString("kubelet:\n" + tailFile(filepath.Join(n.Dir, "kubelet.log"), lines) +
		"\ncontainerd:\n" + tailFile(filepath.Join(n.Dir, "containerd.log"), lines))
	return b.String()
}

// ContainerLogs is the last lines of every container log on the node (the kubelet's
// /var/log/pods), for a failure's message: the API server cannot reach a real node's kubelet
// for kubectl logs.
func (n *RealNode) ContainerLogs(lines int) string {
	logs, _ := filepath.Glob(filepath.Join(n.Dir, "var-log", "pods", "*", "*", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		rel, _ := filepath.Rel(filepath.Join(n.Dir, "var-log", "pods"), l)
		fmt.Fprintf(&b, "--- %s: %s\n%s\n", n.Name, rel, tailFile(l, lines))
	}
	return b.String()
}

// Import loads an image archive (OCI or docker, as `make image` writes) into the node's
// containerd, where the kubelet finds it: pods use it with imagePullPolicy Never or IfNotPresent.
func (n *RealNode) Import(ctx context.Context, archive string) error {
	sock := filepath.Join(n.Dir, "run", "containerd", "containerd.sock")
	out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "--namespace", "k8s.io",
		"images", "import", "--all-platforms", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node %s: ctr images import %s: %w: %s", n.Name, archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}
