package main

import (
	"flag"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags find the Kubernetes API as kubectl does, for the commands that read or write it
// (check, keep-cordoned) rather than the bus.
type kubeFlags struct {
	kubeconfig, context string
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: $KUBECONFIG, else ~/.kube/config, else in-cluster")
	fs.StringVar(&k.context, "context", "", "kubeconfig context; empty: the current one")
}

// restConfig loads the client configuration as kubectl does; userAgent names the command in the
// API server's logs (and, for writes, as their field manager).
func (k *kubeFlags) restConfig(userAgent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration (--kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster): %w", err)
	}
	rc.QPS, rc.Burst = 50, 100 // a handful of lists; client-go's default of 5 would make them wait
	rc.UserAgent = userAgent
	return rc, nil
}
