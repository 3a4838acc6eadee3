package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/internal/cli"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/coordinator"
)

const keepIntro = `Usage: edgedrainctl keep-cordoned NODE [--reason TEXT] [--clear] [--kubeconfig FILE] [--context NAME]

Asks edgedrain to leave NODE cordoned the next time it would uncordon it (when the node's drain
ends, its request withdrawn), instead of uncordoning it. kubectl cordon cannot ask that on a
node edgedrain has cordoned: it changes nothing there. This sets the annotation
edgedrain.io/keep-cordoned on the Node, its value the reason (shown in the node's status). When
the request ends, edgedrain removes that annotation and its own edgedrain.io/cordoned and leaves
the node cordoned: the cordon is yours, kubectl uncordon NODE ends it. The request is honoured
once: the node's next drain uncordons it as usual. --clear withdraws the request: edgedrain
uncordons the node as usual.

It writes the Kubernetes API, not the bus (the right to patch nodes, as kubectl cordon needs);
the kubeconfig is found as kubectl finds it (--kubeconfig, $KUBECONFIG, ~/.kube/config).

Exit status: 0 done, 1 the API could not be reached or refused, 2 bad arguments.`

// keepFieldManager names edgedrainctl's writes to Node objects (managedFields).
const keepFieldManager = "edgedrainctl"

func newKeepCmd(g *global) *cobra.Command {
	var reason string
	var clear bool
	cmd := &cobra.Command{
		Use:               "keep-cordoned NODE",
		Short:             "Ask edgedrain to leave a node cordoned when its drain ends",
		Long:              keepIntro,
		Args:              exactlyOneNode(2),
		ValidArgsFunction: completeNodes(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.bounded(cmd.Context())
			defer cancel()
			return keepCordoned(ctx, g.kube, args[0], reason, clear, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the node stays cordoned, shown in its status (default: when and how it was asked)")
	cmd.Flags().BoolVar(&clear, "clear", false, "withdraw the request: edgedrain uncordons the node as usual")
	return cmd
}

// keepCordoned runs edgedrainctl keep-cordoned; its error carries the exit status.
func keepCordoned(ctx context.Context, kube *genericclioptions.ConfigFlags, node, reason string, clear bool, stdout io.Writer) error {
	if err := validateKeep(node, reason, clear); err != nil {
		return cli.Exit(2, err)
	}
	if reason == "" {
		reason = "asked with edgedrainctl keep-cordoned at " + time.Now().UTC().Format(time.RFC3339)
	}
	rc, err := restConfig(kube, "edgedrainctl-keep-cordoned")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	msg, err := setKeepCordoned(ctx, client, node, reason, clear)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, msg)
	return nil
}

func validateKeep(node, reason string, clear bool) error {
	if err := nodedrain.ValidNodeName(node); err != nil {
		return fmt.Errorf("node %q: %w", node, err)
	}
	if clear && reason != "" {
		return errors.New("--reason and --clear: a cleared request has no reason")
	}
	if len(reason) > nodedrain.MaxContextLen {
		return fmt.Errorf("--reason is %d bytes, longer than the limit of %d", len(reason), nodedrain.MaxContextLen)
	}
	return nil
}

// setKeepCordoned sets (or, clear, removes) coordinator.KeepCordonedAnnotation on node and says
// what edgedrain will do, given the node's state.
func setKeepCordoned(ctx context.Context, client kubernetes.Interface, node, reason string, clear bool) (string, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("node %s: %w", node, err)
	}
	_, had := n.Annotations[coordinator.KeepCordonedAnnotation]
	if clear && !had {
		return fmt.Sprintf("%s: no request to keep it cordoned; nothing to clear", node), nil
	}
	var value any = reason
	if clear {
		value = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		coordinator.KeepCordonedAnnotation: value}}})
	if err != nil {
		return "", err
	}
	n, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: keepFieldManager})
	if err != nil {
		return "", fmt.Errorf("annotate node %s: %w", node, err)
	}
	return describeKeep(n, clear), nil
}

// describeKeep says what edgedrain will do with n's cordon now that the request is set or
// cleared.
func describeKeep(n *corev1.Node, clear bool) string {
	_, edgedrains := n.Annotations[coordinator.CordonAnnotation]
	switch {
	case clear:
		return fmt.Sprintf("%s: request to keep it cordoned withdrawn; edgedrain uncordons it as usual when its drain ends", n.Name)
	case edgedrains && n.Spec.Unschedulable:
		return fmt.Sprintf("%s: edgedrain will leave it cordoned when its drain ends (%s=%q); then the cordon is yours: "+
			"kubectl uncordon %s ends it", n.Name, coordinator.KeepCordonedAnnotation, n.Annotations[coordinator.KeepCordonedAnnotation], n.Name)
	case n.Spec.Unschedulable:
		return fmt.Sprintf("%s is cordoned, not by edgedrain, which never uncordons it; the request applies the next time "+
			"edgedrain cordons it and would uncordon it (--clear withdraws it)", n.Name)
	default:
		return fmt.Sprintf("%s is not cordoned; the request applies when edgedrain next cordons it (its next drain) and "+
			"would uncordon it (--clear withdraws it)", n.Name)
	}
}
