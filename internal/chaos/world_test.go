package chaos

import (
	"bufio"
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
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// The world of a chaos run: the real programs on the local control plane, as the external-nats
// overlay deploys them (cmd/agent's natscluster_test.go builds the same thing for scripted
// tests), played with by the schedule, watched by the recorders.

const (
	group   = "chaos"
	agentSA = "edgedrain-agent"
)

type world struct {
	t     *testing.T
	c     *testenv.Cluster
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

	inflight sync.WaitGroup // faults and reboots under way
	stopping atomic.Bool    // the run is ending: the supervisor restarts nothing

	logMu  sync.Mutex
	logEnd bool // the test is ending: background goroutines log no more
}

// logf logs for the harness's background goroutines, which may outlive the test by a moment.
func (w *world) logf(format string, args ...any) {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	if !w.logEnd {
		w.t.Logf(format, args...)
	}
}

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

type coordProc struct {
	w    *world
	id   string
	args []string
	api  *testenv.Proxy // its way to the Kubernetes API
	mu   sync.Mutex     // held while a fault or the supervisor acts on it
	proc *testenv.Proc
	down bool // killed by the harness, not yet restarted
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
		w.logMu.Lock()
		w.logEnd = true
		w.logMu.Unlock()
	})
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
	rctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	// Both buckets keep as many values per key as JetStream allows (the coordinators leave a
	// bucket's history as it is): a recorder that falls behind reads back what it missed. A
	// blocked drain publishes its progress every second or so, and 20 were too few for a
	// recorder 10 s behind (seed 9 lost six revisions).
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
	return &coordProc{w: w, id: id, args: args, api: api}
}

func (c *coordProc) start() {
	c.proc = testenv.StartProc(c.w.t, c.w.dir, "coordinator-"+c.id, bins.coord, nil, c.args...)
	c.down = false
}

// --- agents ---

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
	// The command records itself; the harness then plays the machine going down (reboot).
	cmd := `echo "$(date +%s.%N) $EDGEDRAIN_OPERATION $EDGEDRAIN_REQUEST_ID" >> ` + a.ran
	a.args = []string{"--node-name", node, "--nats-url", w.newLinks("agent-" + node), "--nats-token-file", a.tok,
		"--state-dir", filepath.Join(dir, "state"), "--boot-id-file", a.bootFile, "--force-status-file", filepath.Join(dir, "force.json"),
		"--socket", a.socket, "--outcome-file", filepath.Join(dir, "command-succeeded"),
		"--reboot-command", cmd, "--shutdown-command", cmd, "--update-command", cmd, "--reboot-sentinel", a.sentinel,
		"--sentinel-interval", "500ms", "--sentinel-jitter", "200ms", "--reboot-timeout", "1h",
		"--bus-check-interval", "1s", "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"}
	return a
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

func (a *agentProc) start() {
	a.proc = testenv.StartProc(a.w.t, a.w.dir, "agent-"+a.node, bins.agent, nil, a.args...)
	a.down.Store(false)
}

// ask runs `agent request <op>` as a person on the node would.
func (a *agentProc) ask(op string) error {
	out, err := exec.Command(bins.agent, "request", op, "--context", "chaos", "--socket", a.socket).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// status is the agent's own report (`agent status --json`).
func (a *agentProc) status() (agent.StatusReport, error) {
	out, err := exec.Command(bins.agent, "status", "--json", "--socket", a.socket).CombinedOutput()
	if err != nil {
		return agent.StatusReport{}, fmt.Errorf("%w: %s", err, out)
	}
	var st agent.StatusReport
	return st, json.Unmarshal(out, &st)
}

// refreshTokens keeps each agent's token that of its pod, and fresh.
func (w *world) refreshTokens(ctx context.Context) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for _, a := range w.agents {
				a.writeToken()
			}
		}
	}
}

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
			if c.mu.TryLock() {
				if !c.down && c.proc.Exited() {
					w.fault("crash", "coordinator-"+c.id, fmt.Sprintf("exited on its own (code %d); restarted", c.proc.Wait(0)))
					c.start()
				}
				c.mu.Unlock()
			}
		}
		for _, a := range w.agents {
			if a.mu.TryLock() {
				if !a.down.Load() && a.proc.Exited() {
					w.fault("crash", "agent-"+a.node, fmt.Sprintf("exited on its own (code %d); restarted", a.proc.Wait(0)))
					a.start()
				}
				a.mu.Unlock()
			}
		}
	}
}

