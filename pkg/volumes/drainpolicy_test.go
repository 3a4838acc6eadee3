package volumes

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
)

// podTemplate is a drainer template whose pod spec has fields (JSON members, without braces)
// besides one container "sync" with container fields cfields.
func podTemplate(fields, cfields string) string {
	ctr := `{"name":"sync","image":"registry.invalid/sync:1"` + prefixComma(cfields) + `}`
	return `{"template":{"spec":{"containers":[` + ctr + `]` + prefixComma(fields) + `}}}`
}

func prefixComma(s string) string {
	if s == "" {
		return ""
	}
	return "," + s
}

func TestDrainerPolicyAdmit(t *testing.T) {
	strict := DefaultDrainerPolicy()
	tests := []struct {
		name   string
		tmpl   string
		policy func(*DrainerPolicy)
		want   []string // substrings of the refusal; none: admitted
	}{
		{name: "plain", tmpl: jobSpecTemplate},
		{name: "privileged", tmpl: podTemplate("", `"securityContext":{"privileged":true}`),
			want: []string{"container sync is privileged (--drainer-allow-privileged)"}},
		{name: "privileged init container", tmpl: podTemplate(`"initContainers":[{"name":"setup","image":"i","securityContext":{"privileged":true}}]`, ""),
			want: []string{"init container setup is privileged"}},
		{name: "privilege escalation", tmpl: podTemplate("", `"securityContext":{"allowPrivilegeEscalation":true}`),
			want: []string{"container sync allows privilege escalation"}},
		{name: "added capability", tmpl: podTemplate("", `"securityContext":{"capabilities":{"add":["SYS_ADMIN"]}}`),
			want: []string{"container sync adds capabilities [SYS_ADMIN]"}},
		{name: "dropped capabilities", tmpl: podTemplate("", `"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}`)},
		{name: "unmasked proc", tmpl: podTemplate("", `"securityContext":{"procMount":"Unmasked"}`),
			want: []string{"container sync has an unmasked /proc"}},
		{name: "seccomp unconfined", tmpl: podTemplate(`"securityContext":{"seccompProfile":{"type":"Unconfined"}}`, ""),
			want: []string{"pod runs seccomp Unconfined"}},
		{name: "apparmor unconfined", tmpl: podTemplate("", `"securityContext":{"appArmorProfile":{"type":"Unconfined"}}`),
			want: []string{"container sync runs AppArmor Unconfined"}},
		{name: "apparmor annotation", tmpl: `{"template":{"metadata":{"annotations":{"container.apparmor.security.beta.kubernetes.io/sync":"unconfined"}},` +
			`"spec":{"containers":[{"name":"sync","image":"i"}]}}}`,
			want: []string{"pod annotation container.apparmor.security.beta.kubernetes.io/sync=unconfined"}},
		{name: "selinux spc_t", tmpl: podTemplate("", `"securityContext":{"seLinuxOptions":{"type":"spc_t"}}`),
			want: []string{"container sync sets an SELinux user, role or type"}},
		{name: "selinux container_t", tmpl: podTemplate("", `"securityContext":{"seLinuxOptions":{"type":"container_t","level":"s0:c1"}}`)},
		{name: "sysctl", tmpl: podTemplate(`"securityContext":{"sysctls":[{"name":"kernel.msgmax","value":"1"}]}`, ""),
			want: []string{"pod sets sysctl kernel.msgmax"}},
		{name: "hostPath", tmpl: podTemplate(`"volumes":[{"name":"root","hostPath":{"path":"/"}}]`, ""),
			want: []string{"hostPath volume root (/) (--drainer-allow-host-path)"}},
		{name: "nfs", tmpl: podTemplate(`"volumes":[{"name":"share","nfs":{"server":"nfs.invalid","path":"/x"}}]`, ""),
			want: []string{"volume share of type nfs, mounted from the host's side (--drainer-allow-privileged)"}},
		{name: "gitRepo", tmpl: podTemplate(`"volumes":[{"name":"src","gitRepo":{"repository":"https://git.invalid/x"}}]`, ""),
			want: []string{"volume src of type gitRepo"}},
		{name: "restricted volume types", tmpl: podTemplate(`"volumes":[{"name":"a","emptyDir":{}},{"name":"b","configMap":{"name":"c"}},`+
			`{"name":"c","secret":{"secretName":"s"}},{"name":"d","persistentVolumeClaim":{"claimName":"other"}},`+
			`{"name":"e","projected":{"sources":[{"configMap":{"name":"c"}}]}}]`, "")},
		{name: "projected token", tmpl: podTemplate(`"volumes":[{"name":"tok","projected":{"sources":[{"serviceAccountToken":{"path":"t"}}]}}]`, ""),
			want: []string{"volume tok projects a ServiceAccount token (--drainer-allow-service-account-token)"}},
		{name: "projected token allowed", tmpl: podTemplate(`"volumes":[{"name":"tok","projected":{"sources":[{"serviceAccountToken":{"path":"t"}}]}}]`, ""),
			policy: func(p *DrainerPolicy) { p.AllowServiceAccountToken = true }},
		{name: "hostNetwork", tmpl: podTemplate(`"hostNetwork":true`, ""),
			want: []string{"hostNetwork (--drainer-allow-host-namespaces)"}},
		{name: "hostPID and hostIPC", tmpl: podTemplate(`"hostPID":true,"hostIPC":true`, ""),
			want: []string{"hostIPC (--drainer-allow-host-namespaces)", "hostPID (--drainer-allow-host-namespaces)"}},
		{name: "hostPort", tmpl: podTemplate("", `"ports":[{"containerPort":80,"hostPort":80}]`),
			want: []string{"container sync uses hostPort 80"}},
		{name: "another ServiceAccount", tmpl: podTemplate(`"serviceAccountName":"admin"`, ""),
			want: []string{`serviceAccountName "admin": drainers run as "default" (--drainer-service-account)`}},
		{name: "deprecated serviceAccount", tmpl: podTemplate(`"serviceAccount":"admin"`, ""),
			want: []string{`serviceAccount "admin": drainers run as "default"`}},
		{name: "the configured ServiceAccount", tmpl: podTemplate(`"serviceAccountName":"default"`, "")},
		{name: "token asked for", tmpl: podTemplate(`"automountServiceAccountToken":true`, ""),
			want: []string{"automountServiceAccountToken true: drainers get no API token (--drainer-allow-service-account-token)"}},
		{name: "token allowed", tmpl: podTemplate(`"automountServiceAccountToken":true`, ""),
			policy: func(p *DrainerPolicy) { p.AllowServiceAccountToken = true }},
		{name: "privileged allowed", tmpl: podTemplate(`"volumes":[{"name":"share","nfs":{"server":"s","path":"/"}}]`, `"securityContext":{"privileged":true,"capabilities":{"add":["ALL"]}}`),
			policy: func(p *DrainerPolicy) { p.AllowPrivileged = true }},
		{name: "privileged allowed is not hostPath", tmpl: podTemplate(`"volumes":[{"name":"root","hostPath":{"path":"/"}}]`, `"securityContext":{"privileged":true}`),
			policy: func(p *DrainerPolicy) { p.AllowPrivileged = true }, want: []string{"hostPath volume root"}},
		{name: "hostPath allowed", tmpl: podTemplate(`"volumes":[{"name":"root","hostPath":{"path":"/"}}]`, ""),
			policy: func(p *DrainerPolicy) { p.AllowHostPath = true }},
		{name: "host namespaces allowed", tmpl: podTemplate(`"hostNetwork":true,"hostPID":true`, ""),
			policy: func(p *DrainerPolicy) { p.AllowHostNamespaces = true }},
		{name: "every problem named", tmpl: podTemplate(`"hostNetwork":true,"serviceAccountName":"admin","volumes":[{"name":"root","hostPath":{"path":"/"}}]`,
			`"securityContext":{"privileged":true}`),
			want: []string{"hostNetwork", "container sync is privileged", "hostPath volume root", `serviceAccountName "admin"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ParseDrainerTemplate(tt.tmpl)
			require.NoError(t, err)
			p := strict
			if tt.policy != nil {
				tt.policy(&p)
			}
			got, err := p.Admit(tmpl)
			if len(tt.want) > 0 {
				require.ErrorIs(t, err, ErrTemplateRefused)
				for _, w := range tt.want {
					assert.Contains(t, err.Error(), w)
				}
				assert.Equal(t, len(tt.want), strings.Count(err.Error(), ";")+1, "one reason per problem: %v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "default", got.Spec.Template.Spec.ServiceAccountName)
		})
	}
}

func TestDrainerPolicyAdmitSetsTheIdentity(t *testing.T) {
	tmpl, err := ParseDrainerTemplate(jobSpecTemplate)
	require.NoError(t, err)
	p := DefaultDrainerPolicy()
	p.ServiceAccount = "drainer"
	got, err := p.Admit(tmpl)
	require.NoError(t, err)
	pod := got.Spec.Template.Spec
	assert.Equal(t, "drainer", pod.ServiceAccountName, "a template naming none runs as the configured one")
	require.NotNil(t, pod.AutomountServiceAccountToken)
	assert.False(t, *pod.AutomountServiceAccountToken, "no API token unless allowed")
	assert.Empty(t, tmpl.Spec.Template.Spec.ServiceAccountName, "the parsed template is not changed")
	assert.Nil(t, tmpl.Spec.Template.Spec.AutomountServiceAccountToken)

	p.AllowServiceAccountToken = true
	got, err = p.Admit(tmpl)
	require.NoError(t, err)
	assert.Nil(t, got.Spec.Template.Spec.AutomountServiceAccountToken, "allowed: the ServiceAccount's own setting decides")

	other, err := ParseDrainerTemplate(podTemplate(`"serviceAccountName":"default"`, ""))
	require.NoError(t, err)
	_, err = p.Admit(other)
	require.ErrorIs(t, err, ErrTemplateRefused, "only the configured ServiceAccount, even the namespace's default")
}

func TestDrainerPolicyNamespaces(t *testing.T) {
	allowed := labels.Set{"edgedrain.io/drainers": "allowed"}
	other := labels.Set{"team": "a"}
	tests := []struct {
		name       string
		namespaces []string
		selector   string
		labels     labels.Labels
		want       bool
	}{
		{name: "labelled", selector: DefaultDrainerNamespaceSelector, labels: allowed, want: true},
		{name: "not labelled", selector: DefaultDrainerNamespaceSelector, labels: other},
		{name: "unknown namespace", selector: "!team"},
		{name: "listed", namespaces: []string{"x", "shop"}, labels: other, want: true},
		{name: "not listed", namespaces: []string{"x"}, labels: allowed},
		{name: "every namespace", namespaces: []string{AllNamespaces}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DrainerPolicy{Namespaces: tt.namespaces, NamespaceSelector: tt.selector, ServiceAccount: "default"}
			sel, err := p.selector()
			require.NoError(t, err)
			ok, why := p.namespaceAllowed("shop", tt.labels, sel)
			assert.Equal(t, tt.want, ok)
			if !tt.want {
				assert.Contains(t, why, "namespace shop is not allowed to run drainers (--drainer-namespaces")
			}
		})
	}
}

func TestDrainerPolicyValidate(t *testing.T) {
	require.NoError(t, DefaultDrainerPolicy().validate())
	bad := DrainerPolicy{Namespaces: []string{"ok", "Not_A_Name"}, NamespaceSelector: "a in (", ServiceAccount: ""}
	err := bad.validate()
	require.Error(t, err)
	for _, want := range []string{`drainer namespace "Not_A_Name"`, `drainer namespace selector "a in ("`, `drainer ServiceAccount ""`} {
		assert.Contains(t, err.Error(), want)
	}
	cfg := DefaultConfig()
	cfg.Drainers.ServiceAccount = "UPPER"
	require.ErrorIs(t, cfg.ValidateSettings(), ErrInvalidConfig)
}
