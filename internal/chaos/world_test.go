package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// The world of a chaos run: the real programs on the local control plane, as the external-nats
// overlay deploys them (cmd/agent's natscluster_test.go builds the same thing for scripted
// tests), played with by the schedule (faults_test.go), watched by the recorders
// (recorder_test.go, view_test.go), its machines played by machine_test.go.

const (
	group   = "chaos"
	agentSA = "edgedrain-agent"
)

type world struct {
	t     *testing.T
	c     *testenv.Cluster
	ctx   context.Context // ends when the test does: background work stops
	rec   *Recorder
	dir   string // the run's directory: every process's log, the history
	seed  uint64
	start time.Time
	max   int

	nodes []string
	ns    string

	nats                   *testenv.NATSCluster
	natsBusy               sync.Mutex // one NATS server faulted at a time
	apiBusy                sync.Mutex // one kube-apiserver restart at a time
	urls                   []string
	passwordFile, seedFile string
	operatorFile           string // the operators' password (edgedrainctl)
	bus                    *testenv.Bus
	recorders              []*streamRecorder

	coords []*coordProc
	agents []*agentProc
	lh     *longhorn
	view   *clusterView
	// links are each client's ways to the NATS servers, one proxy per server (the servers do
	// not advertise each other: a client knows only its links), in the order of LinkStall's
	// target: the coordinators', then the agents'.
	links []clientLinks

	rebootRNG   *rand.Rand
	rebootRNGMu sync.Mutex

	// inflight counts faults and reboots under way. A counter, not a WaitGroup: a reboot
	// begins whenever an agent runs its command, also while the test waits for the count to
	// reach zero, which a WaitGroup forbids.
	inflight atomic.Int64
	stopping atomic.Bool // the run is ending: the supervisor restarts nothing, no reboot is played

	// tMu guards w.t for the background goroutines, which may outlive the test by a moment:
	// they use it under a read lock (alive) unless tEnd, which the test's last cleanup sets
	// under the write lock, after waiting for them.
	tMu  sync.RWMutex
	tEnd bool
}

// alive runs f, which may use w.t (log, fail, start a process), unless the test has ended; it
// reports whether f ran. Every goroutine but the test's own uses w.t only through it.
func (w *world) alive(f func()) bool {
	w.t.Helper()
	w.tMu.RLock()
	defer w.tMu.RUnlock()
	if w.tEnd {
		return false
	}
	f()
	return true
}

// logf logs for the harness's background goroutines.
func (w *world) logf(format string, args ...any) {
	w.t.Helper() // the line logged is the caller's
	w.alive(func() { w.t.Helper(); w.t.Logf(format, args...) })
}

// errorf fails the run for the harness's own trouble (a process it cannot start again): the
// run cannot go on fairly. After the test's end it can only say so on stderr.
func (w *world) errorf(format string, args ...any) {
	if !w.alive(func() { w.t.Errorf(format, args...) }) {
		fmt.Fprintf(os.Stderr, "chaos (after the test's end): "+format+"\n", args...)
	}
}

// sleep waits d, or less if the test ends; it reports whether the test goes on.
func (w *world) sleep(d time.Duration) bool { return sleepCtx(w.ctx, d) }

// begin and done bracket a fault or a reboot under way (inflight).
func (w *world) begin() { w.inflight.Add(1) }
func (w *world) done()  { w.inflight.Add(-1) }

