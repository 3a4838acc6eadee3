// Package deploy_test checks the manifests against a real API server: every manifest passes a
// server-side dry run, the coordinator's RBAC is enough for its own drain flow and no more, and
// the NetworkPolicy admits the pods it names.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
	"github.com/edgedrain/edgedrain/pkg/volumes"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) { testenv.Main(m, &cluster) }

const namespace = "edgedrain-system"

func kubectl(t *testing.T, c *testenv.Cluster, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kubectl %v: %s", args, stderr.String())
	return out
}

func ensureNamespace(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

func TestManifestsPassServerSideDryRun(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	ensureNamespace(t, c) // a dry run does not create the namespace the other objects go in
	renders := map[string]func() []byte{
		"base":                          func() []byte { return kubectl(t, c, nil, "kustomize", "base") },
		"overlays/external-nats":        func() []byte { return kubectl(t, c, nil, "kustomize", "overlays/external-nats") },
		"base+orphan-deletion":          func() []byte { return withComponent(t, c, "base", orphanDeletion) },
		"external-nats+orphan-deletion": func() []byte { return withComponent(t, c, "overlays/external-nats", orphanDeletion) },
		"base+operator-access":          func() []byte { return withComponent(t, c, "base", "operator-access") },
		"base+decommission":             func() []byte { return withComponent(t, c, "base", "decommission") },
		"base+longhorn-hold":            func() []byte { return withComponent(t, c, "base", "longhorn-hold") },
		"base+nsenter-reboot":           func() []byte { return withComponent(t, c, "base", "nsenter-reboot") },
	}
	for name, render := range renders {
		t.Run(name, func(t *testing.T) {
			rendered := render()
			require.Contains(t, string(rendered), "kind: Deployment")
			out := kubectl(t, c, rendered, "apply", "--dry-run=server", "-f", "-")
			assert.Contains(t, string(out), "deployment.apps/edgedrain-coordinator")
			assert.Contains(t, string(out), "daemonset.apps/edgedrain-agent")
			assert.Contains(t, string(out), "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator")
			assert.Contains(t, string(out), "networkpolicy.networking.k8s.io/edgedrain-coordinator")
			// The status-signing key: the Job that creates it, with its own RBAC (keys.yaml).
			assert.Contains(t, string(out), "job.batch/edgedrain-keys")
			assert.Contains(t, string(out), "role.rbac.authorization.k8s.io/edgedrain-keys")
			assert.Contains(t, string(rendered), "EDGEDRAIN_SIGNING_KEY")
			assert.Contains(t, string(rendered), "EDGEDRAIN_TRUSTED_KEYS")
			if strings.Contains(name, orphanDeletion) {
				assert.Contains(t, string(out), "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator-orphan-deletion")
				assert.Contains(t, string(rendered), "EDGEDRAIN_DELETE_DRAINED_ORPHANS")
			} else {
				assert.NotContains(t, string(rendered), "orphan-deletion")
			}
			if strings.Contains(name, "decommission") {
				assert.Contains(t, string(out), "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator-decommission")
				assert.Contains(t, string(rendered), "EDGEDRAIN_ALLOW_DECOMMISSION")
			} else {
				assert.NotContains(t, string(rendered), "decommission")
			}
			if strings.Contains(name, "longhorn-hold") {
				assert.Contains(t, string(out), "clusterrole.rbac.authorization.k8s.io/edgedrain-coordinator-longhorn-hold")
				assert.Contains(t, string(rendered), "EDGEDRAIN_LONGHORN_HOLD_REPLICAS")
			} else {
				assert.NotContains(t, string(rendered), "longhorn-hold")
			}
			// Bus identity (DESIGN §10): agents carry a pod-bound token of edgedrain's audience
			// and no credentials; the coordinator may review tokens.
			assert.Contains(t, string(rendered), "audience: edgedrain")
			assert.Contains(t, string(rendered), "EDGEDRAIN_NATS_TOKEN_FILE")
			assert.Contains(t, string(rendered), "tokenreviews")
			assert.NotContains(t, string(rendered), "EDGEDRAIN_NATS_CREDS")
			assert.Equal(t, strings.Contains(name, "operator-access"), strings.Contains(string(rendered), "EDGEDRAIN_OPERATOR_PASSWORD_FILE"))
			assert.Equal(t, strings.Contains(name, "external-nats"), strings.Contains(string(rendered), "EDGEDRAIN_AUTH_CALLOUT_ISSUER_SEED_FILE"))
		})
	}
}

// applyRBAC applies the RBAC objects (roles and bindings) of rendered manifests for real.
func applyRBAC(t *testing.T, c *testenv.Cluster, rendered []byte) {
	t.Helper()
	for _, doc := range documents(t, rendered) {
		switch doc["kind"] {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			raw, err := json.Marshal(doc)
			require.NoError(t, err)
			kubectl(t, c, raw, "apply", "-f", "-")
		}
	}
}

// documents splits rendered manifests into objects.
func documents(t *testing.T, rendered []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			require.ErrorIs(t, err, io.EOF)
			return out
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
}

// asCoordinator applies the base's RBAC and returns the cluster, and a client configuration and
// a client with the coordinator ServiceAccount's identity (and so only its RBAC).
func asCoordinator(t *testing.T) (*testenv.Cluster, *rest.Config, kubernetes.Interface) {
	t.Helper()
	c := testenv.RequireCluster(t, cluster)
	ensureNamespace(t, c)
	applyRBAC(t, c, kubectl(t, c, nil, "kustomize", "base"))
	rc, err := c.UserConfig("system:serviceaccount:"+namespace+":edgedrain-coordinator",
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	return c, rc, client
}

// The coordinator, running with exactly the base's RBAC (as its ServiceAccount), drains a node,
// runs a drainer Job, records Events, holds its Lease and uncordons.
func TestCoordinatorRBACIsEnough(t *testing.T) {
	c, rc, client := asCoordinator(t)
	ctx := context.Background()

	nodes := c.AddNodes(t, "rbac-deploy", 2)
	ns := c.Namespace(t)
	c.CreateDeployment(t, testenv.DeploymentSpec{Namespace: ns, Name: "web", Group: "rbac-deploy", Replicas: 4})
	require.Eventually(t, func() bool {
		pods, err := c.RunningPods(ctx, ns, "app=web")
		return err == nil && len(pods) == 4
	}, time.Minute, 50*time.Millisecond)

	target := nodes[0]
	// A node-local PVC with a drainer template in a namespace opted in: its drainer Job is
	// created, watched and removed, and the PVC labelled, with the same permissions.
	pvc := localPVCWithDrainer(t, c, ns, target)

	srv := testenv.StartNATS(t)
	_, js := testenv.ConnectNATS(t, srv.ClientURL())
	// The volume gate's informers (Longhorn objects, PVs, PVCs, StatefulSets, Jobs) must sync
	// with the same permissions.
	dyn, err := dynamic.NewForConfig(rc)
	require.NoError(t, err)
	vcfg := volumes.DefaultConfig()
	vcfg.Client, vcfg.Dynamic, vcfg.SyncTimeout = client, dyn, 30*time.Second
	gate, err := volumes.New(vcfg)
	require.NoError(t, err)
	require.NoError(t, gate.Start(ctx), "the volume gate cannot start with the coordinator's RBAC")
	cfg := coordinator.DefaultConfig()
	cfg.Signer, cfg.TrustedKeys = testenv.Signer(), testenv.TrustedKeys
	cfg.Client, cfg.JetStream, cfg.NodeSelector, cfg.Gate = client, js, testenv.GroupLabel+"=rbac-deploy", gate
	cfg.Limits.CordonAttempts = 2
	engine, err := coordinator.NewEngine(cfg)
	require.NoError(t, err)
	lc := coordinator.DefaultLeaderConfig()
	lc.Client, lc.Namespace, lc.Identity = client, namespace, "rbac-test"
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- coordinator.RunWithLeaderElection(runCtx, lc, func(ctx context.Context) error {
			go func() { _ = gate.Run(ctx) }()
			return engine.Run(ctx)
		})
	}()
	t.Cleanup(func() { stop(); <-done })

	requests, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.RequestsBucket}, nodedrain.RequestCodec{})
	require.NoError(t, err)
	statuses, err := pubsub.OpenBucket(ctx, js, pubsub.BucketConfig{Name: nodedrain.StatusBucket, WriterMark: nodedrain.StatusWriterMark}, nodedrain.StatusCodec{})
	require.NoError(t, err)
	waitStatus := func(node string, ok func(nodedrain.NodeDrainStatus) bool) nodedrain.NodeDrainStatus {
		var st nodedrain.NodeDrainStatus
		require.Eventually(t, func() bool {
			st, _, err = statuses.Get(ctx, node)
			return err == nil && ok(st)
		}, time.Minute, 50*time.Millisecond, "last status: %s %q", st.Status, st.Message)
		return st
	}
	_, err = requests.Publish(ctx, target, nodedrain.NodeDrainRequest{Node: target, RequestID: "r1", RequestedAt: time.Now(),
		RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
	require.NoError(t, err)
	waitStatus(target, func(s nodedrain.NodeDrainStatus) bool { return s.Status == nodedrain.StatusComplete })
	drained, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, volumes.DrainStatusDrained, drained.Labels[volumes.DrainStatusLabel], "COMPLETE came after the drainer")
	require.Eventually(t, func() bool {
		evs, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + target})
		return err == nil && len(evs.Items) > 0
	}, 10*time.Second, 50*time.Millisecond, "events not recorded with the coordinator's permissions")
	require.NoError(t, requests.Unpublish(ctx, target))
	waitStatus(target, func(s nodedrain.NodeDrainStatus) bool {
		return s.Status == nodedrain.StatusNotRequested && !s.CordonedByUs
	})
	node, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, node.Spec.Unschedulable)
	lease, err := c.Client.CoordinationV1().Leases(namespace).Get(ctx, lc.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "rbac-test", *lease.Spec.HolderIdentity)

	// Nothing beyond the documented verbs: the role cannot, e.g., delete pods.
	err = client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "the coordinator's role allows deleting pods: %v", err)
}

// An overlay that puts edgedrain in another namespace moves everything there: no object, binding
// subject or agent setting still names edgedrain-system (the agents reach the embedded bus's
// Service by its short name, in their own namespace).
func TestKustomizeIntoAnotherNamespace(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	tmp := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		require.NoError(t, err)
		r, err := filepath.Rel(tmp, abs)
		require.NoError(t, err)
		return r
	}
	k := "namespace: maintenance\nresources:\n- " + rel("base") + "\ncomponents:\n- " + rel("components/decommission") +
		"\n- " + rel("components/orphan-deletion") + "\n- " + rel("components/operator-access") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o600))
	rendered := kubectl(t, c, nil, "kustomize", tmp)
	assert.NotContains(t, string(rendered), "edgedrain-system")
	assert.Contains(t, string(rendered), "nats://edgedrain-nats:4222")
}
