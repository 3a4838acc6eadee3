package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

// hostAgent is the agent as a systemd service of a LogindHost: a real systemd-logind, D-Bus and
// polkit beside it, started at every boot, reading the machine's own boot ID. Its files live in
// directories bound into the machine at the same paths, so the test reads them from outside.
type hostAgent struct {
	s    *scene
	node string
	host *testenv.LogindHost
	dir  string // state, log
	sock string
}

// agentUser is the system user a non-root agent runs as on the host (deploy/host/README.md).
const agentUser, agentUID = "edgedrain-agent", 65532

// hostAgentConfig is how the machine runs its agent: as root, or as agentUser (NonRoot), and
// more files for the machine (e.g. a polkit rule) and units to enable with the agent's.
type hostAgentConfig struct {
	NonRoot bool
	Files   map[string]string
	Enable  []string
	Suite   string // the machine's Debian release (testenv.LogindHostOptions)
}

// startHostAgent boots a machine whose agent runs for node with the scene's bus and extra flags.
func startHostAgent(t *testing.T, s *scene, node string, hc hostAgentConfig, extra ...string) *hostAgent {
	t.Helper()
	testenv.NeedLogindHost(t)
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "ea") // short: a socket path
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	_, keys, err := testenv.KeyFiles()
	require.NoError(t, err)
	pem, err := os.ReadFile(keys)
	require.NoError(t, err)
	trusted := filepath.Join(dir, "trusted.pem") // (the keys' own directory is root's only)
	require.NoError(t, os.WriteFile(trusted, pem, 0o644))
	a := &hostAgent{s: s, node: node, dir: dir, sock: filepath.Join(sockDir, "agent.sock")}
	args := append([]string{"run", "--node-name", node, "--nats-url", s.natsURL(), "--trusted-keys", trusted,
		"--state-dir", filepath.Join(dir, "state"), "--socket", a.sock, "--outcome-file", filepath.Join(sockDir, "outcome"),
		"--force-status-file", filepath.Join(dir, "force.json"), "--reboot-command", "logind:reboot", "--reboot-sentinel", "",
		"--listen", "", "--log-format", "json", "--log-level", "debug"}, extra...)
	files := map[string]string{}
	user := ""
	if hc.NonRoot {
		// The user, made at boot by systemd-sysusers; its directories, its own.
		files["/usr/lib/sysusers.d/edgedrain-agent.conf"] = fmt.Sprintf("u %s %d \"edgedrain agent\" - -\n", agentUser, agentUID)
		user = "User=" + agentUser
		for _, d := range []string{dir, sockDir} {
			require.NoError(t, os.Chown(d, agentUID, agentUID))
		}
	}
	for path, content := range hc.Files {
		files[path] = content
	}
	unit := fmt.Sprintf(`[Unit]
Description=edgedrain agent (test)
After=dbus.service systemd-logind.service

[Service]
%s
ExecStart=/usr/local/bin/edgedrain-agent %s
StandardOutput=append:%s
StandardError=append:%s

[Install]
WantedBy=multi-user.target
`, user, unitArgs(args), a.logPath(), a.logPath())
	files["/etc/systemd/system/edgedrain-agent.service"] = unit
	a.host = testenv.StartLogindHost(t, testenv.LogindHostOptions{
		Binds: []testenv.Bind{{Host: agentBin, Machine: "/usr/local/bin/edgedrain-agent", ReadOnly: true},
			{Host: dir, Machine: dir}, {Host: sockDir, Machine: sockDir}},
		Files:  files,
		Enable: append([]string{"edgedrain-agent.service"}, hc.Enable...),
		Suite:  hc.Suite,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent on the logind host:\n%s", a.logTail(60))
		}
	})
	a.waitLog("logind inhibitor lock held on shutdown")
	return a
}

// unitArgs quotes args for a unit file's ExecStart: each in double quotes (an empty one stays),
// with systemd's specifiers (%) and variables ($) escaped.
func unitArgs(args []string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$")
	quoted := make([]string, len(args))
	for i, arg := range args {
		quoted[i] = `"` + r.Replace(arg) + `"`
	}
	return strings.Join(quoted, " ")
}

