package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// nodeBusConfig is the node's system D-Bus (Debian's dbus-daemon) at the usual socket: anyone on
// the node may call, only root may own a name (the test's stand-in logind does).
const nodeBusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
  <policy user="root">
    <allow own="*"/>
  </policy>
</busconfig>
`

// kubeletTunables are the kernel settings the kubelet sets at start when they differ
// (setupKernelTunables, with the values it wants). They are the machine's, not a namespace's:
// the node is shown files holding those values instead, so the kubelet finds them set and leaves
// the machine's kernel alone (it would otherwise set panic-on-oops and a reboot 10 s after a
// panic on the test machine).
var kubeletTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// writeConfigs writes containerd's, the CNI network's and the kubelet's configuration.
func (n *RealNode) writeConfigs() error {
	containerd := fmt.Sprintf(`version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Without CAP_SYS_RESOURCE a sandbox cannot lower its oom_score_adj below ours.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/var/lib/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`, n.cfg.sandbox)
	// Each node its own bridge and range; the bridges share the cluster's network namespace,
	// so pods of every node reach one another through its routing table. host-local's
	// allocations live in /run: a boot starts with none, as the node's pods are gone.
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "edgedrain-%[1]s", "plugins": [
  {"type": "bridge", "bridge": "cni%[2]d", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam", "ranges": [[{"subnet": %[3]q}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}`, n.Name, n.cfg.index, n.PodCIDR)
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# containerd 1.6 cannot tell the kubelet its cgroup driver: the kubelet's own setting stands.
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
port: %[2]d
readOnlyPort: 0
healthzPort: 0
podCIDR: %[3]s
clusterDNS: [%[4]s]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: /var/log/pods
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# The machine's disk is the test machine's: never evict pods or delete images for its sake.
evictionHard: {memory.available: "1Mi", nodefs.available: "0%%", imagefs.available: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
`, n.cgroupOf, 10250+n.cfg.index, n.PodCIDR, n.cfg.clusterDNS)
	if n.cfg.systemBus {
		if err := os.WriteFile(filepath.Join(n.Dir, "dbus.conf"), []byte(nodeBusConfig), 0o644); err != nil {
			return err
		}
	}
	sysctls := filepath.Join(n.Dir, "sysctl")
	if err := os.MkdirAll(sysctls, 0o755); err != nil {
		return err
	}
	for key, value := range kubeletTunables {
		// One file per setting, its name the key with dots: the boot script binds it over /proc/sys/<key>.
		if err := os.WriteFile(filepath.Join(sysctls, strings.ReplaceAll(key, "/", ".")), []byte(value+"\n"), 0o444); err != nil {
			return err
		}
	}
	netd := filepath.Join(n.Dir, "var-lib", "cni", "net.d")
	if err := os.MkdirAll(netd, 0o755); err != nil {
		return err
	}
	return writeFiles(map[string][]byte{
		filepath.Join(n.Dir, "containerd.toml"):      []byte(containerd),
		filepath.Join(netd, "10-edgedrain.conflist"): []byte(cni),
		filepath.Join(n.Dir, "kubelet.yaml"):         []byte(kubelet),
	})
}
