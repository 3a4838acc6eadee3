package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControlPlaneConfig says where and how to start a local control plane.
type ControlPlaneConfig struct {
	// BinDir holds kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok.
	// Empty: hack/cluster-bins.sh is run to build (first use) or find them.
	BinDir string
	// Dir receives certificates, etcd data, the kubeconfig and one log file per component.
	// Required; it must exist.
	Dir string
	// Detached starts the processes in their own session so they outlive this process
	// (`make cluster-up`); Stop or StopDetached ends them. Otherwise they die with this process,
	// even when it is killed (tests).
	Detached bool
	// StartTimeout bounds the wait for every component to report healthy. Zero: 90 s.
	StartTimeout time.Duration
	// AdvertiseAddress is where pods of real nodes reach the API server: the kubernetes
	// Service's endpoint, an address in their network namespace that the test forwards to the
	// API server's loopback port (RealCluster). Empty: loopback, and no such endpoint.
	AdvertiseAddress string
	// FeatureGates is given to the API server and the controller manager as --feature-gates
	// (e.g. "EvictionRequestAPI=true"); RuntimeConfig to the API server as --runtime-config
	// (an alpha API group: "lifecycle.k8s.io/v1alpha1=true"). Empty: their defaults.
	FeatureGates, RuntimeConfig string
}

// ControlPlane is a running etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// kwok (the simulated kubelet), all on 127.0.0.1.
type ControlPlane struct {
	// Dir is the working directory given in the config.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (system:masters).
	Kubeconfig string
	// Admin is the admin client configuration, unthrottled.
	Admin *rest.Config
	// BinDir holds the component binaries and kubectl.
	BinDir string

	ca *certAuthority
	// mu guards procs and restarts: a test restarts components from goroutines of its own
	// (a chaos run's faults) while others look a process up (waitHealthy) or stop them all.
	mu       sync.Mutex
	procs    []*process
	restarts int // of components (RestartAPIServer, RestartScheduler)
}

