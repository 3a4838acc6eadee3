package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/edgedrain/edgedrain/internal/cli"
)

// kubeGroup titles the Kubernetes API flags in the help.
const kubeGroup = "Kubernetes API flags (check, keep-cordoned and keys init), kubectl's; the kubeconfig is found as kubectl\n" +
	"finds it (--kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster):"

// kubeFlags adds kubectl's flags that find and authenticate to the Kubernetes API (cli-runtime's
// ConfigFlags: --kubeconfig, --context, -n/--namespace, --as, ...) to fs, for the commands that
// read or write it (check, keep-cordoned, keys init) rather than the bus.
func kubeFlags(fs *pflag.FlagSet) *genericclioptions.ConfigFlags {
	k := genericclioptions.NewConfigFlags(true)
	k.CacheDir = nil // the discovery cache: edgedrainctl discovers nothing
	kfs := pflag.NewFlagSet("kubernetes", pflag.ContinueOnError)
	k.AddFlags(kfs)
	cli.Group(kfs, kubeGroup)
	fs.AddFlagSet(kfs)
	return k
}

// restConfig loads the client configuration as kubectl does; userAgent names the command in the
// API server's logs (and, for writes, as their field manager).
func restConfig(k *genericclioptions.ConfigFlags, userAgent string) (*rest.Config, error) {
	rc, err := k.ToRESTConfig()
	if err == nil && *k.APIServer == "" && nothingConfigured(k) {
		// No kubeconfig and not in a pod: kubectl would try localhost:8080.
		err = errors.New("no configuration has been provided")
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration (--kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster): %w", err)
	}
	rc.QPS, rc.Burst = 50, 100 // a handful of lists; client-go's default of 5 would make them wait
	rc.UserAgent = userAgent
	return rc, nil
}

// nothingConfigured says whether no kubeconfig names anything and this is not a pod: client-go
// then falls back to localhost:8080. (Not judged by that address: a kubeconfig may name it, for
// kubectl proxy or a tunnel.)
func nothingConfigured(k *genericclioptions.ConfigFlags) bool {
	raw, err := k.ToRawKubeConfigLoader().RawConfig()
	if err != nil || !clientcmdapi.IsConfigEmpty(&raw) {
		return false
	}
	_, err = rest.InClusterConfig()
	return err != nil
}

// registerKubeCompletions completes --context, --cluster and --user from the kubeconfig.
func registerKubeCompletions(root *cobra.Command, g *global) {
	complete := func(names func(clientcmdapi.Config) []string) cobra.CompletionFunc {
		return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			raw, err := g.kube.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []string
			for _, n := range names(raw) {
				if strings.HasPrefix(n, toComplete) {
					out = append(out, n)
				}
			}
			slices.Sort(out)
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
	for flag, names := range map[string]func(clientcmdapi.Config) []string{
		"context": func(c clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Contexts)) },
		"cluster": func(c clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Clusters)) },
		"user":    func(c clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.AuthInfos)) },
	} {
		if err := root.RegisterFlagCompletionFunc(flag, complete(names)); err != nil {
			panic(err) // the flag is cli-runtime's: a programming error
		}
	}
}
