package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/busauth"
)

const agentNamespace = "edgedrain-system"

// createIdentities gives each agent what the DaemonSet gives it on a real cluster: a pod on its
// node and a projected token of edgedrain's audience bound to that pod (written to a file, as
// the kubelet does); and the demo itself an operator password for the bus.
func (d *demo) createIdentities(ctx context.Context) error {
	client := d.c.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := testenv.CreateAgentDaemonSet(ctx, client, agentNamespace, "edgedrain-agent", group); err != nil {
		return err
	}
	for _, n := range nodeNames {
		pod, err := testenv.AgentPodOn(ctx, client, agentNamespace, n, time.Minute)
		if err != nil {
			return err
		}
		token, err := testenv.RequestPodToken(ctx, client, pod, busauth.DefaultAudience, 3600)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(d.nodePath(n, "token")), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(d.nodePath(n, "token"), []byte(token), 0o600); err != nil {
			return err
		}
	}
	password, err := busauth.NewPassword()
	if err != nil {
		return err
	}
	d.say("agents identify with pod-bound tokens of the edgedrain-agent ServiceAccount; anonymous bus clients are refused")
	return os.WriteFile(d.operatorPasswordFile(), []byte(password), 0o600)
}

func (d *demo) operatorPasswordFile() string { return filepath.Join(d.dir, "operator-password") }
