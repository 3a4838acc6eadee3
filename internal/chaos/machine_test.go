package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// The harness plays what the cluster's machines and kubelet would do around the programs: it
// restarts a process that crashed, follows the commands an agent ran and plays a reboot's
// machine going down and coming back, and keeps each agent's projected token fresh.

// supervise restarts a coordinator or agent that exited on its own, as the kubelet would a
// crashed container, and says so in the history (a crash the harness did not cause is a
// finding). It also follows each agent's command record.
func (w *world) supervise(ctx context.Context) {
	offsets := map[string]int64{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, a := range w.agents {
			w.followRuns(a, offsets)
		}
		if time.Since(last) < time.Second || w.stopping.Load() {
			continue
		}
		last = time.Now()
		for _, c := range w.coords {
			w.restartCrashed(&c.mu, func() bool { return c.down }, func() *testenv.Proc { return c.proc }, c.name(), func() { c.start() })
		}
		for _, a := range w.agents {
			w.restartCrashed(&a.mu, a.down.Load, func() *testenv.Proc { return a.proc }, a.name(), func() { a.start() })
		}
	}
}

// restartCrashed records and restarts a process that exited on its own (a finding), unless a
// fault holds it (mu busy) or took it down on purpose.
func (w *world) restartCrashed(mu *sync.Mutex, down func() bool, proc func() *testenv.Proc, name string, start func()) {
	if !mu.TryLock() {
		return
	}
	defer mu.Unlock()
	if p := proc(); !down() && p.Exited() {
		w.fault("crash", name, fmt.Sprintf("exited on its own (code %d); restarted", p.Wait(time.Second)))
		start()
	}
}

// followRuns reads the new lines of a's command record (runRecord): each is a run, recorded
// with the operation whose command ran (Op), and a reboot's or shutdown's run is followed by
// the machine going down.
func (w *world) followRuns(a *agentProc, offsets map[string]int64) {
	f, err := os.Open(a.ran)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(offsets[a.node], 0); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return // an incomplete line is read again next time
		}
		offsets[a.node] += int64(len(line))
		parts := strings.Fields(line)
		if len(parts) != 4 {
			w.add(Event{Kind: KindRun, Node: a.node, Op: "?", Detail: "unreadable record " + strconv.Quote(line)})
			continue
		}
		sec, _ := strconv.ParseFloat(parts[0], 64)
		e := Event{At: time.Unix(0, int64(sec*1e9)), Kind: KindRun, Node: a.node, Op: parts[1]}
		if parts[3] != "-" {
			e.RequestID = parts[3]
		}
		switch parts[2] {
		case e.Op:
		case "-":
			e.Detail = "no " + agent.EnvOperation + " in the command's environment"
		default:
			// The agent ran one operation's command with another's name in its environment.
			e.Detail = agent.EnvOperation + "=" + parts[2]
		}
		w.add(e)
		if e.Op == string(agent.OpReboot) || e.Op == string(agent.OpShutdown) {
			w.begin()
			go w.reboot(a, e.RequestID)
		}
	}
}

// reboot plays a's machine rebooting: down (the agent killed, the Node NotReady), a while, up
// (a new boot ID, /run cleared, the Node Ready, the agent started). Once the run is ending it
// plays nothing (the history says so), and it stops where it is when the test ends.
func (w *world) reboot(a *agentProc, request string) {
	defer w.done()
	a.mu.Lock()
	defer a.mu.Unlock()
	w.rebootRNGMu.Lock()
	downFor := between(w.rebootRNG, 3*time.Second, 15*time.Second)
	w.rebootRNGMu.Unlock()
	if !w.sleep(300*time.Millisecond) || w.stopping.Load() { // the command returned; systemd takes the machine down
		w.add(Event{Kind: KindPhase, Node: a.node, RequestID: request, What: "reboot-not-played", Detail: "the run is ending"})
		return
	}
	a.down.Store(true)
	a.machineDown.Store(true)
	a.proc.Kill()
	_ = w.retry("power off "+a.node, func() error { return testenv.PowerOff(w.ctx, w.c.Client, a.node) })
	w.lh.nodeDown(a.node)
	w.add(Event{Kind: KindReboot, Node: a.node, What: "down", RequestID: request, Detail: "for " + downFor.Round(time.Millisecond).String()})
	if !w.sleep(downFor) {
		return // the test is over: the machine stays down with everything else
	}
	_ = os.Remove(a.sentinel) // /run does not survive a reboot
	a.withdrawn.Store(false)
	a.boots++
	_ = os.WriteFile(a.bootFile, []byte(fmt.Sprintf("boot-%d\n", a.boots)), 0o644)
	_ = w.retry("power on "+a.node, func() error { return testenv.PowerOn(w.ctx, w.c.Client, a.node) })
	w.add(Event{Kind: KindReboot, Node: a.node, What: "up", RequestID: request, Detail: fmt.Sprintf("boot-%d", a.boots)})
	a.machineDown.Store(false)
	w.lh.nodeUp(a.node)
	a.start()
}

