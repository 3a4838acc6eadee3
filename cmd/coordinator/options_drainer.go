package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/edgedrain/edgedrain/pkg/volumes"
)

// registerDrainerFlags adds to fs the flags that bound what drainer templates, which users write
// on PVCs and StatefulSets, may make the coordinator create (DESIGN §10, volumes.DrainerPolicy),
// and the switch for deleting drained orphaned PVCs. c holds the defaults and receives the
// values; volumes.Config.ValidateSettings checks them.
func registerDrainerFlags(fs *pflag.FlagSet, c *volumes.Config) {
	d := &c.Drainers
	fs.Var(&stringList{list: &d.Namespaces}, "drainer-namespaces",
		"namespaces where drainer Jobs may run, comma-separated or repeated; \"*\": every namespace. Besides these, the namespaces matching --drainer-namespace-selector. "+
			"A PVC elsewhere with a drainer template blocks its node's drain with the reason, and gets a DrainerTemplateRefused Event")
	fs.StringVar(&d.NamespaceSelector, "drainer-namespace-selector", d.NamespaceSelector,
		"label selector of the namespaces where drainer Jobs may run (a cluster administrator labels a namespace to opt it in); empty: none by label, and namespaces are not watched")
	fs.StringVar(&d.ServiceAccount, "drainer-service-account", d.ServiceAccount,
		"the only ServiceAccount drainer pods run as, in their own namespace: a template naming none gets it, a template naming another is refused")
	fs.BoolVar(&d.AllowServiceAccountToken, "drainer-allow-service-account-token", d.AllowServiceAccountToken,
		"let drainer pods have an API token of that ServiceAccount; false: automountServiceAccountToken is forced false and a template asking for a token is refused")
	fs.BoolVar(&d.AllowPrivileged, "drainer-allow-privileged", d.AllowPrivileged,
		"let drainer templates ask for privileged containers, allowPrivilegeEscalation, added capabilities, unconfined seccomp or AppArmor, custom SELinux labels, unmasked /proc, sysctls "+
			"and volume types mounted from the host's side (nfs, iscsi, gitRepo, …; not hostPath); false: refused")
	fs.BoolVar(&d.AllowHostPath, "drainer-allow-host-path", d.AllowHostPath, "let drainer templates mount hostPath volumes; false: refused")
	fs.BoolVar(&d.AllowHostNamespaces, "drainer-allow-host-namespaces", d.AllowHostNamespaces,
		"let drainer templates use hostNetwork, hostPID, hostIPC and hostPort; false: refused")
	fs.BoolVar(&c.DeleteDrainedOrphans, "delete-drained-orphans", c.DeleteDrainedOrphans,
		"delete drained orphaned PVCs of StatefulSets annotated edgedrain.io/delete-drained-orphans=true (needs the RBAC of deploy/components/orphan-deletion); false: they are kept and the annotation is reported")
}

// stringList is a flag.Value of a list of strings: comma-separated, and the flag may be given
// again to add more. The first value given replaces the default.
type stringList struct {
	list *[]string
	set  bool
}

// Type names the value in the help.
func (l *stringList) Type() string { return "strings" }

// String returns the list comma-separated.
func (l *stringList) String() string {
	if l == nil || l.list == nil {
		return ""
	}
	return strings.Join(*l.list, ",")
}

// Set adds the comma-separated items of s (empty items are dropped).
func (l *stringList) Set(s string) error {
	if !l.set {
		*l.list, l.set = nil, true
	}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l.list = append(*l.list, item)
		}
	}
	return nil
}
