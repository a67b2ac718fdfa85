package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

func durations(ds ...time.Duration) []metav1.Duration {
	out := make([]metav1.Duration, len(ds))
	for i, d := range ds {
		out[i] = metav1.Duration{Duration: d}
	}
	return out
}

// TestCRDRejectsInvalidSpecs creates each invalid channel and expects the API server to refuse
// it with the CRD's own message.
func TestCRDRejectsInvalidSpecs(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	cases := []struct {
		name    string
		mutate  func(pc *callbackdv1alpha1.PaymentChannel)
		message string
	}{
		{"success mark shorter than the provider retry span", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.ProviderRetrySchedule = durations(time.Hour, 2*time.Hour, 3*time.Hour)
			pc.Spec.TTLs.SuccessMark = metav1.Duration{Duration: 5 * time.Hour}
		}, "ttls.successMark must cover the provider's whole retry span"},
		{"success mark shorter than WeChat Pay's default span", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.TTLs.SuccessMark = metav1.Duration{Duration: 24 * time.Hour}
		}, "ttls.successMark must cover the provider's whole retry span"},
		{"provider retry schedule decreasing", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.ProviderRetrySchedule = durations(time.Minute, 30*time.Second)
		}, "providerRetrySchedule must not decrease"},
		{"delivery retry schedule decreasing", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Delivery.RetrySchedule = durations(time.Hour, time.Minute)
		}, "delivery.retrySchedule must not decrease"},
		{"max replicas below min replicas", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Autoscaling = callbackdv1alpha1.AutoscalingSpec{Mode: callbackdv1alpha1.AutoscalingHPA, MinReplicas: 5, MaxReplicas: 3}
		}, "autoscaling.maxReplicas must be at least autoscaling.minReplicas"},
		{"lock TTL below the request timeout", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.TTLs.Lock = metav1.Duration{Duration: 2 * time.Second}
		}, "ttls.lock must exceed 4s"},
		{"gateway window longer than the success mark", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.TTLs.GatewayWindow = metav1.Duration{Duration: 72 * time.Hour}
		}, "ttls.gatewayWindow must be positive and not exceed ttls.successMark"},
		{"receipt retention shorter than the success mark", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.TTLs.ReceiptRetention = metav1.Duration{Duration: time.Hour}
		}, "ttls.receiptRetention must not be shorter than ttls.successMark"},
		{"wechatpay without its keys", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Keys = callbackdv1alpha1.ChannelKeys{}
		}, "provider wechatpay requires keys.wechatAPIv3Key and keys.wechatPublicKeys"},
		{"alipay without its public key", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Provider = callbackdv1alpha1.ProviderAlipay
		}, "provider alipay requires keys.alipayPublicKey"},
		{"standardwebhooks without a secret", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Provider = callbackdv1alpha1.ProviderStandardWebhooks
		}, "providers stripe and standardwebhooks require keys.webhookSecrets"},
		{"delivery endpoints without signing secrets", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Delivery.Endpoints = []callbackdv1alpha1.DeliveryEndpoint{{Name: "orders", URL: "https://orders.example/hook"}}
		}, "delivery.endpoints require deliverySecrets"},
		{"external redis without its settings", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Redis.Mode = callbackdv1alpha1.RedisExternal
		}, "redis.external is required when redis.mode is external"},
		{"external redis with both addr and sentinels", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Redis = callbackdv1alpha1.RedisSpec{Mode: callbackdv1alpha1.RedisExternal, External: &callbackdv1alpha1.ExternalRedis{
				Addr: "redis:6379", SentinelAddrs: []string{"sentinel:26379"}, MasterName: "m"}}
		}, "set exactly one of redis.external.addr and redis.external.sentinelAddrs"},
		{"sentinel quorum above the sentinel count", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Redis.Managed = callbackdv1alpha1.ManagedRedis{Sentinels: 3, Quorum: 4}
		}, "redis.managed.quorum cannot exceed redis.managed.sentinels"},
		{"KEDA pod metric without Prometheus", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Autoscaling = callbackdv1alpha1.AutoscalingSpec{Mode: callbackdv1alpha1.AutoscalingKEDA,
				PodMetric: &callbackdv1alpha1.PodMetricTarget{Name: "callbackd_inflight", TargetAverageValue: resource.MustParse("20")}}
		}, "autoscaling.keda.prometheusServerAddress is required"},
		{"unknown provider", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Provider = "paypal"
		}, `supported values: "wechatpay", "alipay", "stripe", "standardwebhooks"`},
		{"name that is not a DNS label", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Name = "wechat.main"
		}, "metadata.name must be a DNS label of at most 40 characters"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc := newChannel(ns, "invalid-"+string(rune('a'+i)))
			tc.mutate(pc)
			err := c.Create(context.Background(), pc)
			if err == nil {
				t.Fatalf("create: expected rejection with %q, got success", tc.message)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("create: expected an error containing %q, got: %v", tc.message, err)
			}
		})
	}
}