// followRuns reads the new lines of a's command record: each is a run, and a reboot's run is
// followed by the machine going down.
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
		if len(parts) < 3 {
			w.add(Event{Kind: KindRun, Node: a.node, Op: "?", Detail: "unreadable record " + strconv.Quote(line)})
			continue
		}
		sec, _ := strconv.ParseFloat(parts[0], 64)
		e := Event{At: time.Unix(0, int64(sec*1e9)), Kind: KindRun, Node: a.node, Op: parts[1], RequestID: parts[2]}
		w.add(e)
		if e.Op == string(agent.OpReboot) || e.Op == "shutdown" {
			w.inflight.Add(1)
			go w.reboot(a, e.RequestID)
		}
	}
}

// reboot plays a's machine rebooting: down (the agent killed, the Node NotReady), a while, up
// (a new boot ID, /run cleared, the Node Ready, the agent started).
func (w *world) reboot(a *agentProc, request string) {
	defer w.inflight.Done()
	a.mu.Lock()
	defer a.mu.Unlock()
	w.rebootRNGMu.Lock()
	downFor := between(w.rebootRNG, 3*time.Second, 15*time.Second)
	w.rebootRNGMu.Unlock()
	time.Sleep(300 * time.Millisecond) // the command returned; systemd takes the machine down
	a.down.Store(true)
	a.machineDown.Store(true)
	a.proc.Kill()
	ctx := context.Background()
	w.retry("power off "+a.node, func() error { return testenv.PowerOff(ctx, w.c.Client, a.node) })
	w.lh.nodeDown(a.node)
	w.add(Event{Kind: KindReboot, Node: a.node, What: "down", RequestID: request, Detail: "for " + downFor.Round(time.Millisecond).String()})
	time.Sleep(downFor)
	_ = os.Remove(a.sentinel) // /run does not survive a reboot
	a.withdrawn.Store(false)
	a.boots++
	_ = os.WriteFile(a.bootFile, []byte(fmt.Sprintf("boot-%d\n", a.boots)), 0o644)
	w.retry("power on "+a.node, func() error { return testenv.PowerOn(ctx, w.c.Client, a.node) })
	w.add(Event{Kind: KindReboot, Node: a.node, What: "up", RequestID: request, Detail: fmt.Sprintf("boot-%d", a.boots)})
	a.machineDown.Store(false)
	w.lh.nodeUp(a.node)
	a.start()
}

// retry does what the harness must get done through the API (a machine's power, an operator's
// cordon undone) however long a kube-apiserver restart keeps it from it, up to two minutes.
func (w *world) retry(what string, do func() error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := do()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			w.logf("%s: %v", what, err)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// --- recorders ---

// streamRecorder records every message a bucket's stream stores, with the server's timestamp:
// an ordered consumer (re-created after a server's death, from where it was) delivers them, and
// any revision it skips (seen once after a stream leader's pause) is read back by sequence. A
// revision gone meanwhile (the bucket keeps 20 values per key) is recorded as lost.
type streamRecorder struct {
	w        *world
	stream   jetstream.Stream
	bucket   string
	kind     Kind
	mu       sync.Mutex
	next     uint64 // the first revision not recorded yet, or skipped
	seen     map[uint64]bool
	readBack int // revisions the consumer skipped, read back by sequence
}

func (w *world) recordStream(ctx context.Context, js jetstream.JetStream, bucket string, kind Kind) *streamRecorder {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	must(w.t, err)
	r := &streamRecorder{w: w, stream: stream, bucket: bucket, kind: kind, next: 1, seen: map[uint64]bool{}}
	cons, err := js.OrderedConsumer(ctx, "KV_"+bucket, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	must(w.t, err)
	var errs atomic.Int64
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.fill(ctx, md.Sequence.Stream-1)
		r.record(md.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data(), md.Timestamp)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errs.Add(1) <= 20 {
			w.logf("recorder of %s: %v", bucket, err)
		}
	}))
	must(w.t, err)
	go func() { <-ctx.Done(); cc.Stop() }()
	return r
}

