package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// AgentAudience is the audience of agents' projected tokens (busauth.DefaultAudience; not
// imported, to keep testenv free of the code under test).
const AgentAudience = "edgedrain"

// AgentPod creates ServiceAccount sa (if missing) and a pod named name using it, bound to node,
// as the agent DaemonSet would; kwok runs it.
func (c *Cluster) AgentPod(t testing.TB, ns, sa, name, node string) *corev1.Pod {
	t.Helper()
	pod, err := CreateAgentPod(context.Background(), c.Client, ns, sa, name, node)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// CreateAgentPod is AgentPod for callers without a testing.TB (the demo).
func CreateAgentPod(ctx context.Context, client kubernetes.Interface, ns, sa, name, node string) (*corev1.Pod, error) {
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: sa}, AutomountServiceAccountToken: new(bool)}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create ServiceAccount %s/%s: %w", ns, sa, err)
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "edgedrain-agent"}},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, AutomountServiceAccountToken: new(bool),
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "agent", Image: "edgedrain/agent:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create agent pod %s/%s: %w", ns, name, err)
	}
	return pod, nil
}

// PodToken asks the API server for a token of pod's ServiceAccount bound to pod, with audience
// and a lifetime of seconds (at least 600), as the kubelet does for a projected volume.
func (c *Cluster) PodToken(t testing.TB, pod *corev1.Pod, audience string, seconds int64) string {
	t.Helper()
	tok, err := RequestPodToken(context.Background(), c.Client, pod, audience, seconds)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// RequestPodToken is PodToken for callers without a testing.TB (the demo).
func RequestPodToken(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, audience string, seconds int64) (string, error) {
	return RequestToken(ctx, client, pod.Namespace, pod.Spec.ServiceAccountName, audience, seconds,
		&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
}

// RequestToken asks for a token of ServiceAccount ns/sa with audience, bound to bound (nil:
// to nothing).
func RequestToken(ctx context.Context, client kubernetes.Interface, ns, sa, audience string, seconds int64, bound *authenticationv1.BoundObjectReference) (string, error) {
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: &seconds, BoundObjectRef: bound,
		}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token request for %s/%s: %w", ns, sa, err)
	}
	return tr.Status.Token, nil
}

// Resign returns token with its claims changed by edit and signed again with the API server's
// own service account key: a token the API server itself could have issued (e.g. one that
// expires in seconds, or has expired, which TokenRequest cannot make).
func (c *Cluster) Resign(t testing.TB, token string, edit func(claims map[string]any)) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("JWT claims: %v", err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatalf("JWT claims: %v", err)
	}
	edit(claims)
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)
	keyPEM, err := os.ReadFile(filepath.Join(c.Dir, "pki", "sa.key"))
	if err != nil {
		t.Fatalf("service account key: %v", err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatalf("service account key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf("service account key: %v", err)
	}
	digest := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64) // ES256: r and s, 32 bytes each, big-endian
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// WriteToken writes token to a new file in dir and returns its path.
func WriteToken(t testing.TB, dir, token string) string {
	t.Helper()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
		t.Fatalf("write token: %v", err)
	}
	return path
}

// CreateAgentDaemonSet creates ServiceAccount sa (if missing) and a DaemonSet of agent pods
// using it on the nodes of group, as deploy/ does: its pods are bound to their nodes, and a drain
// leaves them (DaemonSet pods), so their tokens stay valid through a drain.
func CreateAgentDaemonSet(ctx context.Context, client kubernetes.Interface, ns, sa, group string) error {
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: sa}, AutomountServiceAccountToken: new(bool)}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", ns, sa, err)
	}
	labels := map[string]string{"app": "edgedrain-agent"}
	_, err = client.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "edgedrain-agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: new(bool),
					NodeSelector: map[string]string{GroupLabel: group},
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:   []corev1.Container{{Name: "agent", Image: "edgedrain/agent:test"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create agent DaemonSet in %s: %w", ns, err)
	}
	return nil
}

// AgentPodOn waits for the agent DaemonSet's pod on node and returns it.
func AgentPodOn(ctx context.Context, client kubernetes.Interface, ns, node string, timeout time.Duration) (*corev1.Pod, error) {
	var found *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=edgedrain-agent", FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		found = &pods.Items[0]
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no agent pod on node %s: %w", node, err)
	}
	return found, nil
}
