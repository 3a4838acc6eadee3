package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

var (
	flagDuration = flag.Duration("chaos.duration", 90*time.Second, "how long faults and sentinels are injected")
	// The short run in `make test` (no flags) replays one schedule known to pass, so that CI goes
	// red only when edgedrain changed; `make chaos` draws a new one unless SEED is given.
	flagSeed    = flag.Uint64("chaos.seed", shortRunSeed, "the schedule's seed (0: drawn from the clock, printed)")
	flagQuiet   = flag.Duration("chaos.quiet", 5*time.Minute, "the longest quiet period after the faults (L1 is judged at its end; it ends early once everything is settled)")
	flagNodes   = flag.Int("chaos.nodes", 5, "kwok nodes, one agent each")
	flagMax     = flag.Int("chaos.max-concurrent", 2, "the coordinators' --max-concurrent-drains")
	flagKeep    = flag.Bool("chaos.keep", false, "keep the run's directory (logs, history) even when it passes")
	flagDebug   = flag.Bool("chaos.debug", false, "the coordinators log at debug level (the volume gate's finding for every volume at every check: large logs; for replaying a finding)")
	flagHistory = flag.String("chaos.history", "", "TestJudgeHistory: the history file (history.jsonl) of a run to judge again")
)

// shortRunSeed is the seed of the run without flags (make test's): one that has passed
// repeatedly, with both cores busy. A random seed there would also find the harness's own
// faults (a Node deleted and registered again that kwok stops heartbeating) and turn CI red for
// reasons that are not edgedrain's.
const shortRunSeed = 21

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

// Bounds of a run besides its faults and quiet period.
const (
	// startSettle: the world at rest before the faults begin.
	startSettle = 3 * time.Minute
	// faultsEnd: every fault ended after the schedule's last (the longest, a node deleted for
	// 75 s, its registration retried for up to two minutes) and reboots under way finished.
	faultsEnd = 5 * time.Minute
	// teardown: the history written and judged, the processes stopped, the cleanups run. A
	// run ends this long before the test binary's -timeout: that timeout panics, and a panic
	// runs no cleanup (processes left, the kept directory not said).
	teardown = 3 * time.Minute
	// minQuiet: a quiet period shorter than this judges L1 too early to be fair.
	minQuiet = time.Minute
)

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
	// The run's directory holds secrets (the NATS password, the issuer's seed, the operators'
	// password, admin kubeconfigs): its owner's alone.
	dir, err := os.MkdirTemp("", fmt.Sprintf("edgedrain-chaos-%d-", seed))
	must(t, err)
	must(t, os.Chmod(dir, 0o700))
	t.Logf("chaos run: seed %d, %s of faults, %d nodes, max-concurrent-drains %d; logs in %s", seed, *flagDuration, *flagNodes, *flagMax, dir)
	t.Cleanup(func() {
		if t.Failed() || *flagKeep {
			keepControlPlaneLogs(t, cluster.Dir, filepath.Join(dir, "control-plane"))
			t.Logf("the run's logs and history are kept in %s (replay the schedule with -chaos.seed %d)", dir, seed)
			return
		}
		_ = os.RemoveAll(dir)
	})
	// The run's own deadline, inside the test binary's.
	var deadline time.Time
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-teardown)
	}

	// left is what the deadline leaves after the faults and their end (no deadline: no bound);
	// too little for the shortest fair quiet period fails the run before it judges anything.
	left := func() time.Duration {
		if deadline.IsZero() {
			return 1 << 62
		}
		d := time.Until(deadline) - *flagDuration - faultsEnd
		if d < minQuiet {
			t.Fatalf("the test's -timeout leaves %s for %s of faults, their end (%s) and a quiet period (%s at least): give it more (logs in %s)",
				time.Until(deadline).Round(time.Second), *flagDuration, faultsEnd, minQuiet, dir)
		}
		return d
	}

	w := newWorld(t, seed, dir, *flagNodes, *flagMax)
	if !w.waitSettled(min(startSettle, left()-minQuiet+time.Second), "the start") {
		t.Fatalf("the world did not settle before the faults: the run would judge the harness's start, not edgedrain (logs in %s)", dir)
	}
	quiet := min(*flagQuiet, left())
	w.start = time.Now()
	cfg := Config{Seed: seed, MaxConcurrent: *flagMax, ConfirmMaxAge: agent.ConfirmMaxAge}
	w.add(Event{At: w.start, Kind: KindPhase, What: "start", Detail: fmt.Sprintf("seed %d", seed), Config: &cfg})

	plan := Schedule(seed, Shape{Duration: *flagDuration, Nodes: len(w.nodes), Coords: len(w.coords), Servers: len(w.nats.Servers),
		FaultEvery: 6 * time.Second, SentinelEvery: 10 * time.Second})
	for _, a := range plan {
		time.Sleep(time.Until(w.start.Add(a.At)))
		w.begin()
		go w.act(a)
	}
	time.Sleep(time.Until(w.start.Add(*flagDuration)))
	// Every fault ends (its process back, its cordon undone); reboots under way finish.
	if until := w.start.Add(*flagDuration + faultsEnd); !w.waitIdle(until) {
		t.Fatalf("faults or reboots still under way %s after the last was due: the harness is stuck (logs in %s)", faultsEnd, dir)
	}
	w.add(Event{Kind: KindPhase, What: "faults-stop"})
	settled := w.waitSettled(quiet, "the quiet period")
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
	// Pods that do not run at the end tell a control plane's trouble (a scheduler stuck after an
	// API restart) from edgedrain's: they show in every L1 story.
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
	lost, gaps := 0, 0
	for _, e := range events {
		switch e.Kind {
		case KindStatus:
			if e.Status != nil && e.Status.Status == nodedrain.StatusComplete {
				completes[e.Node+"/"+e.Status.RequestID] = true
			}
		case KindPhase:
			switch e.What {
			case "lost":
				lost++
			case "gap":
				gaps++
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
	return fmt.Sprintf("history: %d events; schedule: %d actions; operations asked %v; drains completed %d; operations run %v; most nodes in maintenance at once %d; faults injected (%d kinds): %s; skipped: %v; revisions the recorder lost: %d; sequences that held no message it could find (gaps): %d",
		len(events), len(plan), asked, len(completes), runs, MostInMaintenance(events), len(faults), strings.Join(kinds, ", "), skipped, lost, gaps)
}

// keepControlPlaneLogs copies the control plane's logs (kwok's, the API server's and the
// controllers', rotated ones too) into the kept run's directory: the cluster outlives the test
// and its directory is removed with it, and a verdict about a Node's health or a Lease can be
// the simulated kubelet's doing.
func keepControlPlaneLogs(t *testing.T, from, to string) {
	logs, _ := filepath.Glob(filepath.Join(from, "*.log*"))
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Logf("keep the control plane's logs: %v", err)
		return
	}
	for _, src := range logs {
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(to, filepath.Base(src)), data, 0o600)
		}
		if err != nil {
			t.Logf("keep the control plane's logs: %v", err)
		}
	}
}
