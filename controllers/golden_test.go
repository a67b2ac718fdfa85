package controllers

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with the builders' output")

// golden compares obj, rendered as YAML, with testdata/<name>.golden.yaml (or rewrites the file
// with -update). A difference is shown as a unified diff.
func golden(t *testing.T, name string, obj any) {
	t.Helper()
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatalf("%s: marshal: %v", name, err)
	}
	path := filepath.Join("testdata", name+".golden.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("%s: write golden file: %v", name, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: read golden file (run `go test ./controllers -run %s -update` to create it): %v", name, t.Name(), err)
	}
	if string(got) == string(want) {
		return
	}
	diff, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(want)), B: difflib.SplitLines(string(got)),
		FromFile: path + " (expected)", ToFile: "builder output (got)", Context: 3,
	})
	t.Fatalf("%s: builder output differs from the golden file:\n%s", name, diff)
}

// builderChannel is a WeChat Pay channel as the API server returns it: every CRD default
// applied, a UID, and every optional reference set, so the builders show all they can do.
func builderChannel() *callbackdv1alpha1.PaymentChannel {
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	return &callbackdv1alpha1.PaymentChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "wechat-main", UID: "6b1f5f2e-8a59-4c4e-9d11-2f7c1f0d3a01", Generation: 3},
		Spec: callbackdv1alpha1.PaymentChannelSpec{
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderWeChatPay,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wxd678efh567hg6787"},
				TTLs: callbackdv1alpha1.TTLs{Lock: d(10 * time.Second), SuccessMark: d(48 * time.Hour),
					GatewayWindow: d(time.Minute), ReceiptRetention: d(720 * time.Hour)},
				TimestampTolerance: d(5 * time.Minute),
				Delivery: callbackdv1alpha1.Delivery{
					RetrySchedule: []metav1.Duration{d(time.Minute), d(5 * time.Minute), d(30 * time.Minute), d(2 * time.Hour), d(6 * time.Hour)},
					Endpoints:     []callbackdv1alpha1.DeliveryEndpoint{{Name: "orders", URL: "https://orders.example/hooks/payments", MaxConcurrency: 8}},
					Timeout:       d(10 * time.Second),
				},
				Reconciliation: callbackdv1alpha1.Reconciliation{Enabled: ptr.To(true), PendingAfter: d(10 * time.Minute),
					Interval: d(time.Minute), QueriesPerSecond: 5},
			},
			Keys: callbackdv1alpha1.ChannelKeys{
				WeChatAPIv3Key:       &callbackdv1alpha1.SecretKeyRef{Name: "wechat-keys", Key: "apiv3"},
				WeChatPublicKeys:     &callbackdv1alpha1.SecretRef{Name: "wechat-public-keys"},
				WeChatMerchantKey:    &callbackdv1alpha1.SecretKeyRef{Name: "wechat-keys", Key: "merchant.pem"},
				WeChatMerchantSerial: "3775B6A45ACD588826D15E583A95F5DD",
			},
			Database:          callbackdv1alpha1.DatabaseSpec{DSNSecret: callbackdv1alpha1.SecretKeyRef{Name: "payments-db", Key: "dsn"}, MaxConns: 20},
			MerchantAPITokens: &callbackdv1alpha1.SecretKeyRef{Name: "merchant-api", Key: "tokens"},
			DeliverySecrets:   &callbackdv1alpha1.SecretRef{Name: "delivery-secrets"},
			Callbackd: callbackdv1alpha1.CallbackdSpec{
				Image:            "registry.example/callbackd:v1.4.0",
				ImagePullPolicy:  corev1.PullIfNotPresent,
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
				Replicas:         ptr.To[int32](2),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				Tolerations: []corev1.Toleration{{Key: "payments", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			},
			Autoscaling: callbackdv1alpha1.AutoscalingSpec{
				Mode: callbackdv1alpha1.AutoscalingHPA, MinReplicas: 2, MaxReplicas: 10, TargetCPUUtilization: 70,
				PodMetric: &callbackdv1alpha1.PodMetricTarget{Name: "callbackd_inflight", TargetAverageValue: resource.MustParse("50")},
				KEDA:      &callbackdv1alpha1.KEDASpec{PrometheusServerAddress: "http://prometheus.monitoring:9090", PollingInterval: 15},
			},
			Redis: callbackdv1alpha1.RedisSpec{
				Mode: callbackdv1alpha1.RedisManaged,
				Managed: callbackdv1alpha1.ManagedRedis{
					Image: "redis:7.4", Instances: 3, Sentinels: 3, Quorum: 2,
					Storage: callbackdv1alpha1.RedisStorage{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("fast-ssd")},
				},
			},
		},
	}
}