func (a *hostAgent) logPath() string { return filepath.Join(a.dir, "agent.log") }

func (a *hostAgent) log() string {
	data, _ := os.ReadFile(a.logPath())
	return string(data)
}

func (a *hostAgent) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(a.log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logTime is the time of the agent's first log line holding msg (its JSON "time", to the second).
func (a *hostAgent) logTime(msg string) time.Time {
	a.s.t.Helper()
	for _, line := range strings.Split(a.log(), "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		var entry struct {
			Time time.Time `json:"time"`
		}
		require.NoError(a.s.t, json.Unmarshal([]byte(line), &entry), line)
		return entry.Time
	}
	a.s.t.Fatalf("the agent never logged %q", msg)
	return time.Time{}
}

// waitLog waits until the agent's log (all boots) holds msg n times (1 if n is not given).
func (a *hostAgent) waitLog(msg string, n ...int) {
	a.s.t.Helper()
	want := 1
	if len(n) > 0 {
		want = n[0]
	}
	require.Eventually(a.s.t, func() bool { return strings.Count(a.log(), msg) >= want }, 60*time.Second, 20*time.Millisecond,
		"the agent did not log %q (%d times):\n%s", msg, want, a.logTail(30))
}

// TestTypedRebootWaitsForTheDrain: an administrator's `systemctl reboot` on a node whose agent
// catches shutdowns (a real logind) becomes a drain request at once; the node goes down only
// after COMPLETE, boots again with a new boot ID, and is uncordoned. logind's InhibitDelayMaxSec
// is raised while the agent runs. On systemd 252 (Debian 12) and 257 (Debian 13).
func TestTypedRebootWaitsForTheDrain(t *testing.T) {
	t.Parallel()
	for _, suite := range []string{"bookworm", "trixie"} {
		t.Run(suite, func(t *testing.T) {
			t.Parallel()
			typedRebootWaitsForTheDrain(t, suite)
		})
	}
}

func typedRebootWaitsForTheDrain(t *testing.T, suite string) {
	s := newScene(t, "typed-"+suite, 3)
	target := s.deploy("web", 4, 1)
	s.runCoordinator(nil)
	a := startHostAgent(t, s, target, hostAgentConfig{Suite: suite}, "--catch-shutdown", "delay", "--inhibit-delay-max", "2m")
	out, err := a.host.LogindProperty("InhibitDelayMaxUSec")
	require.NoError(t, err, out)
	assert.Equal(t, "t 120000000", out, "logind's InhibitDelayMaxSec raised to --inhibit-delay-max")
	out, err = a.host.Exec("systemd-inhibit", "--list", "--no-legend")
	require.NoError(t, err, out)
	assert.Contains(t, out, "edgedrain-agent", "the agent's lock")
	firstBoot := a.host.BootID()

	// A PrepareForShutdown anyone on the bus can send, aimed at the agent's connection (which no
	// match rule filters): not logind's, it is ignored.
	out, err = a.host.Exec("sh", "-c", `dbus-send --system --type=signal --dest=$(busctl list --unique --no-legend | `+
		`awk '$3 == "edgedrain-agent" {print $1; exit}') /org/freedesktop/login1 org.freedesktop.login1.Manager.PrepareForShutdown boolean:true`)
	require.NoError(t, err, out)
	a.waitLog("a PrepareForShutdown not sent by logind, ignored")

	typed := time.Now()
	out, err = a.host.Exec("systemctl", "reboot")
	require.NoError(t, err, "systemctl reboot: %s", out)
	req := s.request(target, "")
	asked := time.Now()
	assert.True(t, strings.HasPrefix(req.Context, "caught: "), "the request says it was caught: %q", req.Context)
	assert.Equal(t, nodedrain.RequesterDeviceOp, req.RequestedBy)
	out, err = a.host.LogindProperty("PreparingForShutdown")
	require.NoError(t, err, "the node went down before its drain: %s", out)
	assert.Equal(t, "b true", out, "logind holds the reboot back")

	complete := s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)
	code, down := a.host.WaitDown(60 * time.Second)
	require.True(t, down, "the node did not go down after COMPLETE:\n%s", a.logTail(20))
	assert.Equal(t, 133, code, "a reboot")
	downAt := a.host.DownAt()
	assert.True(t, downAt.After(complete.UpdatedAt), "the node went down at %s, before COMPLETE at %s", downAt, complete.UpdatedAt)
	released := a.logTime("letting the shutdown go ahead: the node is drained")
	assert.False(t, released.Before(complete.UpdatedAt.Truncate(time.Second)), "the lock let go at %s, before COMPLETE at %s", released, complete.UpdatedAt)
	assert.True(t, s.unschedulable(target), "the node stays cordoned while it is down")
	t.Logf("systemctl reboot → request on the bus %s; COMPLETE → node down %s (drain %s)",
		asked.Sub(typed).Round(time.Millisecond), downAt.Sub(complete.UpdatedAt).Round(time.Millisecond),
		complete.UpdatedAt.Sub(asked).Round(time.Millisecond))

	a.host.Boot()
	assert.NotEqual(t, firstBoot, a.host.BootID())
	s.waitWithdrawn(target)
	s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.False(t, s.unschedulable(target))
	a.waitLog("the node is back after the caught")
}

