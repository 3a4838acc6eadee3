package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

var (
	flagDuration = flag.Duration("chaos.duration", 90*time.Second, "how long faults and sentinels are injected")
	flagSeed     = flag.Uint64("chaos.seed", 0, "the schedule's seed (0: drawn from the clock, printed)")
	flagQuiet    = flag.Duration("chaos.quiet", 5*time.Minute, "the longest quiet period after the faults (L1 is judged at its end; it ends early once everything is settled)")
	flagNodes    = flag.Int("chaos.nodes", 5, "kwok nodes, one agent each")
	flagMax      = flag.Int("chaos.max-concurrent", 2, "the coordinators' --max-concurrent-drains")
	flagKeep     = flag.Bool("chaos.keep", false, "keep the run's directory (logs, history) even when it passes")
	flagHistory  = flag.String("chaos.history", "", "TestJudgeHistory: the history file (history.jsonl) of a run to judge again")
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	testenv.MainWith(m, &cluster, func() (func(), error) {
		return func() {
			if bins.dir != "" {
				_ = os.RemoveAll(bins.dir)
			}
		}, nil
	})
}

// bins are the programs a run starts, built once per test binary.
var bins struct {
	once               sync.Once
	dir                string
	nats, coord, agent string
	ctl                string
	err                error
}

func buildBinaries(t *testing.T) {
	t.Helper()
	bins.once.Do(func() {
		dir, err := os.MkdirTemp("", "edgedrain-chaos-bin-")
		if err != nil {
			bins.err = err
			return
		}
		bins.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if bins.nats, bins.err = testenv.BuildNATSServer(ctx, dir); bins.err != nil {
			return
		}
		if bins.coord, bins.err = testenv.BuildGo(ctx, "./cmd/coordinator", dir); bins.err != nil {
			return
		}
		if bins.agent, bins.err = testenv.BuildGo(ctx, "./cmd/agent", dir); bins.err != nil {
			return
		}
		bins.ctl, bins.err = testenv.BuildGo(ctx, "./cmd/edgedrainctl", dir)
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
}

// TestChaos is a chaos run: the real programs under the faults of a seed's schedule for
// -chaos.duration, a quiet period, then the verdict from the history. `make test` runs a short
// one; `make chaos DURATION=30m SEED=...` a long one.
func TestChaos(t *testing.T) {
	testenv.RequireCluster(t, cluster)
	buildBinaries(t)
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("edgedrain-chaos-%d-", seed))
	must(t, err)
	t.Logf("chaos run: seed %d, %s of faults, %d nodes, max-concurrent-drains %d; logs in %s", seed, *flagDuration, *flagNodes, *flagMax, dir)
	t.Cleanup(func() {
		if t.Failed() || *flagKeep {
			t.Logf("the run's logs and history are kept in %s (replay the schedule with -chaos.seed %d)", dir, seed)
			return
		}
		_ = os.RemoveAll(dir)
	})

	w := newWorld(t, seed, dir, *flagNodes, *flagMax)
	w.waitSettled(3*time.Minute, "the start")
	w.start = time.Now()
	cfg := Config{Seed: seed, MaxConcurrent: *flagMax, ConfirmMaxAge: agent.ConfirmMaxAge}
	w.add(Event{At: w.start, Kind: KindPhase, What: "start", Detail: fmt.Sprintf("seed %d", seed), Config: &cfg})

	plan := Schedule(seed, Shape{Duration: *flagDuration, Nodes: len(w.nodes), Coords: len(w.coords), Servers: len(w.nats.Servers),
		FaultEvery: 6 * time.Second, SentinelEvery: 10 * time.Second})
	for _, a := range plan {
		time.Sleep(time.Until(w.start.Add(a.At)))
		w.inflight.Add(1)
		go w.act(a)
	}
	time.Sleep(time.Until(w.start.Add(*flagDuration)))
	// Every fault ends (its process back, its cordon undone); reboots under way finish.
	w.inflight.Wait()
	w.add(Event{Kind: KindPhase, What: "faults-stop"})
	settled := w.waitSettled(*flagQuiet, "the quiet period")
	w.stopping.Store(true)
	for _, a := range w.agents {
		e := Event{Kind: KindAgent, Node: a.node, What: "unreachable"}
		if st, err := a.status(); err == nil {
			e.What, e.RequestID, e.Detail = string(st.State.Phase), st.State.RequestID, st.StatusName
		} else {
			e.Detail = err.Error()
		}
		w.add(e)
	}
	// Pods that do not run at the end tell a control plane's trouble (a scheduler stuck, seed 12)
	// from edgedrain's: they show in every L1 story.
	if pods, err := w.c.Client.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				w.add(Event{Kind: KindPhase, What: "pod-not-running", Detail: fmt.Sprintf("%s/%s %s on %q", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)})
			}
		}
	}
	w.add(Event{Kind: KindPhase, What: "end", Detail: fmt.Sprintf("settled=%v", settled)})
	time.Sleep(2 * time.Second) // the recorders deliver what was stored before the end
	for _, r := range w.recorders {
		r.finish(context.Background())
	}

	events := w.rec.Events()
	f, err := os.Create(filepath.Join(dir, "history.jsonl"))
	must(t, err)
	must(t, WriteHistory(f, events))
	must(t, f.Close())
	t.Log(summary(events, plan))
	vs := Check(events, cfg)
	if len(vs) > 0 {
		t.Errorf("%d violations (seed %d):%s", len(vs), seed, Report(vs, seed))
	}
}

