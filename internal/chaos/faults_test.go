package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// The faults and asks of a schedule, as the harness carries them out. Each records its start
// and end (or why it was skipped, or that it failed) in the history as KindFault events; an
// operation asked of an agent is a KindAsk event whose Op names the operation.

// act carries out one action of the schedule.
func (w *world) act(a Action) {
	defer w.done()
	switch a.Kind {
	case CoordKill, CoordPause:
		c := w.coords[a.Target]
		if !c.mu.TryLock() {
			w.fault(a.Kind, c.name(), "skipped: busy")
			return
		}
		defer c.mu.Unlock()
		w.processFault(a, c.name(), c, nil)
	case AgentKill, AgentPause:
		ag := w.agents[a.Target]
		if why := ag.tryHold(); why != "" {
			w.fault(a.Kind, ag.name(), "skipped: "+why)
			return
		}
		defer ag.mu.Unlock()
		w.processFault(a, ag.name(), ag, nil)
	case NATSKill, NATSPause:
		name := w.nats.Servers[a.Target].Name
		if !w.natsBusy.TryLock() {
			w.fault(a.Kind, name, "skipped: another server is faulted")
			return
		}
		defer w.natsBusy.Unlock()
		// The fault ends, and the next server faulted waits, once this one has caught up: one
		// down at a time keeps the quorum (a quorum loss is a fault kind of its own, not drawn yet).
		w.processFault(a, name, natsServer{w: w, i: a.Target}, func() {
			deadline := time.Now().Add(2 * time.Minute)
			for w.nats.Healthy(a.Target) != nil && time.Now().Before(deadline) {
				if !w.sleep(200 * time.Millisecond) {
					return
				}
			}
		})
	case OpCordon:
		node := w.nodes[a.Target]
		w.fault(a.Kind, node, "start")
		if err := w.kubectl("cordon", node); err != nil {
			w.fault(a.Kind, node, "failed: "+err.Error())
			return
		}
		time.Sleep(a.For)
		// Recorded before kubectl runs: from here on the cordon may go by the operator's hand
		// (kubectl retries through an API restart), and the checker must know.
		w.fault(a.Kind, node, "uncordon")
		if err := w.kubectl("uncordon", node); err != nil {
			w.fault(a.Kind, node, "failed: "+err.Error())
			return
		}
		w.fault(a.Kind, node, "end")
	case OpUncordon:
		w.uncordonOne(a)
	case APICut:
		c := w.coords[a.Target]
		w.fault(a.Kind, c.name(), "start")
		c.api.Cut()
		time.Sleep(a.For)
		if err := c.api.Restore(); err != nil {
			w.errorf("restore the API proxy of %s: %v", c.name(), err) // the coordinator would stay cut off
		}
		w.fault(a.Kind, c.name(), "end")
	case PDBBlock:
		app := []string{"web", "db"}[a.Target]
		w.fault(a.Kind, "pdb/"+app, "start")
		w.patchPDB(app, 0)
		time.Sleep(a.For)
		w.patchPDB(app, 1)
		w.fault(a.Kind, "pdb/"+app, "end")
	case NodeDelete:
		w.deleteNode(a)
	case OpWithdraw:
		w.withdraw(a)
	case LinkStall, LinkCut:
		w.linkFault(a)
	case APIRestart:
		if !w.apiBusy.TryLock() {
			w.fault(a.Kind, "kube-apiserver", "skipped: busy")
			return
		}
		defer w.apiBusy.Unlock()
		w.fault(a.Kind, "kube-apiserver", "start")
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
		defer cancel()
		if err := w.c.RestartAPIServer(ctx, a.For); err != nil {
			w.errorf("restart kube-apiserver: %v", err) // the harness's own failure: the run cannot go on fairly
		}
		// The scheduler with it: its cache can go wrong across an API restart and leave pods
		// Pending for good, and with them every budget at 0 and every drain failing.
		if err := w.c.RestartScheduler(); err != nil {
			w.errorf("restart kube-scheduler: %v", err)
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
		w.askUpdate(a)
	case Sentinel:
		w.placeSentinel(a)
	}
}

// processFault is a kill or pause fault of a coordinator, an agent or a NATS server (its lock
// held): SIGKILL, the fault's length, started again; or SIGSTOP, the fault's length, SIGCONT;
// then back (if any) waits for the process to be back before the fault's end is recorded.
// A process the harness cannot start again fails the run: it could not go on fairly.
func (w *world) processFault(a Action, name string, p faultable, back func()) {
	w.fault(a.Kind, name, "start")
	switch a.Kind {
	case CoordKill, AgentKill, NATSKill:
		p.kill()
		time.Sleep(a.For)
		if err := p.restart(); err != nil {
			w.errorf("start %s again: %v", name, err)
			w.fault(a.Kind, name, "failed: "+err.Error())
			return
		}
	default:
		p.signal(syscall.SIGSTOP)
		time.Sleep(a.For)
		p.signal(syscall.SIGCONT)
	}
	if back != nil {
		back()
	}
	w.fault(a.Kind, name, "end")
}

// uncordonOne uncordons the first cordoned node from the target on: an uncordon behind
// edgedrain's back, most often mid-drain.
func (w *world) uncordonOne(a Action) {
	for i := range w.nodes {
		node := w.nodes[(a.Target+i)%len(w.nodes)]
		n, err := w.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && n.Spec.Unschedulable {
			w.fault(a.Kind, node, "start")
			if err := w.kubectl("uncordon", node); err != nil {
				w.fault(a.Kind, node, "failed: "+err.Error())
			}
			return
		}
	}
	w.fault(a.Kind, "", "skipped: no node cordoned")
}

// deleteNode is an operator's kubectl delete node; the kubelet registers the node again after
// the fault's length: a new Node object, its labels, not cordoned.
func (w *world) deleteNode(a Action) {
	ag := w.agents[a.Target]
	if why := ag.tryHold(); why != "" {
		w.fault(a.Kind, ag.node, "skipped: "+why)
		return
	}
	defer ag.mu.Unlock()
	w.fault(a.Kind, ag.node, "start")
	if err := w.kubectl("delete", "node", ag.node, "--wait=false"); err != nil {
		w.fault(a.Kind, ag.node, "failed: "+err.Error())
		return
	}
	w.lh.nodeGone(ag.node)
	time.Sleep(a.For)
	ctx := w.ctx
	for range 150 {
		if _, err := w.c.Client.CoreV1().Nodes().Get(ctx, ag.node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	err := w.retry("register "+ag.node+" again", func() error {
		err := w.c.CreateNode(ctx, ag.node, map[string]string{testenv.GroupLabel: group})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		w.fault(a.Kind, ag.node, "failed: register it again: "+err.Error())
		return
	}
	w.lh.nodeBack(ag.node)
	w.fault(a.Kind, ag.node, "end")
}

// withdraw is an operator's edgedrainctl withdraw of the target node's request, if it has one.
// The history has it ("start", with the request seen before, and the agent's sentinel counted
// as withdrawn) only once edgedrainctl said it withdrew it, at that time; a failure is recorded
// as one ("failed: ...") and withdraws nothing.
func (w *world) withdraw(a Action) {
	node := w.nodes[a.Target]
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	req, _, err := w.bus.Requests.Get(ctx, node)
	cancel()
	switch {
	case errors.Is(err, pubsub.ErrNotFound):
		w.fault(a.Kind, node, "skipped: no request")
		return
	case err != nil:
		w.fault(a.Kind, node, "skipped: "+err.Error())
		return
	}
	// Its sentinel counts as withdrawn only if it was there before: one placed while the
	// command ran asks for a reboot the withdrawal did not cancel.
	_, statErr := os.Stat(w.agents[a.Target].sentinel)
	ctx, cancel = context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bins.ctl, "--nats-url", strings.Join(w.urls, ","), "--nats-user", busauth.OperatorUser,
		"--nats-password-file", w.operatorFile, "withdraw", node).CombinedOutput()
	if err != nil {
		w.add(Event{Kind: KindFault, What: a.Kind, Target: node, RequestID: req.RequestID,
			Detail: fmt.Sprintf("failed: %v: %s", err, strings.TrimSpace(string(out)))})
		return
	}
	if statErr == nil {
		w.agents[a.Target].withdrawn.Store(true)
	}
	w.add(Event{Kind: KindFault, What: a.Kind, Target: node, RequestID: req.RequestID, Detail: "start"})
}

// linkFault cuts or stalls one client's link to one NATS server for the fault's length.
func (w *world) linkFault(a Action) {
	servers := len(w.nats.Servers)
	l := w.links[a.Target/servers]
	p := l.proxies[a.Target%servers]
	target := l.name + "→" + w.nats.Servers[a.Target%servers].Name
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
			w.errorf("restore the link %s: %v", target, err) // the client would stay cut off from it
		}
	}
	w.fault(a.Kind, target, "end")
}

// askUpdate is `agent request update` on the target node, when its agent is idle with no
// reboot asked for. The ask is recorded with Op "update", at the time it was made, once the
// agent took it; otherwise as skipped, with why.
func (w *world) askUpdate(a Action) {
	ag := w.agents[a.Target]
	op := string(agent.OpUpdate)
	skip := func(why string) { w.add(Event{Kind: KindAsk, Node: ag.node, Op: op, Detail: "skipped: " + why}) }
	if why := ag.tryHold(); why != "" {
		skip(why)
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
	if err := ag.ask(agent.OpUpdate); err != nil {
		skip(err.Error())
		return
	}
	w.add(Event{At: at, Kind: KindAsk, Node: ag.node, Op: op})
}

// placeSentinel is the workload asking for a reboot: the reboot-required sentinel appears on
// the target node. The ask is recorded with Op "reboot" once the file is there.
func (w *world) placeSentinel(a Action) {
	ag := w.agents[a.Target]
	op := string(agent.OpReboot)
	if ag.down.Load() {
		w.add(Event{Kind: KindAsk, Node: ag.node, Op: op, Detail: "skipped: machine down"})
		return
	}
	if _, err := os.Stat(ag.sentinel); err == nil {
		w.add(Event{Kind: KindAsk, Node: ag.node, Op: op, Detail: "skipped: one is there"})
		return
	}
	ag.withdrawn.Store(false)
	at := time.Now()
	if err := os.WriteFile(ag.sentinel, []byte("*** System restart required ***\n"), 0o644); err != nil {
		w.add(Event{Kind: KindAsk, Node: ag.node, Op: op, Detail: "skipped: " + err.Error()})
		return
	}
	w.add(Event{At: at, Kind: KindAsk, Node: ag.node, Op: op})
}

// patchPDB sets app's budget to let maxUnavailable pods go.
func (w *world) patchPDB(app string, maxUnavailable int) {
	_ = w.retry("patch the budget of "+app, func() error {
		_, err := w.c.Client.PolicyV1().PodDisruptionBudgets(w.ns).Patch(w.ctx, app, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"maxUnavailable":%d}}`, maxUnavailable)), metav1.PatchOptions{})
		return err
	})
}

// kubectl runs the real kubectl as an operator would, and tries again (retry: a growing wait,
// two minutes at most) when the API does not answer or answers that it cannot now — a 500, a
// 503, a timeout right after a kube-apiserver restart; an operator's uncordon that never
// happened would be blamed on edgedrain. Only NotFound (the Node deleted meanwhile) is an
// answer: there is nothing to do, and kubectl returns nil. The error is the last failure when
// it gave up.
func (w *world) kubectl(args ...string) error {
	what := "kubectl " + strings.Join(args, " ")
	return w.retry(what, func() error {
		ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(w.c.BinDir, "kubectl"),
			append([]string{"--kubeconfig", w.c.Kubeconfig, "--request-timeout", "20s"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		if strings.Contains(string(out), "(NotFound)") {
			w.logf("%s: %s", what, strings.TrimSpace(string(out)))
			return nil
		}
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	})
}