// TestTypedRebootPastTheDelayGoesDownUndrained: a drain a PodDisruptionBudget blocks cannot
// finish within logind's delay (15 s here): logind goes on, the node goes down undrained, and at
// the next boot the agent says so, counts it (edgedrain_agent_caught_shutdowns_total
// {outcome="undrained"}) and withdraws its request; the coordinator, seeing the kubelet report the
// new boot, records a Warning Event UndrainedReboot on the Node.
func TestTypedRebootPastTheDelayGoesDownUndrained(t *testing.T) {
	t.Parallel()
	s := newScene(t, "typed-late", 3)
	target := s.deploy("web", 3, 1)
	s.blockEvictions("web", 3)
	s.runCoordinator(func(c *coordinator.Config) { c.Recorder = s.eventRecorder() })
	metrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // (the machine shares the test's network)
	// 15 s: time enough, on a loaded machine, for the request and the cordon before logind goes on.
	a := startHostAgent(t, s, target, hostAgentConfig{}, "--catch-shutdown", "delay", "--inhibit-delay-max", "15s", "--listen", metrics)
	firstBoot := a.host.BootID()
	s.setBootID(target, firstBoot) // (as its kubelet reports it)

	typed := time.Now()
	out, err := a.host.Exec("systemctl", "reboot")
	require.NoError(t, err, out)
	req := s.request(target, "")
	s.waitFor(target, 30*time.Second, "evicting", func(st nodedrain.NodeDrainStatus) bool {
		return st.RequestID == req.RequestID && (st.Status == nodedrain.StatusCordoned || st.Status == nodedrain.StatusDrainRetrying)
	})
	code, down := a.host.WaitDown(30 * time.Second)
	require.True(t, down, "logind did not go on after its delay")
	assert.Equal(t, 133, code)
	assert.GreaterOrEqual(t, a.host.DownAt().Sub(typed), 15*time.Second, "logind held the reboot back for its whole delay")
	for _, st := range s.Seen(target) {
		assert.False(t, st.Status == nodedrain.StatusComplete && st.RequestID == req.RequestID, "no COMPLETE: the drain was blocked")
	}

	// The kubelet reports the new boot before the agent is back (it starts later in the boot).
	s.setBootID(target, "the boot after "+firstBoot)
	ev := s.waitNodeEvent(target, coordinator.EventUndrainedReboot, 30*time.Second)
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	assert.Contains(t, ev.Message, req.RequestID)
	a.host.Boot()
	a.waitLog("the node went down for a shutdown started outside edgedrain before it was drained")
	s.waitWithdrawn(target)
	s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.Equal(t, 1.0, scrapeMetric(t, "http://"+metrics+"/metrics", `edgedrain_agent_caught_shutdowns_total{outcome="undrained"}`))
}