// TestJudgeHistory judges a kept run's history again (after a change to the checker).
func TestJudgeHistory(t *testing.T) {
	if *flagHistory == "" {
		t.Skip("no -chaos.history")
	}
	events, err := ReadHistory(*flagHistory)
	must(t, err)
	cfg := ConfigOf(events, Config{Seed: *flagSeed, MaxConcurrent: *flagMax, ConfirmMaxAge: agent.ConfirmMaxAge})
	vs := Check(events, cfg)
	t.Log(summary(events, nil))
	if len(vs) > 0 {
		t.Errorf("%d violations:%s", len(vs), Report(vs, cfg.Seed))
	}
}

// act carries out one action of the schedule.
func (w *world) act(a Action) {
	defer w.inflight.Done()
	switch a.Kind {
	case CoordKill, CoordPause:
		c := w.coords[a.Target]
		name := "coordinator-" + c.id
		if !c.mu.TryLock() {
			w.fault(a.Kind, name, "skipped: busy")
			return
		}
		defer c.mu.Unlock()
		w.fault(a.Kind, name, "start")
		if a.Kind == CoordKill {
			c.down = true
			c.proc.Kill()
			time.Sleep(a.For)
			c.start()
		} else {
			c.proc.Signal(syscall.SIGSTOP)
			time.Sleep(a.For)
			c.proc.Signal(syscall.SIGCONT)
		}
		w.fault(a.Kind, name, "end")
	case AgentKill, AgentPause:
		ag := w.agents[a.Target]
		name := "agent-" + ag.node
		if ag.down.Load() || !ag.mu.TryLock() {
			w.fault(a.Kind, name, "skipped: busy")
			return
		}
		defer ag.mu.Unlock()
		if ag.down.Load() {
			w.fault(a.Kind, name, "skipped: down")
			return
		}
		w.fault(a.Kind, name, "start")
		if a.Kind == AgentKill {
			ag.down.Store(true)
			ag.proc.Kill()
			time.Sleep(a.For)
			ag.start()
		} else {
			ag.proc.Signal(syscall.SIGSTOP)
			time.Sleep(a.For)
			ag.proc.Signal(syscall.SIGCONT)
		}
		w.fault(a.Kind, name, "end")
	case NATSKill, NATSPause:
		name := w.nats.Servers[a.Target].Name
		if !w.natsBusy.TryLock() {
			w.fault(a.Kind, name, "skipped: another server is faulted")
			return
		}
		defer w.natsBusy.Unlock()
		w.fault(a.Kind, name, "start")
		if a.Kind == NATSKill {
			w.nats.Kill(a.Target)
			time.Sleep(a.For)
			w.nats.Restart(a.Target)
		} else {
			w.nats.Signal(a.Target, syscall.SIGSTOP)
			time.Sleep(a.For)
			w.nats.Signal(a.Target, syscall.SIGCONT)
		}
		// The next server faulted waits until this one has caught up: one down at a time keeps
		// the quorum (a quorum loss is a fault kind of its own, not drawn yet).
		deadline := time.Now().Add(2 * time.Minute)
		for w.nats.Healthy(a.Target) != nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		w.fault(a.Kind, name, "end")
	case OpCordon:
		node := w.nodes[a.Target]
		w.fault(a.Kind, node, "start")
		w.kubectl("cordon", node)
		time.Sleep(a.For)
		w.kubectl("uncordon", node)
		w.fault(a.Kind, node, "end")
	case OpUncordon:
		// The first cordoned node from the target on: an uncordon behind edgedrain's back,
		// most often mid-drain.
		for i := range w.nodes {
			node := w.nodes[(a.Target+i)%len(w.nodes)]
			n, err := w.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err == nil && n.Spec.Unschedulable {
				w.fault(a.Kind, node, "start")
				w.kubectl("uncordon", node)
				return
			}
		}
		w.fault(a.Kind, "", "skipped: no node cordoned")
	case APICut:
		c := w.coords[a.Target]
		name := "coordinator-" + c.id
		w.fault(a.Kind, name, "start")
		c.api.Cut()
		time.Sleep(a.For)
		if err := c.api.Restore(); err != nil {
			w.t.Logf("restore the API proxy of %s: %v", name, err)
		}
		w.fault(a.Kind, name, "end")
	case PDBBlock:
		app := []string{"web", "db"}[a.Target]
		w.fault(a.Kind, "pdb/"+app, "start")
		w.patchPDB(app, 0)
		time.Sleep(a.For)
		w.patchPDB(app, 1)
		w.fault(a.Kind, "pdb/"+app, "end")
	case NodeDelete:
		ag := w.agents[a.Target]
		if ag.down.Load() || !ag.mu.TryLock() {
			w.fault(a.Kind, ag.node, "skipped: its machine is busy")
			return
		}
		defer ag.mu.Unlock()
		w.fault(a.Kind, ag.node, "start")
		w.kubectl("delete", "node", ag.node, "--wait=false")
		time.Sleep(a.For)
		// The kubelet registers the node again: a new Node object, its labels, not cordoned.
		ctx := context.Background()
		for range 150 {
			if _, err := w.c.Client.CoreV1().Nodes().Get(ctx, ag.node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		w.retry("register "+ag.node+" again", func() error {
			err := w.c.CreateNode(ctx, ag.node, map[string]string{testenv.GroupLabel: group})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		w.fault(a.Kind, ag.node, "end")
	case OpWithdraw:
		node := w.nodes[a.Target]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := w.bus.Requests.Get(ctx, node)
		cancel()
		if err != nil {
			w.fault(a.Kind, node, "skipped: no request")
			return
		}
		w.fault(a.Kind, node, "start")
		w.agents[a.Target].withdrawn.Store(true)
		cmd := exec.Command(bins.ctl, "--nats-url", strings.Join(w.urls, ","), "--nats-user", busauth.OperatorUser,
			"--nats-password-file", w.operatorFile, "withdraw", node)
		if out, err := cmd.CombinedOutput(); err != nil {
			w.fault(a.Kind, node, fmt.Sprintf("failed: %v: %s", err, strings.TrimSpace(string(out))))
		}
	case LinkStall, LinkCut:
		l := w.links[a.Target/len(w.nats.Servers)]
		p := l.proxies[a.Target%len(w.nats.Servers)]
		target := l.name + "→" + w.nats.Servers[a.Target%len(w.nats.Servers)].Name
		if a.Kind == LinkStall {
			target += map[bool]string{true: " (what it sends)", false: " (what it is sent)"}[a.Dir]
		}
		w.fault(a.Kind, target, "start")
		if a.Kind == LinkStall {
			p.Stall(a.Dir)
			time.Sleep(a.For)
			p.Unstall()
		} else {
			p.Cut()
			time.Sleep(a.For)
			if err := p.Restore(); err != nil {
				w.t.Errorf("restore the link %s: %v", target, err)
			}
		}
		w.fault(a.Kind, target, "end")
	case APIRestart:
		if !w.apiBusy.TryLock() {
			w.fault(a.Kind, "kube-apiserver", "skipped: busy")
			return
		}
		defer w.apiBusy.Unlock()
		w.fault(a.Kind, "kube-apiserver", "start")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := w.c.RestartAPIServer(ctx, a.For); err != nil {
			w.t.Errorf("restart kube-apiserver: %v", err) // the harness's own failure: the run cannot go on fairly
		}
		// The scheduler with it: its cache can go wrong across an API restart and leave pods
		// Pending for good (seed 12), and with them every budget at 0 and every drain failing.
		if err := w.c.RestartScheduler(); err != nil {
			w.t.Errorf("restart kube-scheduler: %v", err)
		}
		w.fault(a.Kind, "kube-apiserver", "end")
	case ReplicaFail:
		vi, i := a.Target/2, a.Target%2
		v := w.lh.volumes[vi]
		w.fault(a.Kind, v.replica(i), "start")
		w.lh.fail(vi, i, a.For, func(node string) bool {
			for _, ag := range w.agents {
				if ag.node == node {
					return !ag.machineDown.Load()
				}
			}
			return true
		})
		w.fault(a.Kind, v.replica(i), "end")
	case AskUpdate:
		ag := w.agents[a.Target]
		skip := func(why string) { w.add(Event{Kind: KindAsk, Node: ag.node, Op: "update", Detail: "skipped: " + why}) }
		if ag.down.Load() || !ag.mu.TryLock() {
			skip("agent busy")
			return
		}
		defer ag.mu.Unlock()
		if _, err := os.Stat(ag.sentinel); err == nil {
			skip("a reboot is asked for")
			return
		}
		if st, err := ag.status(); err != nil || st.State.Phase != agent.PhaseIdle {
			skip(fmt.Sprintf("agent not idle (%v %v)", st.State.Phase, err))
			return
		}
		at := time.Now()
		if err := ag.ask("update"); err != nil {
			skip(err.Error())
			return
		}
		w.add(Event{At: at, Kind: KindAsk, Node: ag.node, Op: "update"})
	case Sentinel:
		ag := w.agents[a.Target]
		if ag.down.Load() {
			w.add(Event{Kind: KindAsk, Node: ag.node, Op: "reboot", Detail: "skipped: machine down"})
			return
		}
		if _, err := os.Stat(ag.sentinel); err == nil {
			w.add(Event{Kind: KindAsk, Node: ag.node, Op: "reboot", Detail: "skipped: one is there"})
			return
		}
		ag.withdrawn.Store(false)
		w.add(Event{Kind: KindAsk, Node: ag.node, Op: "reboot"})
		_ = os.WriteFile(ag.sentinel, []byte("*** System restart required ***\n"), 0o644)
	}
}

// patchPDB sets app's budget to let maxUnavailable pods go.
func (w *world) patchPDB(app string, maxUnavailable int) {
	w.retry("patch the budget of "+app, func() error {
		_, err := w.c.Client.PolicyV1().PodDisruptionBudgets(w.ns).Patch(context.Background(), app, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"maxUnavailable":%d}}`, maxUnavailable)), metav1.PatchOptions{})
		return err
	})
}

// kubectl runs the real kubectl as an operator would, again while the API does not answer
// (an operator tries again), not when it answers no (a Node not found).
func (w *world) kubectl(args ...string) {
	w.retry("kubectl "+strings.Join(args, " "), func() error {
		cmd := exec.Command(filepath.Join(w.c.BinDir, "kubectl"), append([]string{"--kubeconfig", w.c.Kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "Error from server") {
			w.logf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
}

// waitSettled waits up to timeout until everything is at rest for 5 s: no request, every
// status NOTREQUESTED out of its return gate, no node cordoned or carrying edgedrain's record,
// every agent idle, no reboot under way, no sentinel left. It reports whether it got there.
func (w *world) waitSettled(timeout time.Duration, what string) bool {
	deadline := time.Now().Add(timeout)
	var since time.Time
	var why string
	for time.Now().Before(deadline) {
		why = w.unsettled()
		switch {
		case why != "":
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 5*time.Second:
			return true
		}
		time.Sleep(time.Second)
	}
	w.t.Logf("not settled at the end of %s: %s", what, why)
	return false
}

func (w *world) unsettled() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := w.bus.Requests.Keys(ctx)
	if err != nil {
		return "requests: " + err.Error()
	}
	if len(keys) > 0 {
		return fmt.Sprintf("requests on the bus: %v", keys)
	}
	for _, a := range w.agents {
		if a.down.Load() {
			return a.node + " is down"
		}
		if _, err := os.Stat(a.sentinel); err == nil && !a.withdrawn.Load() {
			return a.node + " has a sentinel"
		}
		st, _, err := w.bus.Statuses.Get(ctx, a.node)
		if err == nil && (st.Status != nodedrain.StatusNotRequested || !st.ReturningSince.IsZero()) {
			return fmt.Sprintf("%s is %s (returning %v)", a.node, st.Status, !st.ReturningSince.IsZero())
		}
		n, err := w.c.Client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if n.Spec.Unschedulable {
			return a.node + " is cordoned"
		}
		if rep, err := a.status(); err != nil || rep.State.Phase != agent.PhaseIdle {
			return fmt.Sprintf("the agent of %s is not idle: %v %v", a.node, rep.State.Phase, err)
		}
	}
	return ""
}

// summary tells what a run did: drains completed, operations run, faults per kind, the
// history's size.
func summary(events []Event, plan []Action) string {
	completes := map[string]bool{}
	faults := map[string]int{}
	skipped := map[string]int{}
	runs, asked := map[string]int{}, map[string]int{}
	lost := 0
	for _, e := range events {
		switch e.Kind {
		case KindStatus:
			if e.Status != nil && e.Status.Status == nodedrain.StatusComplete {
				completes[e.Node+"/"+e.Status.RequestID] = true
			}
		case KindPhase:
			if e.What == "lost" {
				lost++
			}
		case KindRun:
			runs[e.Op]++
		case KindAsk:
			if e.Detail == "" {
				asked[e.Op]++
			} else {
				skipped["ask-"+e.Op]++
			}
		case KindFault:
			switch {
			case e.Detail == "start" || e.What == "crash":
				faults[e.What]++
			case strings.HasPrefix(e.Detail, "skipped"):
				skipped[e.What]++
			}
		}
	}
	var kinds []string
	for k, n := range faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("history: %d events; schedule: %d actions; operations asked %v; drains completed %d; operations run %v; most nodes in maintenance at once %d; faults injected (%d kinds): %s; skipped: %v; revisions the recorder lost: %d",
		len(events), len(plan), asked, len(completes), runs, MostInMaintenance(events), len(faults), strings.Join(kinds, ", "), skipped, lost)
}
