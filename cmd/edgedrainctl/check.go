package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/policy"
	"github.com/edgedrain/edgedrain/pkg/preflight"
	"github.com/edgedrain/edgedrain/pkg/vms"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// Exit codes of edgedrainctl check.
const (
	checkClear   = 0
	checkBlocked = 1
	checkFailed  = 2
)

const checkIntro = `Usage: edgedrainctl check NODE [-o text|json] [--kubeconfig FILE] [--context NAME]
                          [--evict-unmanaged-pods=BOOL] [--volume-policy P] [--longhorn-namespace NS]
                          [--non-migratable-vms block|restart] [--decommission]

Predicts what would block a drain of NODE if it started now, before anything is cordoned, and
changes nothing: pods whose PodDisruptionBudget allows no disruption now, pods no controller
manages (with --evict-unmanaged-pods=false), volumes whose data is not safe on other nodes
(Longhorn replicas, by the volume gate's own rules; node-local volumes whose drainer template
would not run), KubeVirt VMs that cannot live-migrate, and the maintenance policy's blockers. Notes say what would happen without
blocking, such as the drainer Jobs that would run. It reads the Kubernetes API, not the bus:
the kubeconfig is found as kubectl finds it (--kubeconfig, $KUBECONFIG, ~/.kube/config). Set
the flags below as the coordinator's are set. The global --timeout (default 10s) bounds the
whole prediction.

Exit status: 0 nothing would block, 1 something would block, 2 the prediction failed (bad
arguments, no such node, API unreachable).`

// checkOptions are check's flags.
type checkOptions struct {
	format         string
	kube           *genericclioptions.ConfigFlags
	evictUnmanaged bool
	volumes        volumes.Config
	policy         string
	nonMigratable  string
	decommission   bool
}

func (o *checkOptions) register(fs *pflag.FlagSet) {
	o.volumes = volumes.DefaultConfig()
	o.evictUnmanaged = coordinator.DefaultConfig().EvictUnmanagedPods
	fs.StringVarP(&o.format, "output", "o", "text", "output: text or json")
	fs.BoolVar(&o.evictUnmanaged, "evict-unmanaged-pods", o.evictUnmanaged, "as the coordinator's flag: false makes every pod no controller manages a blocker")
	fs.Var(cli.GoValue(&o.volumes.Policy, "policy"), "volume-policy", "as the coordinator's flag: wait, evict or allow")
	fs.StringVar(&o.volumes.LonghornNamespace, "longhorn-namespace", o.volumes.LonghornNamespace, "namespace of Longhorn's objects")
	fs.StringVar(&o.nonMigratable, "non-migratable-vms", "block", "as the coordinator's flag: block or restart")
	fs.BoolVar(&o.decommission, "decommission", false, "predict a decommission (agent request decommission): replicas evicted whatever --volume-policy says, "+
		"node-local PVCs judged by their edgedrain.io/decommission annotation (none: blocks, the data would be lost)")
	fs.StringVar(&o.policy, "policy-configmap", policy.DefaultNamespace+"/"+policy.DefaultName,
		"as the coordinator's flag: namespace/name of the maintenance policy ConfigMap, whose blockers (pods matching its selector, Prometheus alerts and queries) are predicted too; empty: none")
}

func newCheckCmd(g *global) *cobra.Command {
	o := &checkOptions{kube: g.kube}
	cmd := &cobra.Command{
		Use:               "check NODE",
		Short:             "Predict what would block a drain of a node if it started now",
		Long:              checkIntro,
		Args:              exactlyOneNode(checkFailed),
		ValidArgsFunction: completeNodes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.bounded(cmd.Context())
			defer cancel()
			return o.check(ctx, args[0], cmd.OutOrStdout())
		},
	}
	o.register(cmd.Flags())
	mustComplete(cmd, "output", "text", "json")
	mustComplete(cmd, "volume-policy", "wait", "evict", "allow")
	mustComplete(cmd, "non-migratable-vms", "block", "restart")
	return cmd
}