// TestCalledOffShutdownEndsAtOnce: a caught reboot whose job logind cannot start once the agent
// lets it go (here reboot.target is masked) is called off: logind sends PrepareForShutdown(false)
// and the machine stays up. The agent withdraws its request then, not after --reboot-timeout, so
// the node is uncordoned at once.
func TestCalledOffShutdownEndsAtOnce(t *testing.T) {
	t.Parallel()
	s := newScene(t, "typed-off", 3)
	target := s.deploy("web", 3, 1)
	unblock := s.blockEvictions("web", 3) // the drain waits while reboot.target is masked (logind refuses a masked one up front)
	s.runCoordinator(nil)
	a := startHostAgent(t, s, target, hostAgentConfig{}, "--catch-shutdown", "delay", "--inhibit-delay-max", "2m", "--reboot-timeout", "10m")
	out, err := a.host.Exec("systemctl", "reboot")
	require.NoError(t, err, "systemctl reboot: %s", out)
	req := s.request(target, "")
	out, err = a.host.Exec("systemctl", "mask", "reboot.target")
	require.NoError(t, err, out)
	unblock()
	complete := s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)
	a.waitLog("logind says the shutdown was called off")
	s.waitWithdrawn(target)
	withdrawn := time.Now()
	s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
		return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
	})
	assert.False(t, a.host.Down(), "the machine went down")
	assert.Less(t, withdrawn.Sub(complete.UpdatedAt), time.Minute, "withdrawn long after COMPLETE: at the reboot timeout, not when logind called it off")
	a.waitLog("was called off by logind: withdrawing request " + req.RequestID)
	t.Logf("COMPLETE → request withdrawn %s", withdrawn.Sub(complete.UpdatedAt).Round(time.Millisecond))
}

// TestBlockModeRefusesACheckedReboot: with --catch-shutdown=block a caller logind checks the
// inhibitors for is refused with the agent's message. Which callers those are depends on systemd:
// on 252 (Debian 12) root's plain `systemctl reboot` goes through (systemctl checks inhibitors for
// root only when asked); from 257 (Debian 13) it is refused too. Both are booted here, and root's
// plain reboot tried on each.
func TestBlockModeRefusesACheckedReboot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		suite string
		// plainRefused: root's plain systemctl reboot is refused ("Access denied": logind's own
		// check, which does not show the lock's why); otherwise it goes through.
		plainRefused bool
	}{{"bookworm", false}, {"trixie", true}} {
		t.Run(tc.suite, func(t *testing.T) {
			t.Parallel()
			s := newScene(t, "typed-block-"+tc.suite, 3)
			target := s.deploy("web", 2, 1)
			s.runCoordinator(nil)
			a := startHostAgent(t, s, target, hostAgentConfig{Suite: tc.suite}, "--catch-shutdown", "block", "--inhibit-delay-max", "0")
			out, err := a.host.Exec("systemctl", "--version")
			require.NoError(t, err, out)
			t.Logf("%s: %s", tc.suite, strings.SplitN(out, "\n", 2)[0])
			refused := func(says string, args ...string) {
				t.Helper()
				out, err := a.host.Exec(append([]string{"systemctl", "reboot"}, args...)...)
				require.Error(t, err, "the reboot (%v) was not refused: %s", args, out)
				assert.Contains(t, out, says)
				out, err = a.host.LogindProperty("PreparingForShutdown")
				require.NoError(t, err, out)
				assert.Equal(t, "b false", out, "no shutdown under way")
			}
			refused("agent request reboot", "--check-inhibitors=yes") // the person is told what to do instead
			if tc.plainRefused {
				refused("Access denied")
				// Overriding the lock is an action polkit asks a password for, even of root:
				// without a terminal, refused too.
				refused("Interactive authentication required", "--check-inhibitors=no")
				// It is the agent's lock that refuses: without the agent, the reboot goes.
				out, err := a.host.Exec("systemctl", "stop", "edgedrain-agent.service")
				require.NoError(t, err, out)
			}
			out, err = a.host.Exec("systemctl", "reboot")
			_, down := a.host.WaitDown(60 * time.Second)
			require.True(t, down, "root's plain reboot did not go through on %s (%v): %s", tc.suite, err, out)
		})
	}
}