// StartControlPlane generates certificates, starts every component on free loopback ports, and
// returns once all of them answer their health checks. On error nothing is left running.
func StartControlPlane(ctx context.Context, cfg ControlPlaneConfig) (cp *ControlPlane, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("control plane: Dir is required")
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 90 * time.Second
	}
	if cfg.BinDir == "" {
		if cfg.BinDir, err = BuildClusterBinaries(ctx); err != nil {
			return nil, err
		}
	}
	ca, err := newCertAuthority()
	if err != nil {
		return nil, err
	}
	cp = &ControlPlane{Dir: cfg.Dir, Kubeconfig: filepath.Join(cfg.Dir, "kubeconfig"), BinDir: cfg.BinDir, ca: ca}
	// A failed start returns a nil ControlPlane (the named result): stop what was started
	// through a copy of the pointer, not through the result (a nil dereference hid the error).
	started := cp
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	files, err := cp.writeCredentials(cfg.AdvertiseAddress)
	if err != nil {
		return nil, err
	}
	stagesFile, err := writeKwokStages(cfg.BinDir, cfg.Dir)
	if err != nil {
		return nil, err
	}
	bin := func(name string) string { return filepath.Join(cfg.BinDir, name) }
	start := func(name string, args ...string) error {
		p, err := startProcess(name, bin(name), cfg.Dir, cfg.Detached, args...)
		if err != nil {
			return err
		}
		cp.mu.Lock()
		cp.procs = append(cp.procs, p)
		cp.mu.Unlock()
		return nil
	}
	deadline, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	if err := start("etcd",
		"--name=default", "--data-dir="+filepath.Join(cfg.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := cp.waitHealthy(deadline, "etcd", etcdURL+"/health", nil); err != nil {
		return nil, err
	}

	advertise := []string{"--advertise-address=127.0.0.1",
		// With a loopback advertise address the default lease reconciler refuses to start.
		"--endpoint-reconciler-type=none",
		// Pods need no default ServiceAccount to exist yet: tests create pods right after start.
		"--disable-admission-plugins=ServiceAccount"}
	if cfg.AdvertiseAddress != "" {
		// Pods that really run get what a real cluster gives them: the kubernetes Service's
		// endpoint, and their ServiceAccount's API token mounted (ServiceAccount admission).
		advertise = []string{"--advertise-address=" + cfg.AdvertiseAddress}
	}
	if err := start("kube-apiserver", append(append(advertise,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+files.serverCert, "--tls-private-key-file="+files.serverKey,
		"--client-ca-file="+files.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+files.saPub, "--service-account-signing-key-file="+files.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
	), gates(cfg, true)...)...); err != nil {
		return nil, err
	}
	adminTLS, err := cp.tlsClientConfig("kubernetes-admin", "system:masters")
	if err != nil {
		return nil, err
	}
	adminTLSConf, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: adminTLS})
	if err != nil {
		return nil, fmt.Errorf("admin TLS config: %w", err)
	}
	apiURL := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := cp.waitHealthy(deadline, "kube-apiserver", apiURL+"/readyz", adminTLSConf); err != nil {
		return nil, err
	}
	cp.Admin = cp.restConfig(apiURL, adminTLS)
	if err := writeKubeconfig(cp.Kubeconfig, cp.Admin); err != nil {
		return nil, err
	}

	component := func(name string, port int, extra ...string) error {
		args := append([]string{
			"--kubeconfig=" + cp.Kubeconfig,
			"--authentication-kubeconfig=" + cp.Kubeconfig, "--authorization-kubeconfig=" + cp.Kubeconfig,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--leader-elect=false",
			// The default client rate limits (QPS 20-50) make 1000-pod drains crawl.
			"--kube-api-qps=1000", "--kube-api-burst=2000",
		}, extra...)
		return start(name, args...)
	}
	if err := component("kube-controller-manager", kcmPort, append([]string{
		"--service-account-private-key-file=" + files.saKey, "--root-ca-file=" + files.caCert,
		"--use-service-account-credentials=false",
		"--concurrent-replicaset-syncs=10", "--concurrent-deployment-syncs=10",
	}, gates(cfg, false)...)...); err != nil {
		return nil, err
	}
	if err := component("kube-scheduler", schedPort); err != nil {
		return nil, err
	}
	if err := start("kwok",
		"--kubeconfig="+cp.Kubeconfig, "--config="+stagesFile,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
	); err != nil {
		return nil, err
	}
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // components' self-signed health endpoints on loopback
	for name, port := range map[string]int{"kube-controller-manager": kcmPort, "kube-scheduler": schedPort} {
		if err := cp.waitHealthy(deadline, name, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", insecure); err != nil {
			return nil, err
		}
	}
	if err := cp.waitHealthy(deadline, "kwok", "http://127.0.0.1:"+strconv.Itoa(kwokPort)+"/healthz", nil); err != nil {
		return nil, err
	}
	if cfg.Detached {
		if err := cp.writePIDs(); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// gates is the feature gate (and, for the API server, runtime config) flags of cfg.
func gates(cfg ControlPlaneConfig, apiServer bool) []string {
	var out []string
	if cfg.FeatureGates != "" {
		out = append(out, "--feature-gates="+cfg.FeatureGates)
	}
	if apiServer && cfg.RuntimeConfig != "" {
		out = append(out, "--runtime-config="+cfg.RuntimeConfig)
	}
	return out
}

// UserConfig returns a client configuration that authenticates as user in groups, with a
// certificate signed by the cluster's CA: RBAC decides what it may do.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	tc, err := cp.tlsClientConfig(user, groups...)
	if err != nil {
		return nil, err
	}
	return cp.restConfig(cp.Admin.Host, tc), nil
}

// Stop ends every component (TERM, then KILL after 10 s), last started first.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop(10 * time.Second)
	}
	cp.procs = nil
}

type credentialFiles struct{ caCert, serverCert, serverKey, saKey, saPub string }

func (cp *ControlPlane) writeCredentials(advertise string) (credentialFiles, error) {
	dir := filepath.Join(cp.Dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return credentialFiles{}, fmt.Errorf("create %s: %w", dir, err)
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}
	if advertise != "" {
		ips = append(ips, net.ParseIP(advertise))
	}
	serverCert, serverKey, err := cp.ca.issue("kube-apiserver", nil, ips,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return credentialFiles{}, err
	}
	f := credentialFiles{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
	}
	if err := writeFiles(map[string][]byte{f.caCert: cp.ca.certPEM, f.serverCert: serverCert, f.serverKey: serverKey}); err != nil {
		return credentialFiles{}, err
	}
	f.saKey, f.saPub, err = writeServiceAccountKeys(dir)
	return f, err
}

