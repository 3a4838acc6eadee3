package testenv

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// PowerOff makes a simulated node look powered off: kwok stops managing it and its Ready
// condition turns False now. Patches, not updates: the coordinator may be writing to the node
// at the same moment.
func PowerOff(ctx context.Context, client kubernetes.Interface, name string) error {
	nodes := client.CoreV1().Nodes()
	unmanaged := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, KwokNodeAnnotation)
	if _, err := nodes.Patch(ctx, name, types.MergePatchType, []byte(unmanaged), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("power off %s: %w", name, err)
	}
	down := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Shutdown","lastTransitionTime":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339))
	if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, []byte(down), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("power off %s: %w", name, err)
	}
	return nil
}

// PowerOn undoes PowerOff: kwok manages the node again and reports it Ready.
func PowerOn(ctx context.Context, client kubernetes.Interface, name string) error {
	managed := fmt.Sprintf(`{"metadata":{"annotations":{%q:"fake"}}}`, KwokNodeAnnotation)
	if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(managed), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("power on %s: %w", name, err)
	}
	return nil
}