// TestAgentRebootsAndPowersOffThroughARealLogind: the agent's own logind commands on a real
// logind, with its delay lock held: after COMPLETE it calls Reboot (PowerOff), logind announces
// the shutdown to every lock holder, the agent too, which lets its own go at once; the machine
// reboots (powers off) and, started again, the agent withdraws its request.
func TestAgentRebootsAndPowersOffThroughARealLogind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op, command string
		exit        int
	}{{"reboot", "logind:reboot", 133}, {"shutdown", "logind:poweroff", 0}} {
		t.Run(tc.op, func(t *testing.T) {
			t.Parallel()
			s := newScene(t, "own-"+tc.op, 3)
			target := s.deploy("web", 3, 1)
			s.runCoordinator(nil)
			a := startHostAgent(t, s, target, hostAgentConfig{}, "--catch-shutdown", "delay", "--inhibit-delay-max", "1m", "--shutdown-command", tc.command)
			out, err := exec.Command(agentBin, "request", tc.op, "--context", "kernel 6.12", "--socket", a.sock).CombinedOutput()
			require.NoError(t, err, "agent request %s: %s", tc.op, out)
			req := s.request(target, "")
			assert.Equal(t, "kernel 6.12", req.Context)
			complete := s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)
			code, down := a.host.WaitDown(60 * time.Second)
			require.True(t, down, "the machine did not go down:\n%s", a.logTail(20))
			assert.Equal(t, tc.exit, code)
			assert.True(t, a.host.DownAt().After(complete.UpdatedAt))
			a.waitLog("the node is drained for the " + tc.op + ", whose command ran")

			a.host.Boot()
			s.waitWithdrawn(target)
			s.waitFor(target, 30*time.Second, "idle and uncordoned", func(st nodedrain.NodeDrainStatus) bool {
				return st.Status == nodedrain.StatusNotRequested && !st.CordonedByUs
			})
		})
	}
}

// TestNonRootAgentRebootsOnlyWithThePolkitRule: the agent as a system user, not root, on a
// real logind and polkit. Without deploy/host's polkit rule its reboot after COMPLETE is refused
// (and retried, the node staying up and drained); with the rule installed, the retry goes
// through. Its delay lock on shutdown needs no rule.
func TestNonRootAgentRebootsOnlyWithThePolkitRule(t *testing.T) {
	t.Parallel()
	rule := polkitRule(t)
	s := newScene(t, "nonroot", 3)
	target := s.deploy("web", 3, 1)
	s.runCoordinator(nil)
	a := startHostAgent(t, s, target, hostAgentConfig{NonRoot: true}, "--catch-shutdown", "delay", "--inhibit-delay-max", "0",
		"--command-retry-backoff", "1s", "--command-retry-backoff-max", "1s")
	out, err := a.host.Exec("sh", "-c", "stat -c %U /proc/$(systemctl show -p MainPID --value edgedrain-agent)")
	require.NoError(t, err, out)
	assert.Equal(t, agentUser+"\n", out, "the agent runs as its own user")

	asked, err := exec.Command(agentBin, "request", "reboot", "--socket", a.sock).CombinedOutput()
	require.NoError(t, err, "agent request reboot: %s", asked)
	req := s.request(target, "")
	s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)
	a.waitLog("logind:reboot: refused", 2)
	assert.False(t, a.host.Down(), "refused without the rule")
	assert.True(t, s.unschedulable(target), "the node stays drained")

	require.NoError(t, os.WriteFile(filepath.Join(a.host.Root, "etc/polkit-1/rules.d/50-edgedrain-agent.rules"), rule, 0o644))
	code, down := a.host.WaitDown(60 * time.Second)
	require.True(t, down, "the reboot did not go through with the rule:\n%s", a.logTail(20))
	assert.Equal(t, 133, code)
	a.host.Boot()
	s.waitWithdrawn(target)
}

