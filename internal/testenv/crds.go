package testenv

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
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

// InstallLonghornCRDs installs the minimal Longhorn CRDs (longhorn.io/v1beta2) and waits until
// the API server serves them.
func InstallLonghornCRDs(ctx context.Context, cfg *rest.Config) error {
	return installCRDs(ctx, cfg, longhornCRDs)
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