// retry does what the harness must get done through the API (a machine's power, an operator's
// cordon undone) however long a kube-apiserver restart keeps it from it, up to two minutes,
// waiting longer after each failure (up to 4 s) so that a loaded API is not pressed harder. It
// returns the last error if it never got there, or if the test ended first.
func (w *world) retry(what string, do func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	wait := 250 * time.Millisecond
	for {
		err := do()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			w.logf("%s: gave up after 2 minutes: %v", what, err)
			return err
		}
		if !w.sleep(wait) {
			return err
		}
		wait = min(2*wait, 4*time.Second)
	}
}

// writeToken writes a token of the node's agent pod (the DaemonSet's pod there now: a Node
// deleted and registered again has a new one) when the pod changed or the token is 4 minutes
// old, as the kubelet rotates projected tokens.
func (a *agentProc) writeToken() {
	a.podMu.Lock()
	defer a.podMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod, err := testenv.AgentPodOn(ctx, a.w.c.Client, a.w.ns, a.node, 5*time.Second)
	if err != nil {
		return // no pod now (its Node deleted): the next round
	}
	if a.pod != nil && pod.UID == a.pod.UID && time.Since(a.tokenAt) < 4*time.Minute {
		return
	}
	tok, err := testenv.RequestPodToken(ctx, a.w.c.Client, pod, testenv.AgentAudience, 600)
	if err != nil {
		a.w.logf("token for %s: %v", a.node, err)
		return
	}
	_ = os.WriteFile(a.tok+".new", []byte(tok), 0o600)
	_ = os.Rename(a.tok+".new", a.tok) // as the kubelet's atomic writer
	a.pod, a.tokenAt = pod, time.Now()
}

// refreshTokens keeps each agent's token that of its pod, and fresh.
func (w *world) refreshTokens(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) {
		for _, a := range w.agents {
			a.writeToken()
		}
	}, 10*time.Second)
}

// TestRunRecordNamesTheOperation: each operation's command records itself so that the history
// says which operation ran for which request, whatever the environment holds.
func TestRunRecordNamesTheOperation(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	w := &world{t: t, ctx: context.Background(), rec: &Recorder{}}
	a := &agentProc{w: w, node: "n", ran: ran}
	for _, env := range [][]string{
		{agent.EnvOperation + "=update", agent.EnvRequestID + "=r-1"},
		{agent.EnvOperation + "=", agent.EnvRequestID + "="},
		{agent.EnvOperation + "=reboot", agent.EnvRequestID + "=r-2"},
	} {
		cmd := exec.Command(agent.Shell, "-c", runRecord(agent.OpUpdate, ran))
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	w.followRuns(a, map[string]int64{})
	events := w.rec.Events()
	require.Len(t, events, 3)
	for i, want := range []struct{ req, detail string }{
		{"r-1", ""},
		{"", "no EDGEDRAIN_OPERATION in the command's environment"},
		{"r-2", "EDGEDRAIN_OPERATION=reboot"},
	} {
		e := events[i]
		require.Equal(t, KindRun, e.Kind)
		require.Equal(t, "n", e.Node)
		require.Equal(t, string(agent.OpUpdate), e.Op, "the run does not name the command that ran")
		require.Equal(t, want.req, e.RequestID)
		require.Equal(t, want.detail, e.Detail)
		require.WithinDuration(t, time.Now(), e.At, time.Minute)
	}
}
