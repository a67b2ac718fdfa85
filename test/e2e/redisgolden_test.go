package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestRedisBootstrapScriptsFromGoldenFiles runs the operator's Redis and Sentinel pods locally
// from the controllers' golden files (the objects the operator renders for its reference channel),
// without a cluster: the quick way to work on the start scripts. TestPlatformOnKwok does the same
// with what the operator really wrote into the cluster.
func TestRedisBootstrapScriptsFromGoldenFiles(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "controllers", "testdata")
	decode := func(name string, into any) {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(raw, into); err != nil {
			t.Fatalf("decode %s: %v", name, err)
		}
	}
	cm := &corev1.ConfigMap{}
	decode("configmap-redis.golden.yaml", cm)
	redisSts, sentinelSts := &appsv1.StatefulSet{}, &appsv1.StatefulSet{}
	decode("statefulset-redis.golden.yaml", redisSts)
	decode("statefulset-sentinel.golden.yaml", sentinelSts)
	configMap := func(name string) *corev1.ConfigMap {
		if name != cm.Name {
			t.Fatalf("expected the pods to mount ConfigMap %s, got %s", cm.Name, name)
		}
		return cm
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	runRedisBootstrap(ctx, t, redisSts.Namespace, configMap, redisSts, sentinelSts, filepath.Join(t.TempDir(), "redis-pods"))
}
