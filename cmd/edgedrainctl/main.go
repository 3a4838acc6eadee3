// Command edgedrainctl is the operator's view of edgedrain: it reads the bus and prints every
// node's drain status, can withdraw a node's request by hand, and predicts what would block a
// node's drain before it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
          creates the Secret and ConfigMap the manifests mount, as the edgedrain-keys Job does.`

// PluginName is the name under which kubectl finds edgedrainctl as a plugin: installed on PATH
// as kubectl-edgedrain, `kubectl edgedrain status` runs it.
const PluginName = "kubectl-edgedrain"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch filepath.Base(os.Args[0]) {
	case PluginName:
		usageName = "kubectl edgedrain"
	case CompletionName:
		complete(ctx, os.Args[1:], os.Stdout)
		return
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, for tests: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("edgedrainctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nats cli.NATSFlags
	nats.Register(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "give up reaching the bus after this long")
	fs.Usage = cli.Usage(fs, strings.ReplaceAll(intro, "edgedrainctl [flags]", usageName+" [flags]"))
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "edgedrainctl:", err)
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	life := ctx // the command's whole life: status --watch runs until interrupted
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var err error
	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "check":
		return check(ctx, rest, stdout, stderr)
	case "keys":
		return keys(ctx, rest, stdout, stderr)
	case "keep-cordoned":
		return keepCordoned(ctx, rest, stdout, stderr)
	case "status":
		err = status(ctx, life, nats, rest, stdout, stderr)
	case "withdraw":
		err = withdraw(ctx, nats, rest, stdout)
	default:
		err = fmt.Errorf("unknown command %q (want status, withdraw, check, keep-cordoned or keys; see --help)", cmd)
	}
	if err != nil {
		fmt.Fprintln(stderr, "edgedrainctl:", err)
		return 1
	}
	return 0
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