// TestCRDImmutableIdentity: the provider and the merchant identity cannot change in place.
func TestCRDImmutableIdentity(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	pc := newChannel(ns, "wechat")
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create: %v", err)
	}
	cases := []struct {
		name    string
		mutate  func(pc *callbackdv1alpha1.PaymentChannel)
		message string
	}{
		{"provider", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Provider = callbackdv1alpha1.ProviderAlipay
			pc.Spec.Keys.AlipayPublicKey = &callbackdv1alpha1.SecretKeyRef{Name: "alipay", Key: "pub"}
		}, "provider is immutable"},
		{"merchant id", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Merchant.MerchantID = "1900000110"
		}, "merchant identity is immutable"},
		{"sub-merchant id", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Merchant.SubMerchantID = "1900000111"
		}, "merchant identity is immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			edited := &callbackdv1alpha1.PaymentChannel{}
			edited.Namespace, edited.Name = pc.Namespace, pc.Name
			get(t, c, edited)
			tc.mutate(edited)
			err := c.Update(context.Background(), edited)
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("update: expected an error containing %q, got: %v", tc.message, err)
			}
		})
	}
	// Everything else stays editable.
	edited := &callbackdv1alpha1.PaymentChannel{}
	edited.Namespace, edited.Name = pc.Namespace, pc.Name
	get(t, c, edited)
	edited.Spec.Callbackd.Image = testImageV2
	if err := c.Update(context.Background(), edited); err != nil {
		t.Fatalf("update of the image: expected success, got %v", err)
	}
}

// TestCRDDefaults: a minimal channel comes back with every documented default.
func TestCRDDefaults(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	pc := newChannel(ns, "defaults")
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create: %v", err)
	}
	got := &callbackdv1alpha1.PaymentChannel{}
	got.Namespace, got.Name = ns, "defaults"
	get(t, c, got)
	s := got.Spec
	checks := []struct {
		field     string
		got, want any
	}{
		{"ttls.lock", s.TTLs.Lock.Duration, 10 * time.Second},
		{"ttls.successMark", s.TTLs.SuccessMark.Duration, 48 * time.Hour},
		{"ttls.gatewayWindow", s.TTLs.GatewayWindow.Duration, 60 * time.Second},
		{"ttls.receiptRetention", s.TTLs.ReceiptRetention.Duration, 720 * time.Hour},
		{"timestampTolerance", s.TimestampTolerance.Duration, 5 * time.Minute},
		{"delivery.timeout", s.Delivery.Timeout.Duration, 10 * time.Second},
		{"delivery.retrySchedule", len(s.Delivery.RetrySchedule), 5},
		{"reconciliation.enabled", ptr.Deref(s.Reconciliation.Enabled, false), true},
		{"reconciliation.pendingAfter", s.Reconciliation.PendingAfter.Duration, 10 * time.Minute},
		{"database.maxConns", s.Database.MaxConns, int32(20)},
		{"callbackd.replicas", ptr.Deref(s.Callbackd.Replicas, -1), int32(2)},
		{"autoscaling.mode", s.Autoscaling.Mode, callbackdv1alpha1.AutoscalingOff},
		{"autoscaling.minReplicas", s.Autoscaling.MinReplicas, int32(2)},
		{"autoscaling.maxReplicas", s.Autoscaling.MaxReplicas, int32(10)},
		{"autoscaling.targetCPUUtilization", s.Autoscaling.TargetCPUUtilization, int32(70)},
		{"redis.mode", s.Redis.Mode, callbackdv1alpha1.RedisManaged},
		{"redis.managed.image", s.Redis.Managed.Image, "redis:7.4"},
		{"redis.managed.instances", s.Redis.Managed.Instances, int32(3)},
		{"redis.managed.sentinels", s.Redis.Managed.Sentinels, int32(3)},
		{"redis.managed.quorum", s.Redis.Managed.Quorum, int32(2)},
		{"redis.managed.storage.size", s.Redis.Managed.Storage.Size.String(), "1Gi"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("default of %s: expected %v, got %v", ch.field, ch.want, ch.got)
		}
	}
}

// TestCRDLeavesGenericPathsToTheAdapter: a stripe channel that sets one generic path gets no
// Standard Webhooks paths filled in by the API server (they would acknowledge Stripe payments
// without booking them); the adapter applies its own.
func TestCRDLeavesGenericPathsToTheAdapter(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	pc := newChannel(ns, "stripe")
	pc.Spec.Provider = callbackdv1alpha1.ProviderStripe
	pc.Spec.Keys = callbackdv1alpha1.ChannelKeys{WebhookSecrets: []callbackdv1alpha1.SecretKeyRef{{Name: "stripe", Key: "whsec"}}}
	pc.Spec.Generic = &callbackdv1alpha1.GenericFields{Account: "account"}
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create: %v", err)
	}
	got := getChannel(t, c, ns, "stripe").Spec.Generic
	if got == nil || got.Account != "account" || got.OrderNo != "" || got.EventType != "" || len(got.PaidEvents) != 0 {
		t.Fatalf("spec.generic: expected only account set, got %+v", got)
	}
}