// finish reads back every revision stored and not delivered yet.
func (r *streamRecorder) finish(ctx context.Context) {
	info, err := r.stream.Info(ctx)
	if err != nil {
		r.w.logf("recorder of %s: %v", r.bucket, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fill(ctx, info.State.LastSeq)
	if r.readBack > 0 {
		r.w.logf("recorder of %s: %d revisions its consumer skipped were read back by sequence", r.bucket, r.readBack)
	}
}

// fill reads back the revisions from r.next to last not recorded yet (r.mu held).
func (r *streamRecorder) fill(ctx context.Context, last uint64) {
	for seq := r.next; seq <= last; seq++ {
		if r.seen[seq] {
			continue
		}
		var msg *jetstream.RawStreamMsg
		var err error
		for range 5 {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			msg, err = r.stream.GetMsg(gctx, seq)
			cancel()
			if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
		}
		if err != nil {
			r.seen[seq] = true
			r.w.add(Event{Kind: KindPhase, What: "lost", Detail: fmt.Sprintf("%s revision %d: %v", r.bucket, seq, err)})
			continue
		}
		r.readBack++
		r.record(msg.Sequence, msg.Subject, msg.Header, msg.Data, msg.Time)
	}
}

// record adds one stored message to the history (r.mu held).
func (r *streamRecorder) record(seq uint64, subject string, hdr nats.Header, data []byte, at time.Time) {
	if r.seen[seq] {
		return
	}
	r.seen[seq] = true
	r.next = max(r.next, seq+1)
	e := Event{At: at, Kind: r.kind, Node: strings.TrimPrefix(subject, "$KV."+r.bucket+"."), Rev: seq}
	switch {
	case hdr.Get("KV-Operation") != "":
		e.Deleted = true
	case r.kind == KindStatus && e.Node == nodedrain.TermKey:
		e.Kind, e.Node = KindTerm, ""
		if term, err := (nodedrain.TermCodec{}).Decode(data); err == nil {
			e.Holder = term.Coordinator
		} else {
			e.Detail = "undecodable: " + err.Error()
		}
	case r.kind == KindStatus:
		st, err := nodedrain.DecodeStatus(data)
		if err != nil {
			e.Detail = "undecodable: " + err.Error()
		} else {
			e.Status = &st
			e.RequestID = st.RequestID
		}
		e.Marked = hdr.Get(nodedrain.StatusWriterMark) != ""
	default:
		req, err := nodedrain.DecodeRequest(data)
		if err != nil {
			e.Detail = "undecodable: " + err.Error()
		} else {
			e.RequestID, e.Detail = req.RequestID, req.Context
		}
	}
	r.w.add(e)
}

// clusterView is what the harness last recorded of the Nodes and pods: informers and a poller
// both feed it, and only a change is recorded. The poller is there for the time after a
// kube-apiserver restart, when informers take their backoff to watch again (seed 9: 50 s blind,
// a drain's cordon, evictions and COMPLETE unseen, reported as S1 and S2 violations).
type clusterView struct {
	mu    sync.Mutex
	nodes map[string]nodeView
	pods  map[string]podView   // by UID
	since map[string]time.Time // when each pod (by UID) or Node (by name) was first recorded
}

type nodeView struct{ unsched, annotated, ready, deleted bool }

type podView struct {
	node, name           string
	evictable            bool
	terminating, deleted bool
}

func (w *world) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	v := nodeView{unsched: n.Spec.Unschedulable}
	_, v.annotated = n.Annotations[coordinator.CordonAnnotation]
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			v.ready = c.Status == corev1.ConditionTrue
		}
	}
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.nodes[n.Name]; !seen || old != v {
		if !seen || old.deleted {
			w.view.since[n.Name] = time.Now()
		}
		w.view.nodes[n.Name] = v
		w.add(Event{Kind: KindNode, Node: n.Name, Unschedulable: v.unsched, Annotated: v.annotated, Ready: v.ready})
	}
}

func (w *world) nodeGone(name string) {
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.nodes[name]; seen && !old.deleted {
		w.view.nodes[name] = nodeView{deleted: true}
		w.add(Event{Kind: KindNode, Node: name, Deleted: true})
	}
}