// check runs edgedrainctl check; its error carries the exit status.
func (o *checkOptions) check(ctx context.Context, node string, stdout io.Writer) error {
	if err := o.validate(node); err != nil {
		return cli.Exit(checkFailed, err)
	}
	p, err := o.predict(ctx, node)
	if err == nil {
		err = writePrediction(stdout, p, o.format)
	}
	switch {
	case err != nil:
		return cli.Exit(checkFailed, err)
	case !p.Clear:
		return cli.Exit(checkBlocked, nil)
	}
	return nil
}

func (o *checkOptions) validate(node string) error {
	if err := nodedrain.ValidNodeName(node); err != nil {
		return fmt.Errorf("node %q: %w", node, err)
	}
	if o.format != "text" && o.format != "json" {
		return fmt.Errorf("-o %q: want text or json", o.format)
	}
	if ns, name, ok := strings.Cut(o.policy, "/"); o.policy != "" && (!ok || ns == "" || name == "") {
		return fmt.Errorf("--policy-configmap %q: want namespace/name", o.policy)
	}
	return o.volumes.ValidateSettings()
}

// predict connects to the cluster, starts a volume gate that only reads (no recorder: it
// records nothing; Predict asks nothing of Longhorn and starts no Job) and predicts.
func (o *checkOptions) predict(ctx context.Context, node string) (preflight.Prediction, error) {
	rc, err := restConfig(o.kube, "edgedrainctl-check")
	if err != nil {
		return preflight.Prediction{}, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return preflight.Prediction{}, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return preflight.Prediction{}, fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the gate's informers
	cfg := o.volumes
	cfg.Client, cfg.Dynamic = client, dyn
	if deadline, ok := ctx.Deadline(); ok {
		cfg.SyncTimeout = max(time.Until(deadline), time.Millisecond)
	}
	gate, err := volumes.New(cfg)
	if err != nil {
		return preflight.Prediction{}, err
	}
	if err := gate.Start(ctx); err != nil {
		return preflight.Prediction{}, fmt.Errorf("read the cluster's volumes: %w", err)
	}
	mode, err := vms.ParseNonMigratable(o.nonMigratable)
	if err != nil {
		return preflight.Prediction{}, fmt.Errorf("--non-migratable-vms: %w", err)
	}
	pc := preflight.Config{Client: client, Volumes: gate, VMs: vms.New(dyn, mode, nil), EvictUnmanagedPods: o.evictUnmanaged,
		Decommission: o.decommission}
	if o.policy != "" {
		ns, name, _ := strings.Cut(o.policy, "/")
		pc.Extra = func(ctx context.Context, node string) ([]nodedrain.Blocker, error) {
			return readPolicyBlockers(ctx, client, ns, name, node)
		}
	}
	return preflight.Predict(ctx, pc, node)
}

// writePrediction prints p as JSON or as a short text for people: a verdict line, the blockers
// as a table, then the notes.
func writePrediction(w io.Writer, p preflight.Prediction, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	if p.Clear {
		fmt.Fprintf(w, "%s: clear, nothing would block a drain now\n", p.Node)
	} else {
		fmt.Fprintf(w, "%s: %d blocker(s) would hold a drain back now\n\n", p.Node, len(p.Blockers))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tPROGRESS\tREASON")
		for _, b := range p.Blockers {
			ns, progress := b.Namespace, "-"
			if ns == "" {
				ns = "-"
			}
			if b.Progress > 0 {
				progress = fmt.Sprintf("%d%%", b.Progress)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Kind, ns, b.Name, progress, strings.ReplaceAll(b.Reason, "\n", " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	return nil
}

// readPolicyBlockers reads the maintenance policy and asks its blockers about node.
func readPolicyBlockers(ctx context.Context, client kubernetes.Interface, ns, name, node string) ([]nodedrain.Blocker, error) {
	c, err := policy.Read(ctx, client, ns, name)
	if err != nil {
		return nil, fmt.Errorf("%w (--policy-configmap=\"\" leaves the policy out)", err)
	}
	var prom *policy.PromChecker
	if c.Blockers.Prometheus != nil {
		if prom, err = policy.NewPromChecker(*c.Blockers.Prometheus); err != nil {
			return nil, err
		}
	}
	return policy.NodeBlockers(ctx, client, c, prom, node, false)
}
