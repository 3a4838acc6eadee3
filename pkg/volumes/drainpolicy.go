package volumes

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultDrainerNamespaceSelector selects the namespaces where drainer Jobs may run by default:
// those a cluster administrator labelled edgedrain.io/drainers=allowed.
const DefaultDrainerNamespaceSelector = "edgedrain.io/drainers=allowed"

// AllNamespaces in DrainerPolicy.Namespaces allows drainer Jobs in every namespace.
const AllNamespaces = "*"

// DrainerPolicy is what the operator allows drainer templates, which users write, to make the
// coordinator create. The coordinator creates drainer Jobs with its own rights, so without a
// policy anyone who may annotate a PVC or StatefulSet could have it start a privileged pod on a
// node of their choice. A template asking for more than the policy allows is refused whole:
// no Job is created, the PVC gets an Event, and the node's drain a blocker naming why.
//
// The rules, each lifted only by its own field:
//
//   - Namespaces: the PVC's namespace is listed in Namespaces (or Namespaces holds
//     AllNamespaces), or its labels match NamespaceSelector.
//   - ServiceAccount: the pod runs as ServiceAccount; a template naming none gets it, one
//     naming another (serviceAccountName or the deprecated serviceAccount) is refused.
//   - AllowServiceAccountToken: otherwise automountServiceAccountToken is set to false, and a
//     template setting it true or mounting a projected serviceAccountToken is refused.
//   - AllowPrivileged: otherwise no container (init and ephemeral ones included) may be
//     privileged, set allowPrivilegeEscalation true, add any capability, use procMount
//     Unmasked, an Unconfined seccomp or AppArmor profile (field or annotation) or an SELinux
//     user, role or type other than the container runtime's (PodSecurity baseline); the pod may
//     set no sysctls; and only the volume types of the PodSecurity restricted profile may be
//     mounted (configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim,
//     projected, secret), not those the kubelet mounts from the host's side (nfs, iscsi,
//     gitRepo, flexVolume, …).
//   - AllowHostPath: otherwise no hostPath volume.
//   - AllowHostNamespaces: otherwise no hostNetwork, hostPID, hostIPC, hostPort or Windows
//     HostProcess.
//
// Nothing else is restricted: a drainer may run as root in its container, read the ConfigMaps,
// Secrets and other PVCs of its namespace, as any pod of that namespace could.
type DrainerPolicy struct {
	// Namespaces lists the namespaces where drainer Jobs may run, besides those
	// NamespaceSelector selects; AllNamespaces ("*") allows every one. Empty: none by name.
	Namespaces []string
	// NamespaceSelector is a label selector (DefaultDrainerNamespaceSelector); drainer Jobs may
	// run in the namespaces whose labels it matches. Empty: none by label, and the gate does not
	// watch namespaces. Only those who may label namespaces (usually cluster administrators)
	// can opt a namespace in.
	NamespaceSelector string
	// ServiceAccount is the one ServiceAccount drainer pods run as, in their own namespace
	// (a DNS subdomain, default "default").
	ServiceAccount string
	// AllowServiceAccountToken lets drainer pods have an API token of ServiceAccount (the
	// template or the ServiceAccount decides); false: automountServiceAccountToken is forced
	// false.
	AllowServiceAccountToken bool
	// AllowPrivileged lets templates ask for privileged containers, privilege escalation, added
	// capabilities, unconfined profiles, custom SELinux labels, sysctls and host-mounted volume
	// types (all but hostPath).
	AllowPrivileged bool
	// AllowHostPath lets templates mount hostPath volumes.
	AllowHostPath bool
	// AllowHostNamespaces lets templates use the host's network, PID and IPC namespaces and
	// host ports.
	AllowHostNamespaces bool
}

// DefaultDrainerPolicy returns the strict policy: namespaces opt in with
// DefaultDrainerNamespaceSelector, pods run as "default" without an API token, nothing
// privileged, no host access.
func DefaultDrainerPolicy() DrainerPolicy {
	return DrainerPolicy{NamespaceSelector: DefaultDrainerNamespaceSelector, ServiceAccount: "default"}
}

// validate reports settings the gate cannot run with.
func (p DrainerPolicy) validate() error {
	var errs []error
	for _, ns := range p.Namespaces {
		if ns != AllNamespaces && len(validation.IsDNS1123Label(ns)) > 0 {
			errs = append(errs, fmt.Errorf("drainer namespace %q is not a namespace name (or %q)", ns, AllNamespaces))
		}
	}
	if _, err := p.selector(); err != nil {
		errs = append(errs, fmt.Errorf("drainer namespace selector %q: %w", p.NamespaceSelector, err))
	}
	if msgs := validation.IsDNS1123Subdomain(p.ServiceAccount); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("drainer ServiceAccount %q: %s", p.ServiceAccount, strings.Join(msgs, "; ")))
	}
	return errors.Join(errs...)
}

