package chart

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// TestDryRunOnAKubeAPIServer has a real kube-apiserver validate every object the chart renders
// (server-side dry run: schema, defaulting, admission), with the chart's CRDs installed and
// stand-ins for the Prometheus Operator's CRDs.
func TestDryRunOnAKubeAPIServer(t *testing.T) {
	cfg := testenv.StartEnvtest(t,
		filepath.Join(chartDir(t), "crds"),
		filepath.Join("testdata", "monitoring-crds"),
	)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client for the kube-apiserver: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace %s: %v", releaseNamespace, err)
	}

	for _, v := range valuesFiles {
		t.Run(v.name, func(t *testing.T) {
			objs := render(t, v.files)
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					continue // installed above from crds/, as helm does before the templates
				}
				if err := c.Create(ctx, o, client.DryRunAll); err != nil {
					t.Errorf("expected the kube-apiserver to accept %s %s/%s, got: %v",
						o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}
