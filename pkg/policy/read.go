package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// Read reads the policy from the ConfigMap namespace/name once (key DefaultKey), for tools
// that ask without watching (edgedrainctl check): a missing ConfigMap is the empty policy; an
// invalid one is an error.
func Read(ctx context.Context, client kubernetes.Interface, namespace, name string) (*Config, error) {
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the policy ConfigMap %s/%s: %w", namespace, name, err)
	}
	data, ok := cm.Data[DefaultKey]
	if !ok {
		return nil, fmt.Errorf("policy ConfigMap %s/%s: no data key %s: %w", namespace, name, DefaultKey, ErrMissingKey)
	}
	c, err := Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("policy ConfigMap %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// NodeBlockers returns what c's blockers say about node now: pods on it matching the pod
// selector, and (prom non-nil) the firing alerts and non-empty queries. cached lists the pods
// from the API server's watch cache. Any error is returned: callers fail closed.
func NodeBlockers(ctx context.Context, client kubernetes.Interface, c *Config, prom *PromChecker, node string, cached bool) ([]nodedrain.Blocker, error) {
	var out []nodedrain.Blocker
	if sel := c.Blockers.PodSelector; sel != nil {
		opts := metav1.ListOptions{LabelSelector: sel.String(), FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()}
		if cached {
			opts.ResourceVersion = "0"
		}
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods on %s matching the blocking pod selector: %w", node, err)
		}
		pods := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			pods[i] = &list.Items[i]
		}
		out = PodBlockers(pods, node, sel, c.Blockers.PodSelectorText)
	}
	if prom != nil {
		alerts, err := prom.Check(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, alerts...)
	}
	return out, nil
}
