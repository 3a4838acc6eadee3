package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// The real nodes' network, inside the cluster's network namespace: edge0 holds the API server's
// address for nodes and pods (forwarded to its loopback port) and the cluster DNS; edge1 holds
// the nodes' IPs. Pod ranges are one /24 per node. None of it exists outside the namespace.
const (
	realAPIAddress = "10.77.0.1"
	realDNSAddress = "10.77.0.10"
	realPodRanges  = "10.88.0.0/16"
	// maxRealNodes is the most real nodes a cluster has (their addresses are made up front).
	maxRealNodes = 8
	// realNetNSPrefix names the clusters' network namespaces (and their nodes' cgroups).
	realNetNSPrefix = "edgedrain-"
)

func realNodeIP(i int) string                { return "10.77.0." + strconv.Itoa(2+i) }
func realPodCIDR(i int) string               { return "10.88." + strconv.Itoa(1+i) + ".0/24" }
func realNodeName(i int) string              { return "real-" + strconv.Itoa(i) }
func realNodeCgroup(ns string, i int) string { return "/" + ns + "-" + realNodeName(i) }

// RealClusterConfig says what a cluster with real nodes runs.
type RealClusterConfig struct {
	// Nodes is the number of real nodes (real-0, real-1, ...). Required, at least 1.
	Nodes int
	// Labels are set on every real node (the kubelet's --node-labels).
	Labels map[string]string
	// SystemBus runs a system D-Bus (dbus-daemon) on every real node, at its
	// /run/dbus/system_bus_socket, for an agent's logind reboot.
	SystemBus bool
}

// RealCluster is a local control plane with real nodes beside kwok's: kubelets on containerd
// and runc, a kube-proxy and a cluster DNS (CoreDNS), all in a network namespace the test made.
// Pods on its real nodes run real containers, reach each other and Services by name, and the
// API server through the kubernetes Service, as on a machine of the field.
type RealCluster struct {
	*Cluster
	NS    *NetNS
	Nodes []*RealNode
	// APIServer is the API server's URL for processes in the namespace.
	APIServer string
	// PauseImage is the pod sandbox's image on every real node.
	PauseImage string

	procs  []*process
	fwd    net.Listener
	fwdWG  sync.WaitGroup // the forwarder's accept loop
	mounts *mountPoints
	lock   *os.File // held for the cluster's life (janitor.go)
}

// RealNodeSkipReason says why this machine cannot run real nodes, or "" when it can.
func RealNodeSkipReason() string {
	if os.Geteuid() != 0 {
		return "real nodes need root (network, mount and PID namespaces, cgroups)"
	}
	for _, tool := range []string{"containerd", "runc", "ctr", "ip", "nsenter", "unshare", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("real nodes need %s (apt-get install containerd runc containernetworking-plugins iptables iproute2)", tool)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return "real nodes need the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)"
	}
	return ""
}