func (w *world) onPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	v := podView{node: p.Spec.NodeName, name: p.Namespace + "/" + p.Name, evictable: evictable(p), terminating: p.DeletionTimestamp != nil}
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.pods[string(p.UID)]; (!seen || old != v) && !old.deleted {
		if !seen {
			w.view.since[string(p.UID)] = time.Now()
		}
		w.view.pods[string(p.UID)] = v
		w.add(Event{Kind: KindPod, Node: v.node, Pod: v.name, UID: string(p.UID), Evictable: v.evictable, Terminating: v.terminating})
	}
}

func (w *world) podGone(uid string) {
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	if old, seen := w.view.pods[uid]; seen && !old.deleted {
		old.deleted = true
		w.view.pods[uid] = old
		w.add(Event{Kind: KindPod, Node: old.node, Pod: old.name, UID: uid, Evictable: old.evictable, Deleted: true})
	}
}

// watchCluster records Node, pod and Lease changes as informers see them, and as a poller
// listing them four times a second sees them.
func (w *world) watchCluster(ctx context.Context) {
	w.view = &clusterView{nodes: map[string]nodeView{}, pods: map[string]podView{}, since: map[string]time.Time{}}
	selector := testenv.GroupLabel + "=" + group
	nodes := informers.NewSharedInformerFactoryWithOptions(w.c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	_, err := nodes.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.onNode, UpdateFunc: func(_, obj any) { w.onNode(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				w.nodeGone(n.Name)
			}
		},
	})
	must(w.t, err)
	inNS := informers.NewSharedInformerFactoryWithOptions(w.c.Client, 0, informers.WithNamespace(w.ns))
	_, err = inNS.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.onPod, UpdateFunc: func(_, obj any) { w.onPod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.podGone(string(p.UID))
			}
		},
	})
	must(w.t, err)
	var mu sync.Mutex
	holder := ""
	_, err = inNS.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onLease(obj, &holder, &mu) },
		UpdateFunc: func(_, obj any) { w.onLease(obj, &holder, &mu) },
	})
	must(w.t, err)
	nodes.Start(ctx.Done())
	inNS.Start(ctx.Done())
	nodes.WaitForCacheSync(ctx.Done())
	inNS.WaitForCacheSync(ctx.Done())
	go w.pollCluster(ctx, selector)
}

// pollCluster lists the Nodes and pods four times a second and records what changed since the
// harness last saw them.
func (w *world) pollCluster(ctx context.Context, selector string) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		listed := time.Now() // a pod first seen after this may be missing from the list: not gone
		nodes, err := w.c.Client.CoreV1().Nodes().List(lctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			present := map[string]bool{}
			for i := range nodes.Items {
				present[nodes.Items[i].Name] = true
				w.onNode(&nodes.Items[i])
			}
			for _, name := range w.nodes {
				w.view.mu.Lock()
				before := w.view.since[name].Before(listed)
				w.view.mu.Unlock()
				if !present[name] && before {
					w.nodeGone(name)
				}
			}
		}
		pods, err := w.c.Client.CoreV1().Pods(w.ns).List(lctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			continue
		}
		present := map[string]bool{}
		for i := range pods.Items {
			present[string(pods.Items[i].UID)] = true
			w.onPod(&pods.Items[i])
		}
		w.view.mu.Lock()
		var gone []string
		for uid, v := range w.view.pods {
			if !present[uid] && !v.deleted && w.view.since[uid].Before(listed) {
				gone = append(gone, uid)
			}
		}
		w.view.mu.Unlock()
		for _, uid := range gone {
			w.podGone(uid)
		}
	}
}

// onLease records the coordinators' Lease changing hands.
func (w *world) onLease(obj any, holder *string, mu *sync.Mutex) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != "edgedrain-coordinator" {
		return
	}
	h := ""
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	mu.Lock()
	changed := h != *holder
	*holder = h
	mu.Unlock()
	if changed {
		w.add(Event{Kind: KindLease, Holder: h})
	}
}

// evictable: kubectl drain would evict it (not a DaemonSet's pod, not a mirror pod).
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}
