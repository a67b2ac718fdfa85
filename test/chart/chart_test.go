package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func TestLint(t *testing.T) {
	for _, v := range valuesFiles {
		t.Run(v.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir(t), "--namespace", releaseNamespace}
			for _, f := range v.files {
				abs, _ := filepath.Abs(f)
				args = append(args, "--values", abs)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatalf("expected helm lint --strict to pass, got: %v\n%s", err, out)
			}
		})
	}
}

func TestTemplateRendersTheOperator(t *testing.T) {
	appVersion := chartAppVersion(t)
	tests := []struct {
		name      string
		files     []string
		image     string
		replicas  int64
		wantKinds map[string]int
	}{
		{
			name:     "defaults",
			image:    "ghcr.io/seed-1cff2221/callback-platform/operator:" + appVersion,
			replicas: 2,
			wantKinds: map[string]int{
				"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 2,
				"Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1,
			},
		},
		{
			name:     "full",
			files:    []string{"testdata/full-values.yaml"},
			image:    "registry.example.com/payments/operator:v0.1.0-rc.1",
			replicas: 3,
			wantKinds: map[string]int{
				"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 2,
				"Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1,
				"ServiceMonitor": 2, "PrometheusRule": 1, "ConfigMap": 1, "Secret": 5, "PaymentChannel": 2,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := render(t, tt.files)
			if got := kinds(objs); !reflect.DeepEqual(got, tt.wantKinds) {
				t.Errorf("rendered kinds: expected %v, got %v", tt.wantKinds, got)
			}
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" || isClusterScoped(o.GetKind()) {
					continue
				}
				if o.GetNamespace() != releaseNamespace {
					t.Errorf("%s %s: expected namespace %q, got %q", o.GetKind(), o.GetName(), releaseNamespace, o.GetNamespace())
				}
			}

			dep := find(t, objs, "Deployment", "-operator")
			if got, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); got != tt.replicas {
				t.Errorf("replicas: expected %d, got %d", tt.replicas, got)
			}
			c := operatorContainer(t, dep)
			if c["image"] != tt.image {
				t.Errorf("operator image: expected %q, got %q", tt.image, c["image"])
			}
			args := stringsOf(c["args"])
			for _, want := range []string{"--leader-elect=true", "--leader-election-namespace=" + releaseNamespace,
				"--health-probe-bind-address=:8081", "--metrics-bind-address=:8443"} {
				if !slices.Contains(args, want) {
					t.Errorf("operator args: expected %q among %q", want, args)
				}
			}
			for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
				if _, ok := c[probe]; !ok {
					t.Errorf("operator container: expected a %s", probe)
				}
			}
			if _, ok := c["resources"].(map[string]any)["requests"]; !ok {
				t.Errorf("operator container: expected resource requests, got %v", c["resources"])
			}

			// The restricted Pod Security Standard, field by field.
			psc, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec", "securityContext")
			if psc["runAsNonRoot"] != true {
				t.Errorf("pod securityContext.runAsNonRoot: expected true, got %v", psc["runAsNonRoot"])
			}
			if got, _, _ := unstructured.NestedString(psc, "seccompProfile", "type"); got != "RuntimeDefault" {
				t.Errorf("pod seccompProfile: expected RuntimeDefault, got %q", got)
			}
			sc, _ := c["securityContext"].(map[string]any)
			if sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true {
				t.Errorf("container securityContext: expected allowPrivilegeEscalation=false and readOnlyRootFilesystem=true, got %v", sc)
			}
			if drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
				t.Errorf("container capabilities.drop: expected [ALL], got %v", drop)
			}

			// Every binding names the ServiceAccount the Deployment runs as, in the release namespace.
			sa, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName")
			find(t, objs, "ServiceAccount", sa)
			for _, o := range objs {
				if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
					continue
				}
				subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
				want := []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": releaseNamespace}}
				if !reflect.DeepEqual(subjects, want) {
					t.Errorf("%s %s subjects: expected %v, got %v", o.GetKind(), o.GetName(), want, subjects)
				}
			}
		})
	}
}

func TestSamplesRunTheChartsCallbackdImage(t *testing.T) {
	objs := render(t, nil, "--set", "samples.enabled=true")
	want := "ghcr.io/seed-1cff2221/callback-platform/callbackd:" + chartAppVersion(t)
	for _, name := range []string{"sample-wechat", "sample-alipay"} {
		pc := find(t, objs, "PaymentChannel", name)
		if got, _, _ := unstructured.NestedString(pc.Object, "spec", "callbackd", "image"); got != want {
			t.Errorf("PaymentChannel %s image: expected %q, got %q", name, want, got)
		}
	}
	for _, o := range objs {
		if o.GetKind() != "Secret" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "stringData")
		for k, v := range data {
			if !strings.Contains(v, "PLACEHOLDER") {
				t.Errorf("Secret %s key %s: expected a value that says PLACEHOLDER, got a value without it", o.GetName(), k)
			}
		}
	}
}

