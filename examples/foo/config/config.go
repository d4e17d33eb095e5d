// Package config holds the Foo sample controller's manifests (the CRD,
// least-privilege RBAC, and a Deployment that runs the controller in a
// cluster) and installs the CRD.
package config

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// CRD is the CustomResourceDefinition of Foo.
//
//go:embed crd.yaml
var CRD []byte

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the Foo CRD (or leaves an existing one) and waits
// until the API server serves it.
func InstallCRD(ctx context.Context, cfg *rest.Config) error {
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(CRD, &obj.Object); err != nil {
		return fmt.Errorf("foo CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(crds).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install foo CRD: %w", err)
	}
	return waitEstablished(ctx, dyn, obj.GetName())
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("foo CRD: %w", err)
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("foo CRD %s not established: %w", name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