// StartRealCluster starts a control plane, the real nodes' network, DNS and kube-proxy, and
// cfg.Nodes real nodes, and waits until every one is Ready. The returned stop function ends
// all of it and removes everything it made: processes, namespaces, cgroups, directories.
func StartRealCluster(ctx context.Context, cfg RealClusterConfig) (rc *RealCluster, stop func(), err error) {
	if why := RealNodeSkipReason(); why != "" {
		return nil, nil, errors.New(why)
	}
	if cfg.Nodes < 1 || cfg.Nodes > maxRealNodes {
		return nil, nil, fmt.Errorf("real cluster: 1 to %d nodes, not %d", maxRealNodes, cfg.Nodes)
	}
	binDir, err := BuildClusterBinaries(ctx, "--real-node")
	if err != nil {
		return nil, nil, err
	}
	c, stopCluster, err := startCluster(ctx, ClusterConfig{ControlPlaneConfig: ControlPlaneConfig{BinDir: binDir, AdvertiseAddress: realAPIAddress}})
	if err != nil {
		return nil, nil, err
	}
	rc = &RealCluster{Cluster: c}
	stop = func() {
		rc.stop()
		stopCluster()
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	removeDeadClusters()
	name := realNetNSPrefix + rand.String(6)
	if rc.lock, err = holdClusterLock(name); err != nil {
		return nil, nil, err
	}
	if rc.NS, err = NewNetNS(ctx, name); err != nil {
		return nil, nil, err
	}
	if err = rc.network(ctx); err != nil {
		return nil, nil, err
	}
	if err = rc.forwardAPI(); err != nil {
		return nil, nil, err
	}
	if err = rc.startServices(); err != nil {
		return nil, nil, err
	}
	if err = rc.startNodes(ctx, cfg); err != nil {
		return nil, nil, err
	}
	return rc, stop, nil
}

// network gives the namespace the API's, the DNS's and the nodes' addresses.
func (rc *RealCluster) network(ctx context.Context) error {
	steps := [][]string{
		{"link", "add", "edge0", "type", "veth", "peer", "name", "edge1"},
		{"addr", "add", realAPIAddress + "/24", "dev", "edge0"},
		{"addr", "add", realDNSAddress + "/32", "dev", "edge0"},
		{"link", "set", "edge0", "up"},
		{"link", "set", "edge1", "up"},
	}
	for i := range maxRealNodes { // unused addresses cost nothing
		steps = append(steps, []string{"addr", "add", realNodeIP(i) + "/32", "dev", "edge1"})
	}
	for _, s := range steps {
		if err := rc.NS.IP(ctx, s...); err != nil {
			return err
		}
	}
	// Pods reach other nodes' pods and the API server through the namespace's routing.
	cmd := rc.NS.Command(ctx, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sysctl ip_forward in %s: %w: %s", rc.NS.Name, err, out)
	}
	return nil
}

// forwardAPI makes the API server reachable in the namespace at realAPIAddress on its own port
// (the kubernetes Service's endpoint): a listener there, each connection piped to loopback.
func (rc *RealCluster) forwardAPI() error {
	target := strings.TrimPrefix(rc.Admin.Host, "https://")
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		return err
	}
	rc.fwd, err = rc.NS.Listen(net.JoinHostPort(realAPIAddress, port))
	if err != nil {
		return fmt.Errorf("forward the API server into %s: %w", rc.NS.Name, err)
	}
	rc.APIServer = "https://" + net.JoinHostPort(realAPIAddress, port)
	rc.fwdWG.Add(1)
	go func() {
		defer rc.fwdWG.Done()
		for {
			in, err := rc.fwd.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				pipe := func(dst, src net.Conn) {
					_, _ = io.Copy(dst, src)
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					done <- struct{}{}
				}
				go pipe(out, in)
				go pipe(in, out)
				<-done
				<-done
			}()
		}
	}()
	return nil
}

// kubeconfigFor writes a kubeconfig for a process in the namespace with the given identity.
func (rc *RealCluster) kubeconfigFor(name, user string, groups ...string) (string, error) {
	tc, err := rc.tlsClientConfig(user, groups...)
	if err != nil {
		return "", err
	}
	tc.CAData = rc.ca.certPEM
	path := filepath.Join(rc.Dir, name+".kubeconfig")
	return path, writeKubeconfig(path, &rest.Config{Host: rc.APIServer, TLSClientConfig: tc})
}

