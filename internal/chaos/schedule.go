package chaos

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// Action is one step of a run's schedule: a fault, or a sentinel of the workload, at an offset
// from the start. The schedule is drawn from the seed alone, before the run: it is the same for
// the same seed even though the processes are not. An action whose target is busy when its time
// comes (a process already down, a machine rebooting) is skipped, and the history says so.
type Action struct {
	At     time.Duration
	Kind   string
	Target int           // an index into the coordinators, the NATS servers or the nodes
	For    time.Duration // how long the fault lasts (0: a one-off)
	Dir    bool          // LinkStall: true stalls what the client sends, false what it is sent
}

func (a Action) String() string {
	return fmt.Sprintf("+%s %s #%d for %s", a.At.Round(time.Millisecond), a.Kind, a.Target, a.For.Round(time.Millisecond))
}

// The kinds of actions.
const (
	CoordKill   = "coord-kill"   // SIGKILL a coordinator, start it again after For
	CoordPause  = "coord-pause"  // SIGSTOP a coordinator, SIGCONT after For
	AgentKill   = "agent-kill"   // SIGKILL an agent, start it again after For (same boot)
	AgentPause  = "agent-pause"  // SIGSTOP an agent, SIGCONT after For
	NATSKill    = "nats-kill"    // SIGKILL a NATS server, start it again after For
	NATSPause   = "nats-pause"   // SIGSTOP a NATS server, SIGCONT after For
	OpCordon    = "op-cordon"    // an operator's kubectl cordon, kubectl uncordon after For
	OpUncordon  = "op-uncordon"  // an operator's kubectl uncordon of a cordoned node (mid-drain)
	APICut      = "api-cut"      // the TCP proxy between a coordinator and the API cuts every connection, for For
	PDBBlock    = "pdb-block"    // a workload's budget lets no pod go, for For (0: the Deployment's, 1: the StatefulSet's)
	NodeDelete  = "node-delete"  // an operator's kubectl delete node; the kubelet registers it again after For
	OpWithdraw  = "op-withdraw"  // an operator's edgedrainctl withdraw of a node's request (if it has one)
	LinkStall   = "link-stall"   // one client's link to one NATS server carries no bytes one way (Dir), for For, then goes on with nothing lost (Target: client*servers + server; clients: the coordinators, then the agents)
	LinkCut     = "link-cut"     // one client's link to one NATS server is cut (connection closed, port refused), for For
	APIRestart  = "api-restart"  // kube-apiserver killed (SIGKILL), started again after For
	ReplicaFail = "replica-fail" // a Longhorn replica fails, and rebuilds after For (Target: volume*2 + replica)
	Sentinel    = "sentinel"     // the workload: a reboot-required sentinel appears on a node
	AskUpdate   = "ask-update"   // the workload: `agent request update` on a node
)

// FaultKinds are the fault kinds a schedule draws from.
var FaultKinds = []string{CoordKill, CoordPause, AgentKill, AgentPause, NATSKill, NATSPause, OpCordon, OpUncordon, APICut, PDBBlock, NodeDelete, OpWithdraw, ReplicaFail, APIRestart, LinkStall, LinkCut}

// Shape is what a schedule is drawn for.
type Shape struct {
	Duration               time.Duration // faults and sentinels are drawn in [0, Duration)
	Nodes, Coords, Servers int
	FaultEvery             time.Duration // mean time between faults
	SentinelEvery          time.Duration // mean time between operations asked for (over all nodes): 3 in 4 sentinels, 1 in 4 updates
}

// Schedule draws the run's actions from seed: faults (one stream of the seed) and sentinels
// (another), merged in time order.
func Schedule(seed uint64, s Shape) []Action {
	var out []Action
	fr := rand.New(rand.NewPCG(seed, 1))
	for at := exp(fr, s.FaultEvery); at < s.Duration; at += exp(fr, s.FaultEvery) {
		a := Action{At: at, Kind: FaultKinds[fr.IntN(len(FaultKinds))]}
		switch a.Kind {
		case CoordKill:
			a.Target, a.For = fr.IntN(s.Coords), between(fr, time.Second, 8*time.Second)
		case CoordPause:
			// Past the Lease's 10 s at times: a leader that wakes up deposed.
			a.Target, a.For = fr.IntN(s.Coords), between(fr, time.Second, 15*time.Second)
		case AgentKill:
			a.Target, a.For = fr.IntN(s.Nodes), between(fr, 500*time.Millisecond, 8*time.Second)
		case AgentPause:
			a.Target, a.For = fr.IntN(s.Nodes), between(fr, 500*time.Millisecond, 15*time.Second)
		case NATSKill:
			a.Target, a.For = fr.IntN(s.Servers), between(fr, time.Second, 10*time.Second)
		case NATSPause:
			a.Target, a.For = fr.IntN(s.Servers), between(fr, time.Second, 10*time.Second)
		case OpCordon:
			a.Target, a.For = fr.IntN(s.Nodes), between(fr, 2*time.Second, 30*time.Second)
		case OpUncordon:
			a.Target = fr.IntN(s.Nodes)
		case APICut:
			// Past the Lease's renew deadline at times: the leader steps down.
			a.Target, a.For = fr.IntN(s.Coords), between(fr, time.Second, 20*time.Second)
		case NodeDelete:
			// Past the coordinator's NodeGoneAfter (1 min) at times: the drain under way ends.
			a.Target, a.For = fr.IntN(s.Nodes), between(fr, 2*time.Second, 75*time.Second)
		case OpWithdraw:
			a.Target = fr.IntN(s.Nodes)
		case LinkStall:
			// Past the clients' two missed pings (40 s) at times: they give the link up.
			a.Target, a.For, a.Dir = fr.IntN((s.Coords+s.Nodes)*s.Servers), between(fr, 2*time.Second, 50*time.Second), fr.IntN(2) == 0
		case LinkCut:
			a.Target, a.For = fr.IntN((s.Coords+s.Nodes)*s.Servers), between(fr, time.Second, 20*time.Second)
		case APIRestart:
			a.For = between(fr, 500*time.Millisecond, 8*time.Second)
		case ReplicaFail:
			a.Target, a.For = fr.IntN(2*s.Nodes), between(fr, time.Second, 30*time.Second)
		case PDBBlock:
			// Past the eviction attempt's 30 s at times: the drain retries, or fails and is asked again.
			a.Target, a.For = fr.IntN(2), between(fr, 2*time.Second, 45*time.Second)
		}
		out = append(out, a)
	}
	sr := rand.New(rand.NewPCG(seed, 2))
	for at := exp(sr, s.SentinelEvery); at < s.Duration; at += exp(sr, s.SentinelEvery) {
		kind := Sentinel
		if sr.IntN(4) == 0 {
			kind = AskUpdate
		}
		out = append(out, Action{At: at, Kind: kind, Target: sr.IntN(s.Nodes)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// exp draws an exponentially distributed wait of the given mean.
func exp(r *rand.Rand, mean time.Duration) time.Duration {
	return time.Duration(r.ExpFloat64() * float64(mean))
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}
