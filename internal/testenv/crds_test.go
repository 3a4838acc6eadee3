package testenv

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The project's minimal Longhorn CRDs (testdata/longhorn-crds.yaml) are a faithful subset of
// Longhorn's real ones, those of each release provided beside the project
// (../shared/testdata/longhorn): every field they type has the same type wherever a release has
// it, and each is in at least one release (a release may lack one the other has: Longhorn 1.7 has
// no engine fromReplicaAddressList, 1.12 no replica status.evictionRequested; the gate reads
// either). A field the gate reads that Longhorn renamed or retyped would otherwise pass every
// test here and fail on a real cluster.
func TestLonghornSchemaIsASubsetOfTheRealOne(t *testing.T) {
	root, err := RepoRoot()
	require.NoError(t, err)
	ours := crdsByName(t, longhornCRDs)
	releases := []string{"v1.12.1", "v1.7.3"}
	missing := map[string][]string{} // path -> the releases without it
	for _, release := range releases {
		path := filepath.Join(root, "..", "shared", "testdata", "longhorn", "crds-"+release+".yaml")
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("Longhorn's real CRDs are not beside the project (%s): the project's own schema is not checked against them", path)
		}
		require.NoError(t, err)
		real := crdsByName(t, data)
		for _, name := range slices.Sorted(maps.Keys(ours)) {
			theirs, ok := real[name]
			if !assert.True(t, ok, "Longhorn %s has no CRD %s", release, name) {
				continue
			}
			gone, retyped := schemaSubset(version(ours[name], "v1beta2"), version(theirs, "v1beta2"), name)
			for _, d := range retyped {
				t.Errorf("Longhorn %s: %s", release, d)
			}
			for _, p := range gone {
				missing[p] = append(missing[p], release)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(missing)) {
		if len(missing[p]) == len(releases) {
			t.Errorf("%s: in no release of Longhorn's schema (%v)", p, releases)
		} else {
			t.Logf("%s: not in Longhorn %v (the gate must do without it there)", p, missing[p])
		}
	}
}

// crdsByName decodes a multi-document YAML of CRDs, by name.
func crdsByName(t *testing.T, data []byte) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := decodeCRDs(data)
	require.NoError(t, err)
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range crds {
		out[crd.Name] = crd
	}
	return out
}

// version is the schema of crd's version name (nil: none).
func version(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.JSONSchemaProps {
	for _, v := range crd.Spec.Versions {
		if v.Name == name && v.Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	return nil
}

// schemaSubset lists the paths ours types that theirs does not have (gone), and those it types
// otherwise (retyped).
func schemaSubset(ours, theirs *apiextensionsv1.JSONSchemaProps, at string) (gone, retyped []string) {
	switch {
	case ours == nil:
		return nil, nil
	case theirs == nil:
		return []string{at}, nil
	case ours.Type != "" && theirs.Type != "" && ours.Type != theirs.Type:
		return nil, []string{at + ": type " + ours.Type + " here, " + theirs.Type + " in the real schema"}
	}
	add := func(g, r []string) { gone, retyped = append(gone, g...), append(retyped, r...) }
	for _, name := range slices.Sorted(maps.Keys(ours.Properties)) {
		mine := ours.Properties[name]
		var o *apiextensionsv1.JSONSchemaProps
		if other, ok := theirs.Properties[name]; ok {
			o = &other
		}
		add(schemaSubset(&mine, o, at+"."+name))
	}
	if ours.Items != nil && ours.Items.Schema != nil {
		var o *apiextensionsv1.JSONSchemaProps
		if theirs.Items != nil {
			o = theirs.Items.Schema
		}
		add(schemaSubset(ours.Items.Schema, o, at+"[]"))
	}
	if ours.AdditionalProperties != nil && ours.AdditionalProperties.Schema != nil {
		var o *apiextensionsv1.JSONSchemaProps
		if theirs.AdditionalProperties != nil {
			o = theirs.AdditionalProperties.Schema
		}
		add(schemaSubset(ours.AdditionalProperties.Schema, o, at+"{}"))
	}
	return gone, retyped
}
