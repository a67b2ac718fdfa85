package smoke_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

func TestKubeAPIServerStoresConfigMap(t *testing.T) {
	t.Parallel()
	// controller-runtime warns, with a stack trace, when its logger is used but never set.
	ctrllog.SetLogger(logr.Discard())
	cfg := testenv.StartEnvtest(t)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatalf("discovery client: %v", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	t.Logf("real server: kube-apiserver %s at %s (with etcd)", v.GitVersion, cfg.Host)

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "callbackd-config", Namespace: "default"},
		Data:       map[string]string{"channel": "wechat-main", "lockTTL": "30s"},
	}
	if err := c.Create(ctx, want); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	var got corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), &got); err != nil {
		t.Fatalf("get ConfigMap: %v", err)
	}
	if got.UID == "" || got.ResourceVersion == "" {
		t.Errorf("stored ConfigMap: expected a UID and resourceVersion from the server, got %q and %q", got.UID, got.ResourceVersion)
	}
	for k, w := range want.Data {
		if got.Data[k] != w {
			t.Errorf("ConfigMap data %q: expected %q, got %q", k, w, got.Data[k])
		}
	}
}