// waitIdle waits until no fault or reboot is under way, up to until; it reports whether none is.
func (w *world) waitIdle(until time.Time) bool {
	for w.inflight.Load() > 0 {
		if time.Now().After(until) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

var errTestEnded = errors.New("the test has ended")

type clientLinks struct {
	name    string
	proxies []*testenv.Proxy
}

// newLinks makes client's proxies to the NATS servers and returns its --nats-url.
func (w *world) newLinks(client string) string {
	l := clientLinks{name: client}
	var urls []string
	for _, srv := range w.nats.Servers {
		p := testenv.StartProxy(w.t, fmt.Sprintf("127.0.0.1:%d", srv.Port))
		l.proxies = append(l.proxies, p)
		urls = append(urls, "nats://"+p.Addr())
	}
	w.links = append(w.links, l)
	return strings.Join(urls, ",")
}

// faultable is a process a kill or pause fault acts on (killOrPause).
type faultable interface {
	kill()
	restart() error
	signal(syscall.Signal)
}

type coordProc struct {
	w    *world
	id   string
	args []string
	api  *testenv.Proxy // its way to the Kubernetes API
	mu   sync.Mutex     // held while a fault or the supervisor acts on it
	proc *testenv.Proc
	down bool // killed by the harness, not yet restarted
}

func (c *coordProc) name() string { return "coordinator-" + c.id }

// start starts the coordinator unless the test has ended (c.mu held, or before the run).
func (c *coordProc) start() bool {
	return c.w.alive(func() {
		c.proc = testenv.StartProc(c.w.t, c.w.dir, c.name(), bins.coord, nil, c.args...)
		c.down = false
	})
}

func (c *coordProc) kill()                   { c.down = true; c.proc.Kill() }
func (c *coordProc) signal(s syscall.Signal) { c.proc.Signal(s) }
func (c *coordProc) restart() error {
	if !c.start() {
		return errTestEnded
	}
	return nil
}

type agentProc struct {
	w                                         *world
	node                                      string
	dir, sentinel, bootFile, ran, socket, tok string
	args                                      []string
	mu                                        sync.Mutex // held while a fault, a reboot or the supervisor acts on it
	proc                                      *testenv.Proc
	boots                                     int
	down                                      atomic.Bool // the machine is down (a reboot) or the process killed
	machineDown                               atomic.Bool // the machine is down (a reboot)
	withdrawn                                 atomic.Bool // an operator withdrew the request its sentinel made
	podMu                                     sync.Mutex
	pod                                       *corev1.Pod
	tokenAt                                   time.Time
}

func (a *agentProc) name() string { return "agent-" + a.node }

// start starts the agent unless the test has ended (a.mu held, or before the run).
func (a *agentProc) start() bool {
	return a.w.alive(func() {
		a.proc = testenv.StartProc(a.w.t, a.w.dir, a.name(), bins.agent, nil, a.args...)
		a.down.Store(false)
	})
}

func (a *agentProc) kill()                   { a.down.Store(true); a.proc.Kill() }
func (a *agentProc) signal(s syscall.Signal) { a.proc.Signal(s) }
func (a *agentProc) restart() error {
	if !a.start() {
		return errTestEnded
	}
	return nil
}

// tryHold takes a.mu for a fault or an ask unless the agent is down or another holds it; it
// returns why not ("" when held). The second look at down is for a reboot that held the lock
// and has just taken the machine down.
func (a *agentProc) tryHold() string {
	if a.down.Load() {
		return a.name() + " is down"
	}
	if !a.mu.TryLock() {
		return a.name() + " is busy"
	}
	if a.down.Load() {
		a.mu.Unlock()
		return a.name() + " is down"
	}
	return ""
}

// natsServer is server i of the world's NATS cluster, as a fault sees it.
type natsServer struct {
	w *world
	i int
}

func (s natsServer) kill()                   { s.w.nats.Kill(s.i) }
func (s natsServer) signal(x syscall.Signal) { s.w.nats.Signal(s.i, x) }
func (s natsServer) restart() error {
	err := errTestEnded
	s.w.alive(func() { err = s.w.nats.TryRestart(s.i) })
	return err
}

func (w *world) add(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	w.rec.Add(e)
}

func (w *world) fault(what, target, detail string) {
	w.add(Event{Kind: KindFault, What: what, Target: target, Detail: detail})
}

// newWorld starts everything: nodes, workloads, the NATS cluster, the recorders, two
// coordinators, one agent per node.
func newWorld(t *testing.T, seed uint64, dir string, nodes, maxConcurrent int) *world {
	w := &world{t: t, c: testenv.RequireCluster(t, cluster), rec: &Recorder{}, dir: dir, seed: seed, max: maxConcurrent,
		rebootRNG: rand.New(rand.NewPCG(seed, 3))}
	t.Cleanup(func() { // registered first, so it runs last
		w.tMu.Lock()
		w.tEnd = true
		w.tMu.Unlock()
	})
	rctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.ctx = rctx
	w.nodes = w.c.AddNodes(t, group, nodes)
	w.ns = w.c.Namespace(t)
	ctx := context.Background()

	// The bus: three servers, every client but the coordinators admitted by their auth callout.
	issuer, err := nkeys.CreateAccount()
	must(t, err)
	issuerPub, err := issuer.PublicKey()
	must(t, err)
	issuerSeed, err := issuer.Seed()
	must(t, err)
	password, err := busauth.NewPassword()
	must(t, err)
	operatorPW, err := busauth.NewPassword()
	must(t, err)
	w.passwordFile, w.seedFile, w.operatorFile = filepath.Join(dir, "nats-password"), filepath.Join(dir, "issuer.seed"), filepath.Join(dir, "operator-password")
	must(t, os.WriteFile(w.passwordFile, []byte(password), 0o600))
	must(t, os.WriteFile(w.seedFile, issuerSeed, 0o600))
	must(t, os.WriteFile(w.operatorFile, []byte(operatorPW), 0o600))
	t.Cleanup(func() { // secrets do not outlive the run
		_ = os.Remove(w.passwordFile)
		_ = os.Remove(w.seedFile)
		_ = os.Remove(w.operatorFile)
	})
	w.nats = testenv.StartNATSCluster(t, bins.nats, 3, fmt.Sprintf(`authorization {
  timeout: 5s
  users: [ { user: %q, password: %q } ]
  auth_callout { issuer: %q, auth_users: [ %q ] }
}`, busauth.CoordinatorUser, password, issuerPub, busauth.CoordinatorUser), testenv.NoAdvertise())
	w.urls = w.nats.URLs()
	t.Cleanup(func() {
		for i := range w.nats.Servers {
			_ = os.WriteFile(filepath.Join(dir, w.nats.Servers[i].Name+".log"), []byte(w.nats.Log(i)), 0o600)
		}
	})
	// The buckets, created with three replicas as the coordinators would (they reconcile them),
	// and the recorders of what the bus stored.
	conn := pubsub.ConnectOptions{URLs: w.urls, User: busauth.CoordinatorUser, Password: password, Name: "chaos-recorder"}
	w.bus = testenv.OpenBus(t, conn, 3)
	// Both buckets keep as many values per key as JetStream allows (the coordinators leave a
	// bucket's history as it is): a recorder that falls behind reads back what it missed. A
	// blocked drain publishes its progress every second or so, so a recorder some seconds
	// behind needs many values per key to find them all.
	_, err = pubsub.OpenBucket(ctx, w.bus.JS, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, History: pubsub.MaxHistory}, nodedrain.RequestCodec{})
	must(t, err)
	_, err = pubsub.OpenBucket(ctx, w.bus.JS, pubsub.BucketConfig{Name: nodedrain.StatusBucket, History: pubsub.MaxHistory}, nodedrain.StatusCodec{})
	must(t, err)
	w.recorders = []*streamRecorder{w.recordStream(rctx, w.bus.JS, nodedrain.StatusBucket, KindStatus),
		w.recordStream(rctx, w.bus.JS, nodedrain.RequestsBucket, KindRequest)}
	w.watchCluster(rctx)

	// The workload: a Deployment and a StatefulSet, each with a budget that lets one pod go at a
	// time, and the agents' DaemonSet (whose pods' tokens admit the agents to the bus).
	must(t, testenv.CreateAgentDaemonSet(ctx, w.c.Client, w.ns, agentSA, group))
	w.c.CreateDeployment(t, testenv.DeploymentSpec{Namespace: w.ns, Name: "web", Group: group, Replicas: 6})
	w.createStatefulSet("db", 3)
	for _, app := range []string{"web", "db"} {
		one := intstr.FromInt32(1)
		_, err := w.c.Client.PolicyV1().PodDisruptionBudgets(w.ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: app},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		}, metav1.CreateOptions{})
		must(t, err)
	}

	w.lh = newLonghorn(w)
	w.coords = []*coordProc{w.newCoordinator("a"), w.newCoordinator("b")}
	for _, c := range w.coords {
		c.start()
	}
	for _, node := range w.nodes {
		a := w.newAgent(node)
		w.agents = append(w.agents, a)
	}
	for _, a := range w.agents {
		a.start()
	}
	go w.refreshTokens(rctx)
	go w.keepLeases(rctx)
	go w.supervise(rctx)
	return w
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (w *world) createStatefulSet(name string, replicas int32) {
	grace := int64(1)
	labels := map[string]string{"app": name}
	_, err := w.c.Client.AppsV1().StatefulSets(w.ns).Create(context.Background(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{testenv.GroupLabel: group}, TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{Name: "db", Image: "registry.invalid/db:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	must(w.t, err)
}

// --- coordinators ---

func (w *world) newCoordinator(id string) *coordProc {
	// Its own way to the API, through a proxy that a fault can cut.
	u, err := url.Parse(w.c.Admin.Host)
	must(w.t, err)
	api := testenv.StartProxy(w.t, u.Host)
	kc, err := clientcmd.LoadFromFile(w.c.Kubeconfig)
	must(w.t, err)
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + api.Addr()
	}
	kubeconfig := filepath.Join(w.dir, "kubeconfig-"+id)
	must(w.t, clientcmd.WriteToFile(*kc, kubeconfig))
	w.t.Cleanup(func() { _ = os.Remove(kubeconfig) }) // credentials do not outlive the run
	args := []string{"--kubeconfig", kubeconfig, "--nats-url", w.newLinks("coordinator-" + id),
		"--nats-user", busauth.CoordinatorUser, "--nats-password-file", w.passwordFile,
		"--auth-callout-issuer-seed-file", w.seedFile, "--agent-service-account", w.ns + "/" + agentSA,
		"--operator-password-file", w.operatorFile,
		"--bucket-replicas", "3", "--leader-election-namespace", w.ns, "--identity", id,
		"--node-selector", testenv.GroupLabel + "=" + group, "--cluster-node-selector", testenv.GroupLabel + "=" + group,
		"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(w.t)),
		"--log-format", "json", "--bus-check-interval", "1s", "--max-concurrent-drains", strconv.Itoa(w.max),
		"--drain-attempt-timeout", "30s", "--cordon-backoff", "50ms", "--drain-backoff", "100ms",
		"--evict-retry-delay", "200ms", "--volume-recheck", "100ms"}
	if *flagDebug {
		args = append(args, "--log-level", "debug")
	}
	return &coordProc{w: w, id: id, args: args, api: api}
}

// --- agents ---

// runRecord is the command each operation runs: it writes one line to the agent's record of
// runs, "<unix time> <operation of the command> <EDGEDRAIN_OPERATION> <EDGEDRAIN_REQUEST_ID>"
// ("-" for an empty variable, so that the fields stay four), from which followRuns tells which
// operation ran for which request; the harness then plays the machine (a reboot goes down).
func runRecord(op agent.Operation, ran string) string {
	return fmt.Sprintf(`echo "$(date +%%s.%%N) %s ${%s:--} ${%s:--}" >> '%s'`, op, agent.EnvOperation, agent.EnvRequestID, ran)
}

func (w *world) newAgent(node string) *agentProc {
	dir := filepath.Join(w.dir, "agent-"+node)
	must(w.t, os.MkdirAll(dir, 0o700))
	a := &agentProc{w: w, node: node, dir: dir, sentinel: filepath.Join(dir, "reboot-required"), bootFile: filepath.Join(dir, "boot_id"),
		ran: filepath.Join(dir, "ran"), socket: filepath.Join(dir, "agent.sock"), tok: filepath.Join(dir, "token")}
	_, err := testenv.AgentPodOn(context.Background(), w.c.Client, w.ns, node, time.Minute)
	must(w.t, err)
	a.writeToken()
	a.boots = 1
	must(w.t, os.WriteFile(a.bootFile, []byte("boot-1\n"), 0o644))
	a.args = []string{"--node-name", node, "--nats-url", w.newLinks("agent-" + node), "--nats-token-file", a.tok,
		"--state-dir", filepath.Join(dir, "state"), "--boot-id-file", a.bootFile, "--force-status-file", filepath.Join(dir, "force.json"),
		"--socket", a.socket, "--outcome-file", filepath.Join(dir, "command-succeeded"),
		"--reboot-command", runRecord(agent.OpReboot, a.ran), "--shutdown-command", runRecord(agent.OpShutdown, a.ran),
		"--update-command", runRecord(agent.OpUpdate, a.ran), "--reboot-sentinel", a.sentinel,
		"--sentinel-interval", "500ms", "--sentinel-jitter", "200ms", "--reboot-timeout", "1h",
		// A failed drain is asked again within seconds, not after the default 5 minutes (the
		// whole quiet period): the run judges whether edgedrain gets there, not how long an
		// agent is told to wait. Doubling stops at 30 s for the same reason.
		"--drain-retry-backoff", "5s", "--drain-retry-backoff-max", "30s",
		"--bus-check-interval", "1s", "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"}
	return a
}

// ask runs `agent request <op>` as a person on the node would.
func (a *agentProc) ask(op agent.Operation) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bins.agent, "request", string(op), "--context", "chaos", "--socket", a.socket).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// status is the agent's own report (`agent status --json`).
func (a *agentProc) status() (agent.StatusReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bins.agent, "status", "--json", "--socket", a.socket).CombinedOutput()
	if err != nil {
		return agent.StatusReport{}, fmt.Errorf("%w: %s", err, out)
	}
	var st agent.StatusReport
	return st, json.Unmarshal(out, &st)
}