func TestSchemaRefusesBadValues(t *testing.T) {
	tests := []struct {
		name string
		set  string
	}{
		{"unknown top-level key", "replicas=2"},
		{"unknown nested key", "metrics.serviceMonitor.enable=true"},
		{"zero replicas", "replicaCount=0"},
		{"root allowed", "podSecurityContext.runAsNonRoot=false"},
		{"privilege escalation", "securityContext.allowPrivilegeEscalation=true"},
		{"unknown log level", "operator.logLevel=TRACE"},
		{"unknown pull policy", "image.pullPolicy=Sometimes"},
		{"bad scrape interval", "metrics.serviceMonitor.interval=often"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runHelm(t, templateArgs(t, nil, "--set", tt.set)...)
			if err == nil {
				t.Fatalf("expected helm template --set %s to be refused by values.schema.json, got %d bytes of manifests", tt.set, len(out))
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
				t.Errorf("expected a schema error for --set %s, got: %v", tt.set, err)
			}
		})
	}
}

func TestManagerRulesMatchConfigRBAC(t *testing.T) {
	want := policyRules(t, filepath.Join(repoRoot(t), "config", "rbac", "role.yaml"))
	objs := render(t, nil)
	role := find(t, objs, "ClusterRole", "-manager")
	var got rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &got); err != nil {
		t.Fatalf("decode the chart's manager ClusterRole: %v", err)
	}
	if !reflect.DeepEqual(got.Rules, want) {
		t.Errorf("the chart's manager rules differ from config/rbac/role.yaml (run `make manifests chart-crds`):\nexpected %+v\ngot      %+v", want, got.Rules)
	}
	// Least privilege: the operator reads Secrets but never writes them.
	for _, r := range got.Rules {
		if slices.Contains(r.Resources, "secrets") && !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("secrets verbs: expected [get list watch], got %v", r.Verbs)
		}
	}
}

func TestChartCRDsMatchConfig(t *testing.T) {
	root := repoRoot(t)
	pairs := map[string]string{ // config/ file -> chart file
		filepath.Join(root, "config", "rbac", "role.yaml"): filepath.Join(chartDir(t), "files", "manager-role.yaml"),
	}
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("expected CRDs in config/crd/bases, got %v (err %v)", bases, err)
	}
	for _, b := range bases {
		pairs[b] = filepath.Join(chartDir(t), "crds", filepath.Base(b))
	}
	chartCRDs, _ := filepath.Glob(filepath.Join(chartDir(t), "crds", "*"))
	if len(chartCRDs) != len(bases) {
		t.Errorf("expected the chart's crds/ to hold exactly the %d CRDs of config/crd/bases, got %v (run `make chart-crds`)", len(bases), chartCRDs)
	}
	for src, dst := range pairs {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("read %s: %v", src, err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Errorf("%s is missing from the chart (run `make chart-crds`): %v", dst, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (run `make chart-crds`)", dst, src)
		}
	}
}

// chartAppVersion reads appVersion from Chart.yaml.
func chartAppVersion(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatalf("read Chart.yaml: %v", err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: expected an appVersion, got %q (err %v)", c.AppVersion, err)
	}
	return c.AppVersion
}

// policyRules reads the rules of the ClusterRole in a file.
func policyRules(t testing.TB, path string) []rbacv1.PolicyRule {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &role); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if len(role.Rules) == 0 {
		t.Fatalf("%s: expected rules, got none", path)
	}
	return role.Rules
}

// operatorContainer is the Deployment's container named operator.
func operatorContainer(t testing.TB, dep *unstructured.Unstructured) map[string]any {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		if m, ok := c.(map[string]any); ok && m["name"] == "operator" {
			return m
		}
	}
	t.Fatalf("Deployment %s: no container named operator", dep.GetName())
	return nil
}

// stringsOf converts a decoded YAML list of strings.
func stringsOf(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, s := range list {
		if str, ok := s.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

// isClusterScoped reports whether the chart's objects of that kind live outside any namespace.
func isClusterScoped(kind string) bool {
	switch kind {
	case "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace":
		return true
	}
	return false
}
