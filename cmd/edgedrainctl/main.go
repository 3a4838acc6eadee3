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
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

const intro = `Usage: edgedrainctl [flags] status [-o table|json]
       edgedrainctl [flags] withdraw NODE
       edgedrainctl [flags] check NODE [-o text|json] [--kubeconfig FILE] (see check --help)

status    print every node's drain status: status, requester, attempt, age, message, and what
          blocks the drain (pods that refuse eviction, volumes not yet safe), read from the bus
          (buckets nodedrain-status and nodedrain-requests). -o json prints the same as JSON.
withdraw  delete NODE's drain request, as its agent does when the node is back: the coordinator
          cancels a drain under way, uncordons the node if it cordoned it, and returns it to
          NOTREQUESTED. For a node that will not come back to withdraw by itself.
check     predict, from the Kubernetes API and changing nothing, what would block a drain of
          NODE if it started now. Exit status 0: nothing would block, 1: something would, 2: the
          prediction failed.`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
	fs.Usage = cli.Usage(fs, intro)
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
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var err error
	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "check":
		return check(ctx, rest, stdout, stderr)
	case "status":
		err = status(ctx, nats, rest, stdout)
	case "withdraw":
		err = withdraw(ctx, nats, rest, stdout)
	default:
		err = fmt.Errorf("unknown command %q (want status, withdraw or check; see --help)", cmd)
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
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// Open, never create: a missing bucket means no coordinator has run on this bus.
	for _, name := range []string{nodedrain.RequestsBucket, nodedrain.StatusBucket} {
		if _, err := js.KeyValue(ctx, name); err != nil {
			nc.Close()
			return nil, fmt.Errorf("bucket %s on %s (has a coordinator run on this bus?): %w", name, nats.URLs, err)
		}
	}
	b := &buckets{close: nc.Close}
	b.requests, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket, OpenOnly: true}, nodedrain.RequestCodec{})
	if err == nil {
		b.statuses, err = pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, OpenOnly: true}, nodedrain.StatusCodec{})
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}