// startServices starts the cluster's network services in the namespace: kube-proxy (Services'
// virtual IPs, iptables) and CoreDNS (Services by name) at realDNSAddress.
func (rc *RealCluster) startServices() error {
	admin, err := rc.kubeconfigFor("network", "edgedrain-test:network", "system:masters")
	if err != nil {
		return err
	}
	proxyConf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: iptables
clusterCIDR: %s
hostnameOverride: edgedrain-network
bindAddress: %s
healthzBindAddress: ""
metricsBindAddress: ""
# A pod reaching a Service whose endpoint is on its own bridge gets the answer back through
# the namespace, not straight from the other pod (no hairpin surprises).
iptables: {masqueradeAll: true}
# Leave the kernel's conntrack limits and timeouts as they are: not the namespace's to set.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, admin, realPodRanges, realAPIAddress)
	corefile := fmt.Sprintf(`.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s edgedrain-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
`, admin)
	files := map[string][]byte{
		filepath.Join(rc.Dir, "kube-proxy.yaml"): []byte(proxyConf),
		filepath.Join(rc.Dir, "Corefile"):        []byte(corefile),
	}
	if err := writeFiles(files); err != nil {
		return err
	}
	for _, p := range [][]string{
		{"kube-proxy", "--config=" + filepath.Join(rc.Dir, "kube-proxy.yaml")},
		{"coredns", "-conf", filepath.Join(rc.Dir, "Corefile"), "-dns.port", "53"},
	} {
		args := append([]string{"--net=" + rc.NS.Path, "--", filepath.Join(rc.BinDir, p[0])}, p[1:]...)
		proc, err := startProcess(p[0], "nsenter", rc.Dir, false, args...)
		if err != nil {
			return err
		}
		rc.procs = append(rc.procs, proc)
	}
	return nil
}

// startNodes prepares the nodes' identities and disks, boots them, gives them the pause image
// and waits until each is Ready.
func (rc *RealCluster) startNodes(ctx context.Context, cfg RealClusterConfig) error {
	// RBAC only (no Node authorizer here): kubelets get the built-in role of every node.
	_, err := rc.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "edgedrain-test:nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("bind system:node: %w", err)
	}
	if rc.mounts, err = holdMountPoints(); err != nil {
		return err
	}
	pause, err := buildTestImage(ctx, rc.Dir, "idle")
	if err != nil {
		return err
	}
	rc.PauseImage = pause.Name
	for i := range cfg.Nodes {
		name := realNodeName(i)
		kubeconfig, err := rc.kubeconfigFor("kubelet-"+name, "system:node:"+name, "system:nodes")
		if err != nil {
			return err
		}
		n := &RealNode{Name: name, IP: realNodeIP(i), PodCIDR: realPodCIDR(i), Dir: filepath.Join(rc.Dir, name),
			cgroupOf: realNodeCgroup(rc.NS.Name, i),
			cfg: realNodeConfig{binDir: rc.BinDir, ns: rc.NS, kubeconfig: kubeconfig, clusterDNS: realDNSAddress,
				index: i, sandbox: pause.Name, labels: cfg.Labels, systemBus: cfg.SystemBus}}
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return err
		}
		if err := n.writeConfigs(); err != nil {
			return err
		}
		rc.Nodes = append(rc.Nodes, n)
		if err := n.Boot(ctx); err != nil {
			return err
		}
	}
	for _, n := range rc.Nodes {
		if err := n.waitContainerd(ctx); err != nil {
			return err
		}
		if err := n.Import(ctx, pause.Archive); err != nil {
			return err
		}
	}
	for _, n := range rc.Nodes {
		if err := rc.WaitNodeReady(ctx, n.Name, 90*time.Second); err != nil {
			return fmt.Errorf("%w\n%s", err, n.Log(30))
		}
	}
	return nil
}

// stop ends the nodes, the network's services and the namespace, and removes what they made.
func (rc *RealCluster) stop() {
	for _, n := range rc.Nodes {
		n.stop()
	}
	for _, p := range rc.procs {
		p.stop(5 * time.Second)
	}
	if rc.fwd != nil {
		_ = rc.fwd.Close()
		rc.fwdWG.Wait()
	}
	if rc.NS != nil {
		_ = rc.NS.Delete()
	}
	rc.mounts.release()
	releaseLock(rc.lock)
}

// Namespace creates a namespace for the test, as Cluster.Namespace does, and waits until its
// default ServiceAccount exists: with ServiceAccount admission, a pod is refused before that.
func (rc *RealCluster) Namespace(t testing.TB) string {
	t.Helper()
	ns := rc.Cluster.Namespace(t)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := rc.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: no default ServiceAccount: %v", ns, err)
	}
	return ns
}
