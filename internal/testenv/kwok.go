package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// KwokNodeAnnotation marks the nodes kwok (the simulated kubelet) manages; its value is "fake".
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// TerminateAfterAnnotation on a pod overrides how long the simulated kubelet takes to finish the
// pod's deletion (a Go duration such as "500ms"). Without it a deleted pod goes away when its
// grace period ends (metadata.deletionTimestamp), as a pod whose process honours SIGTERM late.
const TerminateAfterAnnotation = "edgedrain.test/terminate-after"

// podDeleteStage finishes a pod's deletion after its grace period, or after the time named by
// TerminateAfterAnnotation, so drains take the time they take on a real node.
const podDeleteStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: edgedrain-pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + TerminateAfterAnnotation + `"] // .metadata.deletionTimestamp'
  next:
    delete: true
`

// writeKwokStages writes kwok's configuration: its own node and pod stages from the cache
// (copied from its module by hack/cluster-bins.sh) followed by ours.
func writeKwokStages(binDir, dir string) (string, error) {
	stageDir := filepath.Join(binDir, "kwok-stages")
	names, err := filepath.Glob(filepath.Join(stageDir, "*.yaml"))
	if err != nil || len(names) == 0 {
		return "", fmt.Errorf("no kwok stages in %s (run hack/cluster-bins.sh): %v", stageDir, err)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("read kwok stage: %w", err)
		}
		b.Write(bytes.TrimSpace(data))
		b.WriteString("\n---\n")
	}
	b.WriteString(podDeleteStage)
	path := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("write kwok config: %w", err)
	}
	return path, nil
}
