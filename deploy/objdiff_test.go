package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// Comparing rendered manifests object by object: the chart's against kustomize's.

// The chart renders the same objects as kustomize: for the defaults the base (whose Namespace
// Helm leaves to --create-namespace), for external NATS the overlay, for each feature and for
// rebootMethod=command the base with nsenter-reboot and the agent on the -debian image. Helm's own
// labels and annotations aside, every object must be equal; lists of named items (env, volumes,
// ports, ...) are matched by name.
func TestHelmChartMatchesKustomize(t *testing.T) {
	c := testenv.RequireCluster(t, cluster)
	for _, tc := range chartCases() {
		if tc.kust == nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			want := objectsByKey(t, tc.kust(t, c))
			delete(want, "Namespace/"+namespace)
			got := objectsByKey(t, helmTemplate(t, tc.set...))
			assert.Equal(t, sortedKeys(want), sortedKeys(got), "the chart and kustomize render different objects")
			for _, key := range sortedKeys(want) {
				if g, ok := got[key]; ok {
					if diffs := differences("", want[key], g); len(diffs) > 0 {
						t.Errorf("%s differs between kustomize and the chart:\n%s", key, strings.Join(diffs, "\n"))
					}
				}
			}
		})
	}
}

// kustomizeDebianAgent renders the base with nsenter-reboot and the agent on the -debian variant
// of edgedrain's image (which has a shell), the chart's default tag of agent.commandImage.
func kustomizeDebianAgent(t *testing.T, c *testenv.Cluster) []byte {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	write("all.yaml", string(withComponent(t, c, "base", "nsenter-reboot")))
	write("kustomization.yaml", `resources: [all.yaml]
patches:
- target: {kind: DaemonSet, name: edgedrain-agent}
  patch: '[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "ghcr.io/edgedrain/edgedrain:v0.1.0-debian"}]'
`)
	return kubectl(t, c, nil, "kustomize", dir)
}

// helmLabels are the labels the chart adds to what kustomize renders.
var helmLabels = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

// helmAnnotations are the annotations, meaningful to Helm only, that the chart adds: the hook
// annotations make the Job edgedrain-keys and its RBAC run before install and upgrade, where
// kustomize applies them with the rest (TestKeysHelmHooks checks them).
var helmAnnotations = []string{"helm.sh/resource-policy", "helm.sh/hook", "helm.sh/hook-weight",
	"helm.sh/hook-delete-policy", "helm.sh/hook-output-log-policy"}

// objectsByKey decodes rendered manifests into normalised objects keyed by kind/name.
func objectsByKey(t *testing.T, rendered []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range documents(t, rendered) {
		if labels := nested(doc, "metadata", "labels"); labels != nil {
			for _, l := range helmLabels {
				delete(labels, l)
			}
			if len(labels) == 0 {
				delete(nested(doc, "metadata"), "labels")
			}
		}
		if annotations := nested(doc, "metadata", "annotations"); annotations != nil {
			for _, a := range helmAnnotations {
				delete(annotations, a)
			}
			if len(annotations) == 0 {
				delete(nested(doc, "metadata"), "annotations")
			}
		}
		key := objectKey(doc)
		require.NotContains(t, out, key, "two objects %s", key)
		out[key] = doc
	}
	return out
}

func objectKey(doc map[string]any) string {
	return fmt.Sprintf("%v/%v", doc["kind"], nested(doc, "metadata")["name"])
}

// nested returns the map at path in obj, or nil.
func nested(obj map[string]any, path ...string) map[string]any {
	for _, p := range path {
		next, _ := obj[p].(map[string]any)
		if next == nil {
			return nil
		}
		obj = next
	}
	return obj
}

// differences lists, one path a line, where want (kustomize's) and got (the chart's) differ.
// Lists whose items all have distinct names (containers, env, ports, volumes, volumeMounts,
// subjects) are matched by name: their order carries no meaning, and kustomize's patches
// reorder them.
func differences(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		var out []string
		for _, k := range sortedKeys(union(w, g)) {
			wv, inWant := w[k]
			gv, inGot := g[k]
			switch {
			case !inWant:
				out = append(out, fmt.Sprintf("%s.%s: only in the chart: %s", path, k, show(gv)))
			case !inGot:
				out = append(out, fmt.Sprintf("%s.%s: only in kustomize: %s", path, k, show(wv)))
			default:
				out = append(out, differences(path+"."+k, wv, gv)...)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok {
			break
		}
		if wn, gn := byName(w), byName(g); wn != nil && gn != nil {
			var out []string
			for _, name := range sortedKeys(union(wn, gn)) {
				wv, inWant := wn[name]
				gv, inGot := gn[name]
				p := fmt.Sprintf("%s[%s]", path, name)
				switch {
				case !inWant:
					out = append(out, fmt.Sprintf("%s: only in the chart: %s", p, show(gv)))
				case !inGot:
					out = append(out, fmt.Sprintf("%s: only in kustomize: %s", p, show(wv)))
				default:
					out = append(out, differences(p, wv, gv)...)
				}
			}
			return out
		}
		if len(w) == len(g) {
			var out []string
			for i := range w {
				out = append(out, differences(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
			}
			return out
		}
	default:
		if reflect.DeepEqual(want, got) {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: kustomize %s, the chart %s", path, show(want), show(got))}
}

// byName indexes a list by its items' names, or returns nil unless every item is a map with a
// name of its own.
func byName(list []any) map[string]any {
	out := map[string]any{}
	for _, item := range list {
		m, _ := item.(map[string]any)
		name, ok := m["name"].(string)
		if _, dup := out[name]; !ok || dup {
			return nil
		}
		out[name] = m
	}
	return out
}

func union(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func show(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
