// Command localcluster starts and stops a local Kubernetes control plane for people to poke at:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1, the Longhorn
// CRDs, and simulated nodes. It is what `make cluster-up` and `make cluster-down` run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

func main() {
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	nodes := fs.Int("nodes", 3, "simulated nodes to create (named node-0, node-1, ...)")
	dir := fs.String("dir", "", "state directory (default: <repo>/.cache/localcluster)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: localcluster [flags] up|down

up    start a local control plane in the background (stopping any earlier one in the same
      directory), install the Longhorn CRDs, create simulated nodes, print the KUBECONFIG line.
down  stop it and remove its state.

The first "up" builds the cluster binaries (15-40 minutes on 2 cores); later runs reuse the cache.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "up" && fs.Arg(0) != "down") {
		fs.Usage()
		os.Exit(2)
	}
	if *dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
			os.Exit(1)
		}
		*dir = filepath.Join(root, ".cache", "localcluster")
	}
	var err error
	if fs.Arg(0) == "up" {
		err = up(*dir, *nodes)
	} else {
		err = down(*dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func down(dir string) error {
	if err := testenv.StopDetached(dir, 10*time.Second); err != nil {
		return fmt.Errorf("stop the cluster in %s: %w", dir, err)
	}
	return os.RemoveAll(dir)
}

func up(dir string, nodes int) error {
	if nodes < 1 {
		return errors.New("--nodes must be at least 1")
	}
	if err := down(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneConfig{Dir: dir, Detached: true})
	if err != nil {
		return err
	}
	fail := func(err error) error {
		cp.Stop()
		return err
	}
	if _, err := testenv.InstallLonghornCRDs(ctx, cp.Admin); err != nil {
		return fail(err)
	}
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return fail(err)
	}
	c := &testenv.Cluster{ControlPlane: cp, Client: client}
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		if err := c.CreateNode(ctx, name, nil); err != nil {
			return fail(err)
		}
		if err := c.WaitNodeReady(ctx, name, time.Minute); err != nil {
			return fail(err)
		}
	}
	fmt.Printf("local cluster up: %d simulated nodes, logs in %s\n", nodes, dir)
	fmt.Printf("export KUBECONFIG=%s\n", cp.Kubeconfig)
	fmt.Printf("kubectl: %s\n", filepath.Join(cp.BinDir, "kubectl"))
	return nil
}