func (cp *ControlPlane) tlsClientConfig(user string, groups ...string) (rest.TLSClientConfig, error) {
	certPEM, keyPEM, err := cp.ca.issue(user, groups, nil, nil)
	if err != nil {
		return rest.TLSClientConfig{}, err
	}
	return rest.TLSClientConfig{CAData: cp.ca.certPEM, CertData: certPEM, KeyData: keyPEM}, nil
}

func (cp *ControlPlane) restConfig(host string, tc rest.TLSClientConfig) *rest.Config {
	// Tests and the coordinator set their own rate limits; client-go's default (QPS 5) throttles drains.
	return &rest.Config{Host: host, TLSClientConfig: tc, QPS: 1000, Burst: 2000, Timeout: 30 * time.Second}
}

// waitHealthy polls url until it answers 200, the component exits, or ctx ends.
func (cp *ControlPlane) waitHealthy(ctx context.Context, name, url string, tlsConf *tls.Config) error {
	tr := &http.Transport{TLSClientConfig: tlsConf}
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	defer tr.CloseIdleConnections()
	var last string
	for {
		if p := cp.process(name); p != nil && p.exited() {
			return fmt.Errorf("%s exited during start-up: %v\n%s", name, p.exitErr(), p.tail(30))
		}
		resp, err := client.Get(url)
		if err == nil {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:n])))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			tail := ""
			if p := cp.process(name); p != nil {
				tail = p.tail(30)
			}
			return fmt.Errorf("%s not healthy at %s (last answer: %s): %w\n%s", name, url, last, ctx.Err(), tail)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RestartAPIServer kills kube-apiserver (SIGKILL: a crash), waits down, and starts it again
// with the same flags on the same port, returning once it is ready: every client's requests
// fail meanwhile and its watches are made again. The log of the run before is kept beside the
// new one (kube-apiserver.log.<n>).
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if err := cp.restart("kube-apiserver", down); err != nil {
		return err
	}
	tlsConf, err := rest.TLSConfigFor(cp.Admin)
	if err != nil {
		return err
	}
	return cp.waitHealthy(ctx, "kube-apiserver", cp.Admin.Host+"/readyz", tlsConf)
}

// RestartScheduler kills kube-scheduler and starts it again at once, with a fresh cache. After
// kube-apiserver restarts its cache can go wrong ("Scheduler cache is corrupted") and pods stay
// Pending for good; a control plane's restart restarts it too.
func (cp *ControlPlane) RestartScheduler() error { return cp.restart("kube-scheduler", 0) }

// restart holds cp.mu throughout: two restarts of one component at once would both kill the
// same process and leave two new ones, one of them no longer in procs (never stopped).
func (cp *ControlPlane) restart(name string, down time.Duration) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	old := cp.processLocked(name)
	if old == nil {
		return fmt.Errorf("control plane: no %s", name)
	}
	_ = old.cmd.Process.Kill()
	<-old.done
	time.Sleep(down)
	cp.restarts++
	_ = os.Rename(old.logPath, old.logPath+"."+strconv.Itoa(cp.restarts))
	p, err := startProcess(old.name, old.cmd.Path, cp.Dir, false, old.cmd.Args[1:]...)
	if err != nil {
		return err
	}
	for i := range cp.procs {
		if cp.procs[i] == old {
			cp.procs[i] = p
		}
	}
	return nil
}

func (cp *ControlPlane) process(name string) *process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.processLocked(name)
}

// processLocked is process with cp.mu held.
func (cp *ControlPlane) processLocked(name string) *process {
	for _, p := range cp.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

func writeKubeconfig(path string, rc *rest.Config) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["edgedrain-local"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts["edgedrain-local"] = &clientcmdapi.Context{Cluster: "edgedrain-local", AuthInfo: "admin"}
	cfg.CurrentContext = "edgedrain-local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// freePorts asks the kernel for n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
