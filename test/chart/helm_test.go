// Package chart tests the Helm chart in charts/callback-platform: helm lint and template, the
// values schema, RBAC and CRD drift against config/, a server-side dry run of every rendered
// object on a real kube-apiserver, and the dashboard and alerts against the metrics callbackd
// really exports.
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// releaseName and releaseNamespace are the release every test renders.
const (
	releaseName      = "cbp"
	releaseNamespace = "callback-platform-system"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// repoRoot is the folder holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := testenv.RepoRoot()
	if err != nil {
		t.Fatalf("chart: find the repository root: %v", err)
	}
	return dir
}

// chartDir is the chart under test.
func chartDir(t testing.TB) string {
	return filepath.Join(repoRoot(t), "charts", "callback-platform")
}

// helm returns the pinned helm of ./bin, installing it with `make helm` when it is missing; the
// test fails (never skips) when that is not possible.
func helm(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	helmOnce.Do(func() {
		helmPath = filepath.Join(root, "bin", "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "helm")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			helmErr = fmt.Errorf("make helm: %w\n%s", err, out)
		}
	})
	if helmErr != nil {
		t.Fatalf("chart: helm is not installed and installing it failed; install it with `make helm` (helm %s into ./bin): %v",
			"v3.22.0", helmErr)
	}
	return helmPath
}

// runHelm runs helm with args and returns its standard output, or its error with the standard error.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm(t), args...)
	cmd.Dir = repoRoot(t)
	// A private HOME-like cache so that helm never reads the user's repositories or plugins.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// valuesFiles are the value sets every rendering test runs with: the defaults and one that sets
// every option.
var valuesFiles = []struct {
	name  string
	files []string
}{
	{name: "defaults"},
	{name: "full", files: []string{"testdata/full-values.yaml"}},
}

// templateArgs are the `helm template` arguments for the given values files (relative to this folder).
func templateArgs(t testing.TB, files []string, extra ...string) []string {
	t.Helper()
	args := []string{"template", releaseName, chartDir(t), "--namespace", releaseNamespace, "--include-crds"}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatalf("chart: values file %s: %v", f, err)
		}
		args = append(args, "--values", abs)
	}
	return append(args, extra...)
}

// render runs helm template and decodes every object it prints.
func render(t testing.TB, files []string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelm(t, templateArgs(t, files, extra...)...)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	objs, err := decodeObjects(out)
	if err != nil {
		t.Fatalf("chart: decode the rendered manifests: %v", err)
	}
	if len(objs) == 0 {
		t.Fatal("chart: helm template rendered no object")
	}
	return objs
}

// decodeObjects splits a multi-document YAML stream into objects, dropping empty documents.
func decodeObjects(manifests string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if trimmed := bytes.TrimSpace(raw.Raw); len(trimmed) == 0 || string(trimmed) == "null" {
			continue // an empty document
		}
		// Unstructured keeps integers as int64, as the API server would.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw.Raw); err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

// find returns the one rendered object of that kind whose name ends with nameSuffix.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, nameSuffix string) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasSuffix(o.GetName(), nameSuffix) {
			if found != nil {
				t.Fatalf("chart: two %s objects named *%s: %s and %s", kind, nameSuffix, found.GetName(), o.GetName())
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("chart: no %s named *%s among the rendered objects", kind, nameSuffix)
	}
	return found
}

// kinds counts the rendered objects by kind.
func kinds(objs []*unstructured.Unstructured) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	return n
}
