package testenv

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
)

//go:embed testdata/longhorn-crds.yaml
var longhornCRDs []byte

//go:embed testdata/kubevirt-crds.yaml
var kubevirtCRDs []byte

// LonghornNamespace is where Longhorn keeps its objects.
const LonghornNamespace = "longhorn-system"

// InstallLonghornCRDs installs Longhorn's CRDs (LonghornCRDs: its real ones when they are beside
// the project) and waits until the API server serves them. It returns the release installed.
func InstallLonghornCRDs(ctx context.Context, cfg *rest.Config) (release string, err error) {
	return installLonghorn(ctx, cfg, "")
}

// installLonghorn installs the Longhorn CRDs of release (empty: what LonghornCRDsEnv chooses).
func installLonghorn(ctx context.Context, cfg *rest.Config, release string) (string, error) {
	if release == "" {
		release = os.Getenv(LonghornCRDsEnv)
	}
	yaml, release, err := longhornCRDsOf(release)
	if err != nil {
		return "", err
	}
	return release, installCRDs(ctx, cfg, yaml)
}

// LonghornCRDsEnv chooses the Longhorn CRDs of the test clusters: a release provided beside the
// project in ../shared/testdata/longhorn ("v1.12.1", "v1.7.3"), or "minimal", the project's own
// schema (testdata/longhorn-crds.yaml, only the fields the volume gate reads). Unset: v1.12.1
// when it is there, else minimal.
const LonghornCRDsEnv = "EDGEDRAIN_TEST_LONGHORN_CRDS"

// Longhorn CRD sets LonghornCRDs knows.
const (
	LonghornLatest  = "v1.12.1"
	LonghornOldest  = "v1.7.3"
	LonghornMinimal = "minimal"
)

var fallbackOnce sync.Once

// LonghornCRDs is the YAML of the Longhorn CRDs LonghornCRDsEnv chooses, and which set it is.
// Without the real ones beside the project it falls back to the minimal schema and says so
// once on stderr.
func LonghornCRDs() (yaml []byte, release string, err error) {
	return longhornCRDsOf(os.Getenv(LonghornCRDsEnv))
}

// longhornCRDsOf is LonghornCRDs for release ("": the latest, or minimal without it).
func longhornCRDsOf(release string) (yaml []byte, _ string, err error) {
	if release == LonghornMinimal {
		return longhornCRDs, LonghornMinimal, nil
	}
	chosen := release != ""
	if !chosen {
		release = LonghornLatest
	}
	yaml, err = LonghornRelease(release)
	if errors.Is(err, os.ErrNotExist) && !chosen {
		fallbackOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "testenv: Longhorn's real CRDs are not beside the project (%v): the tests use the project's minimal schema\n", err)
		})
		return longhornCRDs, LonghornMinimal, nil
	}
	return yaml, release, err
}

// LonghornRelease is the CRDs of a Longhorn release provided in ../shared/testdata/longhorn,
// made installable here: no conversion webhook runs in the test clusters, and the objects are
// all written and read as v1beta2, so a CRD's webhook conversion is replaced by none.
func LonghornRelease(release string) ([]byte, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "..", "shared", "testdata", "longhorn", "crds-"+release+".yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("Longhorn %s CRDs: %w", release, err)
	}
	crds, err := decodeCRDs(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out bytes.Buffer
	for _, crd := range crds {
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
		doc, err := json.Marshal(crd)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(doc)
		out.WriteString("\n")
	}
	return out.Bytes(), nil
}

// InstallKubeVirtCRDs installs the minimal KubeVirt CRDs (kubevirt.io/v1 VirtualMachines,
// VirtualMachineInstances, VirtualMachineInstanceMigrations) and waits until they are served.
func InstallKubeVirtCRDs(ctx context.Context, cfg *rest.Config) error {
	return installCRDs(ctx, cfg, kubevirtCRDs)
}

// decodeCRDs reads a multi-document YAML of CustomResourceDefinitions, in order.
func decodeCRDs(yaml []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(yaml), 4096)
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := dec.Decode(&crd); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode CRDs: %w", err)
		}
		if crd.Name != "" {
			out = append(out, &crd)
		}
	}
}

func installCRDs(ctx context.Context, cfg *rest.Config, yaml []byte) error {
	cfg = rest.CopyConfig(cfg)
	// Longhorn's real CRDs type integers with format int64, which the API server warns about
	// for each CRD: not the tests' concern.
	cfg.WarningHandler = rest.NoWarnings{}
	client, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds, err := decodeCRDs(yaml)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
	}
	return nil
}
