package controllers

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// TestSamplesAreAccepted: every sample under config/samples is a valid PaymentChannel for the
// generated CRD (the documentation cannot rot silently), and its rendered callbackd
// configuration passes callbackd's validation.
func TestSamplesAreAccepted(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	paths, err := filepath.Glob(filepath.Join("..", "config", "samples", "callbackd_v1alpha1_*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("samples: expected files under config/samples, got %v (%v)", paths, err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			pc := &callbackdv1alpha1.PaymentChannel{}
			if err := yaml.UnmarshalStrict(data, pc); err != nil {
				t.Fatalf("decode: expected a PaymentChannel with known fields only, got %v", err)
			}
			pc.Namespace = ns
			if err := c.Create(context.Background(), pc); err != nil {
				t.Fatalf("create: expected the CRD to accept the sample, got %v", err)
			}
			got := getChannel(t, c, ns, pc.Name)
			rendered, _, err := renderConfig(got)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if err := validateRenderedConfig(rendered); err != nil {
				t.Fatalf("rendered configuration: expected callbackd to accept it, got %v", err)
			}
		})
	}
}