// TestAgentWarnsOfTheKubeletsGracefulShutdown: the kubelet's graceful node shutdown holds a delay
// lock on shutdown too and kills the node's pods the moment logind announces one, before any
// drain; an agent that catches shutdowns says so at start, naming the setting. The lock here is
// the kubelet's as logind lists it (who "kubelet"), held from before the agent starts.
func TestAgentWarnsOfTheKubeletsGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := newScene(t, "typed-kubelet", 2)
	s.runCoordinator(nil)
	kubeletLock := `[Unit]
Description=the kubelet's graceful node shutdown lock (test)
After=dbus.service systemd-logind.service
Before=edgedrain-agent.service

[Service]
ExecStart=/usr/bin/systemd-inhibit --what=shutdown --who=kubelet "--why=Kubelet needs time to handle node shutdown" --mode=delay sleep infinity
ExecStartPost=/bin/sh -c 'until systemd-inhibit --list --no-legend | grep -q kubelet; do sleep 0.1; done'

[Install]
WantedBy=multi-user.target
`
	a := startHostAgent(t, s, s.nodes[0], hostAgentConfig{
		Files:  map[string]string{"/etc/systemd/system/kubelet-lock.service": kubeletLock},
		Enable: []string{"kubelet-lock.service"},
	}, "--catch-shutdown", "delay", "--inhibit-delay-max", "30s")
	a.waitLog("the kubelet's graceful node shutdown is on")
	assert.Contains(t, a.log(), "shutdownGracePeriod to 0")
}

// TestNonRootAgentPowersOffAndBlocksWithThePolkitRule: the rule's other lines. With it, the
// agent as its own user holds logind's block lock (--catch-shutdown block), and powers its
// machine off after COMPLETE.
func TestNonRootAgentPowersOffAndBlocksWithThePolkitRule(t *testing.T) {
	t.Parallel()
	rule := polkitRule(t)
	s := newScene(t, "nonroot-off", 3)
	target := s.deploy("web", 3, 1)
	s.runCoordinator(nil)
	a := startHostAgent(t, s, target, hostAgentConfig{NonRoot: true,
		Files: map[string]string{"/etc/polkit-1/rules.d/50-edgedrain-agent.rules": string(rule)}},
		"--catch-shutdown", "block", "--inhibit-delay-max", "0", "--shutdown-command", "logind:poweroff")
	out, err := a.host.Exec("systemd-inhibit", "--list", "--no-legend")
	require.NoError(t, err, out)
	var modes []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "edgedrain-agent" {
			modes = append(modes, f[len(f)-1])
		}
	}
	assert.ElementsMatch(t, []string{"delay", "block"}, modes, "the agent's locks as logind lists them:\n%s", out)

	asked, err := exec.Command(agentBin, "request", "shutdown", "--socket", a.sock).CombinedOutput()
	require.NoError(t, err, "agent request shutdown: %s", asked)
	req := s.request(target, "")
	s.waitStatus(target, nodedrain.StatusComplete, req.RequestID, drainTimeout)
	code, down := a.host.WaitDown(60 * time.Second)
	require.True(t, down, "the power-off did not go through with the rule:\n%s", a.logTail(20))
	assert.Equal(t, 0, code, "powered off, not rebooted")
}

// polkitRule is deploy/host's polkit rule for the non-root agent.
func polkitRule(t *testing.T) []byte {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	rule, err := os.ReadFile(filepath.Join(root, "deploy", "host", "50-edgedrain-agent.rules"))
	require.NoError(t, err)
	return rule
}
