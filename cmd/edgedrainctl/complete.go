package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgedrain/edgedrain/internal/cli"
)

// CompletionName is the executable kubectl runs to complete `kubectl edgedrain ...` (kubectl
// 1.26 and later): installed on PATH beside kubectl-edgedrain, it is this program again. kubectl
// runs it with the words after "kubectl edgedrain", the last one the word being completed, and
// reads cobra's answer: a candidate per line (a tab, then its description), then ":DIRECTIVE".
const CompletionName = "kubectl_complete-edgedrain"

// completionArgs turns the words kubectl gives CompletionName into cobra's completion request.
func completionArgs(words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	return append([]string{cobra.ShellCompRequestCmd}, words...)
}

// completeNodes completes a NODE argument with the nodes on the bus, reached as the words so far
// say (flags, or their environment variables), best effort within 2 s.
func completeNodes(g *global) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp // one NODE
		}
		_ = cli.ApplyEnv(cmd.Flags())
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		b, err := open(ctx, g.nats)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer b.close()
		rows, err := loadViews(ctx, b)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var nodes []string
		for _, r := range rows {
			if strings.HasPrefix(r.Status.Node, toComplete) {
				nodes = append(nodes, r.Status.Node)
			}
		}
		slices.Sort(nodes)
		return nodes, cobra.ShellCompDirectiveNoFileComp
	}
}