// selector parses NamespaceSelector; nil when it is empty.
func (p DrainerPolicy) selector() (labels.Selector, error) {
	if strings.TrimSpace(p.NamespaceSelector) == "" {
		return nil, nil
	}
	return labels.Parse(p.NamespaceSelector)
}

// namespaceAllowed reports whether drainers may run in namespace ns, which carries nsLabels
// (nil when unknown), given p's parsed selector sel; else why not.
func (p DrainerPolicy) namespaceAllowed(ns string, nsLabels labels.Labels, sel labels.Selector) (bool, string) {
	for _, allowed := range p.Namespaces {
		if allowed == AllNamespaces || allowed == ns {
			return true, ""
		}
	}
	if sel != nil && nsLabels != nil && sel.Matches(nsLabels) {
		return true, ""
	}
	why := fmt.Sprintf("namespace %s is not allowed to run drainers (--drainer-namespaces", ns)
	if sel != nil {
		why += fmt.Sprintf(", or a namespace label matching %q", p.NamespaceSelector)
	}
	return false, why + ")"
}

// Admit checks t against p and returns the template to run: a copy with the pod's
// ServiceAccount set and, unless AllowServiceAccountToken, automountServiceAccountToken false.
// A template that breaks rules is refused with an error matching ErrTemplateRefused that names
// each rule broken and the setting that would allow it. The namespace is checked by the gate.
func (p DrainerPolicy) Admit(t DrainerTemplate) (DrainerTemplate, error) {
	if problems := p.problems(t); len(problems) > 0 {
		return t, refused(problems)
	}
	return p.apply(t), nil
}

// refused is the error of a template refused for problems.
func refused(problems []string) error {
	return fmt.Errorf("%w: %s", ErrTemplateRefused, strings.Join(problems, "; "))
}

// problems lists the rules t breaks, each with the setting that would allow it.
func (p DrainerPolicy) problems(t DrainerTemplate) []string {
	pod := &t.Spec.Template.Spec
	var out []string
	if !p.AllowHostNamespaces {
		out = append(out, tagged(hostNamespaces(pod), "--drainer-allow-host-namespaces")...)
	}
	if !p.AllowPrivileged {
		out = append(out, tagged(privileges(pod, t.Spec.Template.Annotations), "--drainer-allow-privileged")...)
	}
	out = append(out, p.volumes(pod)...)
	return append(out, p.identity(pod)...)
}

// apply returns a copy of an admitted t with the ServiceAccount and the token setting the policy
// imposes.
func (p DrainerPolicy) apply(t DrainerTemplate) DrainerTemplate {
	t.Spec = *t.Spec.DeepCopy()
	pod := &t.Spec.Template.Spec
	if pod.ServiceAccountName == "" {
		pod.ServiceAccountName = p.ServiceAccount
	}
	if !p.AllowServiceAccountToken {
		no := false
		pod.AutomountServiceAccountToken = &no
	}
	return t
}

// tagged appends the setting that would allow each problem.
func tagged(problems []string, setting string) []string {
	for i := range problems {
		problems[i] += " (" + setting + ")"
	}
	return problems
}

// identity checks the ServiceAccount and its token.
func (p DrainerPolicy) identity(pod *corev1.PodSpec) []string {
	var out []string
	for field, name := range map[string]string{"serviceAccountName": pod.ServiceAccountName, "serviceAccount": pod.DeprecatedServiceAccount} {
		if name != "" && name != p.ServiceAccount {
			out = append(out, fmt.Sprintf("%s %q: drainers run as %q (--drainer-service-account)", field, name, p.ServiceAccount))
		}
	}
	sort.Strings(out) // map order
	if !p.AllowServiceAccountToken && pod.AutomountServiceAccountToken != nil && *pod.AutomountServiceAccountToken {
		out = append(out, "automountServiceAccountToken true: drainers get no API token (--drainer-allow-service-account-token)")
	}
	return out
}

// restrictedVolumeTypes are the volume types of the PodSecurity restricted profile: none is
// mounted from the host's side.
var restrictedVolumeTypes = map[string]bool{"configMap": true, "csi": true, "downwardAPI": true, "emptyDir": true,
	"ephemeral": true, "persistentVolumeClaim": true, "projected": true, "secret": true}

