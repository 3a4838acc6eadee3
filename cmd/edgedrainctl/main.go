// Command edgedrainctl is the operator's view of edgedrain: it reads the bus and prints every
// node's drain status, can withdraw a node's request by hand, and predicts what would block a
// node's drain before it starts.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// usageName is how the usage names the command: "kubectl edgedrain" when run as a kubectl plugin.
var usageName = "edgedrainctl"

const intro = `Usage: edgedrainctl [flags] status [-o table|json] [--watch] [--js-domain SITE,...]
       edgedrainctl [flags] withdraw NODE
       edgedrainctl [flags] check NODE [-o text|json] [--kubeconfig FILE] (see check --help)
       edgedrainctl [flags] keep-cordoned NODE [--reason TEXT] [--clear] (see keep-cordoned --help)
       edgedrainctl [flags] keys generate|init ... (see keys --help)
       edgedrainctl completion bash|zsh|fish|powershell

status    print every node's drain status: status, requester, attempt, age, message, and what
          blocks the drain (pods that refuse eviction, volumes not yet safe), read from the bus
          (buckets nodedrain-status and nodedrain-requests). -o json prints the same as JSON.
          --watch: draw the table again, in place, whenever a status or request changes, until
          interrupted (-o json: one array per change).
          --js-domain: through a hub NATS server with a leaf node per site, the sites' buckets
          (each site's JetStream domain), one SITE column; a site that does not answer is named
          on stderr and the exit status is 1, the others are still shown.
withdraw  delete NODE's drain request, as its agent does when the node is back: the coordinator
          cancels a drain under way, uncordons the node if it cordoned it, and returns it to
          NOTREQUESTED. For a node that will not come back to withdraw by itself.
check     predict, from the Kubernetes API and changing nothing, what would block a drain of
          NODE if it started now. Exit status 0: nothing would block, 1: something would, 2: the
          prediction failed.
keep-cordoned
          ask edgedrain to leave NODE cordoned when its drain ends, instead of uncordoning it
          (kubectl cordon cannot on a node edgedrain cordoned: it changes nothing there); the
          cordon is then yours. --clear withdraws the request. Writes the Node's annotation
          edgedrain.io/keep-cordoned through the Kubernetes API.
keys      the coordinator's status-signing key: generate writes a key pair to files, init
          creates the Secret and ConfigMap the manifests mount, as the edgedrain-keys Job does.
completion
          print the shell completion script (e.g. source <(edgedrainctl completion bash)); it
          completes commands, flags and, from the bus, node names. As a kubectl plugin,
          kubectl completes "kubectl edgedrain ..." through kubectl_complete-edgedrain.

Flags may come before or after the command; the bus flags and --timeout can also be set by the
environment variables shown, and the Kubernetes API flags are kubectl's.`

// PluginName is the name under which kubectl finds edgedrainctl as a plugin: installed on PATH
// as kubectl-edgedrain, `kubectl edgedrain status` runs it.
const PluginName = "kubectl-edgedrain"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	switch filepath.Base(os.Args[0]) {
	case PluginName:
		usageName = "kubectl edgedrain"
	case CompletionName:
		usageName = "kubectl edgedrain"
		args = completionArgs(args)
	}
	code := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, for tests: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd, err := cli.Execute(ctx, newRootCmd(usageName), args, stdout, stderr)
	if msg := cli.Message(err); msg != "" {
		// The commands with exit statuses of their own name themselves, as they always have.
		prefix := "edgedrainctl"
		for c := cmd; c != nil && c.HasParent(); c = c.Parent() {
			if !c.Parent().HasParent() && slices.Contains([]string{"check", "keep-cordoned", "keys"}, c.Name()) {
				prefix += " " + c.Name()
			}
		}
		fmt.Fprintln(stderr, prefix+":", msg)
	}
	return cli.ExitCode(err, 1)
}

// global are the flags every command has: how to reach the bus (status, withdraw) and the
// Kubernetes API (check, keep-cordoned, keys init), and how long to try.
type global struct {
	nats    cli.NATSFlags
	timeout time.Duration
	kube    *genericclioptions.ConfigFlags
}

// bounded returns ctx bounded by --timeout.
func (g *global) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.timeout)
}

// newRootCmd returns edgedrainctl's command tree, named name in its help.
func newRootCmd(name string) *cobra.Command {
	g := &global{}
	root := &cobra.Command{
		Use:   "edgedrainctl",
		Short: "The operator's view of edgedrain: every node's drain status, withdrawals, predictions, the signing key",
		Long:  named(intro, name),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Exit(1, fmt.Errorf("unknown command %q (want status, withdraw, check, keep-cordoned or keys; see --help)", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.HelpFunc()(cmd, nil)
			return cli.Exit(2, nil)
		},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.ApplyEnv(cmd.Flags()); err != nil {
				return cli.Exit(2, err)
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	if name != "edgedrainctl" {
		root.Use = PluginName
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	}
	pf := root.PersistentFlags()
	g.nats.Register(pf)
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "give up reaching the bus or the Kubernetes API after this long (status --watch: the first table)")
	cli.BindEnv(pf)
	g.kube = kubeFlags(pf)
	root.AddCommand(newStatusCmd(g), newWithdrawCmd(g), newCheckCmd(g), newKeepCmd(g), newKeysCmd(g))
	for _, c := range root.Commands() {
		c.Long = named(c.Long, name)
		for _, sub := range c.Commands() {
			sub.Long = named(sub.Long, name)
		}
	}
	registerKubeCompletions(root, g)
	cli.Setup(root, map[string]string{"o": "output", "n": "namespace"})
	return root
}

// named has text name the command as name ("kubectl edgedrain" as a kubectl plugin).
func named(text, name string) string {
	return strings.ReplaceAll(text, "edgedrainctl ", name+" ")
}

// exactlyOneNode is the Args of the commands that take one NODE: a usage error with code.
func exactlyOneNode(code int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return cli.Exit(code, fmt.Errorf("want exactly one NODE, got %d arguments (see --help)", len(args)))
		}
		return nil
	}
}

type buckets struct {
	requests *pubsub.Bucket[nodedrain.NodeDrainRequest]
	statuses *pubsub.Bucket[nodedrain.NodeDrainStatus]
	close    func()
}

func open(ctx context.Context, nats cli.NATSFlags) (*buckets, error) {
	nc, err := connect(ctx, nats)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b, err := openBuckets(ctx, js, nats.URLs)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b.close = nc.Close
	return b, nil
}

// connect connects to the bus as the operator's tools do and waits for the connection.
func connect(ctx context.Context, nats cli.NATSFlags) (*nats.Conn, error) {
	opts := nats.Options("edgedrainctl")
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	nc, err := pubsub.Connect(opts)
	if err != nil {
		return nil, err
	}
	if err := pubsub.WaitConnected(ctx, nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect to %s: %w", nats.URLs, err)
	}
	return nc, nil
}

// openBuckets opens both drain buckets through js (where names the bus, for errors); the
// caller closes the connection.
func openBuckets(ctx context.Context, js jetstream.JetStream, where string) (*buckets, error) {
	// Open, never create: a missing bucket means no coordinator has run on this bus.
	for _, name := range []string{nodedrain.RequestsBucket, nodedrain.StatusBucket} {
		if _, err := js.KeyValue(ctx, name); err != nil {
			return nil, fmt.Errorf("bucket %s on %s (has a coordinator run on this bus?): %w", name, where, err)
		}
	}
	b := &buckets{close: func() {}}
	var err error
	b.requests, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, OpenOnly: true}, nodedrain.RequestCodec{})
	if err == nil {
		b.statuses, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true}, nodedrain.StatusCodec{})
	}
	return b, err
}
