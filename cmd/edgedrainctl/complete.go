package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/edgedrain/edgedrain/internal/cli"
)

// CompletionName is the executable kubectl runs to complete `kubectl edgedrain ...` (kubectl
// 1.26 and later): installed on PATH beside kubectl-edgedrain, it is this program again.
const CompletionName = "kubectl_complete-edgedrain"

// noFileCompletion ends a completion's answer: the shell offers no file names (cobra's
// ShellCompDirectiveNoFileComp, which kubectl expects from a plugin's completion).
const noFileCompletion = ":4"

// complete answers a completion request: args are the words after the command, the last one
// the word being completed. Node names come from the bus when the words so far say how to reach
// it (best effort, 2 s).
func complete(ctx context.Context, args []string, out io.Writer) {
	defer fmt.Fprintln(out, noFileCompletion)
	if len(args) == 0 {
		args = []string{""}
	}
	partial, before := args[len(args)-1], args[:len(args)-1]
	fs := flag.NewFlagSet("edgedrainctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var nats cli.NATSFlags
	nats.Register(fs)
	fs.Duration("timeout", 0, "")
	_ = fs.Parse(before) // what parses is enough to reach the bus
	offer := func(words ...string) {
		for _, w := range words {
			if strings.HasPrefix(w, partial) {
				fmt.Fprintln(out, w)
			}
		}
	}
	rest := fs.Args()
	if len(rest) == 0 {
		if strings.HasPrefix(partial, "-") {
			fs.VisitAll(func(f *flag.Flag) { offer("--" + f.Name) })
			return
		}
		offer("status", "withdraw", "check", "keep-cordoned", "keys")
		return
	}
	switch cmd, prev := rest[0], before[len(before)-1]; {
	case cmd == "status" && prev == "-o":
		offer("table", "json")
	case cmd == "status":
		offer("-o", "--watch", "--js-domain")
	case cmd == "keys" && len(rest) == 1:
		offer("generate", "init")
	case cmd == "withdraw" || cmd == "check" || cmd == "keep-cordoned":
		if len(rest) > 1 {
			return // one NODE
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		b, err := open(cctx, nats)
		if err != nil {
			return
		}
		defer b.close()
		rows, err := loadViews(cctx, b)
		if err != nil {
			return
		}
		var nodes []string
		for _, r := range rows {
			nodes = append(nodes, r.Status.Node)
		}
		slices.Sort(nodes)
		offer(nodes...)
	}
}