// volumes checks the pod's volumes.
func (p DrainerPolicy) volumes(pod *corev1.PodSpec) []string {
	var out []string
	for _, v := range pod.Volumes {
		typ := volumeType(v.VolumeSource)
		switch {
		case v.HostPath != nil:
			if !p.AllowHostPath {
				out = append(out, fmt.Sprintf("hostPath volume %s (%s) (--drainer-allow-host-path)", v.Name, v.HostPath.Path))
			}
		case !restrictedVolumeTypes[typ]:
			if !p.AllowPrivileged {
				out = append(out, fmt.Sprintf("volume %s of type %s, mounted from the host's side (--drainer-allow-privileged)", v.Name, typ))
			}
		case v.Projected != nil && !p.AllowServiceAccountToken:
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					out = append(out, fmt.Sprintf("volume %s projects a ServiceAccount token (--drainer-allow-service-account-token)", v.Name))
					break
				}
			}
		}
	}
	return out
}

// volumeType returns the JSON name of the volume source set ("hostPath"), or "none".
func volumeType(src corev1.VolumeSource) string {
	raw, err := json.Marshal(src)
	var fields map[string]json.RawMessage
	if err != nil || json.Unmarshal(raw, &fields) != nil || len(fields) == 0 {
		return "none"
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

// hostNamespaces lists what in pod shares the host's namespaces.
func hostNamespaces(pod *corev1.PodSpec) []string {
	var out []string
	for name, on := range map[string]bool{"hostNetwork": pod.HostNetwork, "hostPID": pod.HostPID, "hostIPC": pod.HostIPC} {
		if on {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	if sc := pod.SecurityContext; sc != nil && sc.WindowsOptions != nil && isTrue(sc.WindowsOptions.HostProcess) {
		out = append(out, "pod is a Windows HostProcess")
	}
	for _, c := range allContainers(pod) {
		for _, port := range c.ports {
			if port.HostPort != 0 {
				out = append(out, fmt.Sprintf("%s uses hostPort %d", c.name, port.HostPort))
			}
		}
		if c.sc != nil && c.sc.WindowsOptions != nil && isTrue(c.sc.WindowsOptions.HostProcess) {
			out = append(out, c.name+" is a Windows HostProcess")
		}
	}
	return out
}

// privileges lists what in pod (and its template's annotations) asks for privileges beyond
// the PodSecurity baseline, or for more than no added capability.
func privileges(pod *corev1.PodSpec, annotations map[string]string) []string {
	var out []string
	if sc := pod.SecurityContext; sc != nil {
		out = append(out, profiles("pod", sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions)...)
		for _, s := range sc.Sysctls {
			out = append(out, "pod sets sysctl "+s.Name)
		}
	}
	for _, c := range allContainers(pod) {
		sc := c.sc
		if sc == nil {
			continue
		}
		if isTrue(sc.Privileged) {
			out = append(out, c.name+" is privileged")
		}
		if isTrue(sc.AllowPrivilegeEscalation) {
			out = append(out, c.name+" allows privilege escalation")
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			out = append(out, fmt.Sprintf("%s adds capabilities %v", c.name, sc.Capabilities.Add))
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			out = append(out, c.name+" has an unmasked /proc")
		}
		out = append(out, profiles(c.name, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions)...)
	}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		unconfined := strings.EqualFold(annotations[k], "unconfined")
		if unconfined && (strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) ||
			strings.HasPrefix(k, corev1.SeccompContainerAnnotationKeyPrefix) || k == corev1.SeccompPodAnnotationKey) {
			out = append(out, fmt.Sprintf("pod annotation %s=%s", k, annotations[k]))
		}
	}
	return out
}

// baselineSELinuxTypes are the SELinux types the PodSecurity baseline allows (or none).
var baselineSELinuxTypes = map[string]bool{"": true, "container_t": true, "container_init_t": true,
	"container_kvm_t": true, "container_engine_t": true}

// profiles lists the unconfined profiles and custom SELinux labels of one security context.
func profiles(who string, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile, selinux *corev1.SELinuxOptions) []string {
	var out []string
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		out = append(out, who+" runs seccomp Unconfined")
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
		out = append(out, who+" runs AppArmor Unconfined")
	}
	if selinux != nil && (selinux.User != "" || selinux.Role != "" || !baselineSELinuxTypes[selinux.Type]) {
		out = append(out, who+" sets an SELinux user, role or type")
	}
	return out
}

// containerFacts are the fields of a container, of any kind, that the policy looks at.
type containerFacts struct {
	name  string // "container sync", "init container setup"
	sc    *corev1.SecurityContext
	ports []corev1.ContainerPort
}

// allContainers returns pod's containers, init containers and ephemeral containers.
func allContainers(pod *corev1.PodSpec) []containerFacts {
	var out []containerFacts
	for _, c := range pod.InitContainers {
		out = append(out, containerFacts{"init container " + c.Name, c.SecurityContext, c.Ports})
	}
	for _, c := range pod.Containers {
		out = append(out, containerFacts{"container " + c.Name, c.SecurityContext, c.Ports})
	}
	for _, c := range pod.EphemeralContainers {
		out = append(out, containerFacts{"ephemeral container " + c.Name, c.SecurityContext, c.Ports})
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }
