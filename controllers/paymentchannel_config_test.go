package controllers

import (
	"strings"
	"testing"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
)

func TestBuildConfigMapGolden(t *testing.T) {
	pc := builderChannel()
	data, hash, err := renderConfig(pc)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := validateRenderedConfig(data); err != nil {
		t.Fatalf("rendered configuration: expected callbackd's validation to accept it, got %v", err)
	}
	if len(hash) != 10 {
		t.Fatalf("config hash: expected 10 hex digits, got %q", hash)
	}
	golden(t, "configmap-callbackd", buildConfigMap(pc, data))
}

// TestRenderedConfigShape checks, per provider and Redis mode, that the rendered file is
// accepted by callbackd's loader and points at exactly the files the Deployment mounts.
func TestRenderedConfigShape(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(pc *callbackdv1alpha1.PaymentChannel)
		check  func(t *testing.T, f *config.File)
	}{
		{"wechatpay with managed redis", func(*callbackdv1alpha1.PaymentChannel) {}, func(t *testing.T, f *config.File) {
			if f.Redis == nil || len(f.Redis.SentinelAddrs) != 3 || f.Redis.MasterName != redisMasterName {
				t.Fatalf("redis: expected 3 Sentinels and master %q, got %+v", redisMasterName, f.Redis)
			}
			if want := "wechat-main-sentinel-0.wechat-main-sentinel.payments.svc:26379"; f.Redis.SentinelAddrs[0] != want {
				t.Fatalf("redis.sentinelAddrs[0]: expected %s, got %s", want, f.Redis.SentinelAddrs[0])
			}
			k := f.Channels[0].Keys
			if k.WeChatAPIv3KeyFile != "/etc/callbackd/secrets/wechat-apiv3-key/apiv3.key" || k.WeChatPublicKeyDir != "/etc/callbackd/secrets/wechat-public-keys" {
				t.Fatalf("keys: expected the mounted APIv3 key file and public key dir, got %+v", k)
			}
		}},
		{"alipay with external sentinel and password", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Provider = callbackdv1alpha1.ProviderAlipay
			pc.Spec.Keys = callbackdv1alpha1.ChannelKeys{AlipayPublicKey: &callbackdv1alpha1.SecretKeyRef{Name: "alipay", Key: "public.pem"}}
			pc.Spec.Redis = callbackdv1alpha1.RedisSpec{Mode: callbackdv1alpha1.RedisExternal, External: &callbackdv1alpha1.ExternalRedis{
				SentinelAddrs: []string{"s1.redis:26379", "s2.redis:26379"}, MasterName: "shared",
				PasswordSecret: &callbackdv1alpha1.SecretKeyRef{Name: "redis", Key: "password"}}}
		}, func(t *testing.T, f *config.File) {
			if f.Redis == nil || f.Redis.MasterName != "shared" || f.Redis.PasswordFile != "/etc/callbackd/secrets/redis-password/password" {
				t.Fatalf("redis: expected the external group with its password file, got %+v", f.Redis)
			}
			if got := f.Channels[0].Keys.AlipayPublicKeyFile; got != "/etc/callbackd/secrets/alipay-public-key/alipay-public.pem" {
				t.Fatalf("keys.alipayPublicKeyFile: got %q", got)
			}
		}},
		{"standardwebhooks with two secrets and no redis", func(pc *callbackdv1alpha1.PaymentChannel) {
			pc.Spec.Provider = callbackdv1alpha1.ProviderStandardWebhooks
			pc.Spec.Keys = callbackdv1alpha1.ChannelKeys{WebhookSecrets: []callbackdv1alpha1.SecretKeyRef{{Name: "hooks", Key: "old"}, {Name: "hooks", Key: "new"}}}
			pc.Spec.Redis = callbackdv1alpha1.RedisSpec{Mode: callbackdv1alpha1.RedisDisabled}
		}, func(t *testing.T, f *config.File) {
			if f.Redis != nil {
				t.Fatalf("redis: expected none when disabled, got %+v", f.Redis)
			}
			got := f.Channels[0].Keys.WebhookSecretFiles
			if len(got) != 2 || got[0] != "/etc/callbackd/secrets/webhook-secret-0/secret" || got[1] != "/etc/callbackd/secrets/webhook-secret-1/secret" {
				t.Fatalf("keys.webhookSecretFiles: expected both mounted secrets, got %v", got)
			}
			if f.Channels[0].Generic != nil {
				t.Fatalf("generic: expected none rendered (each adapter has its own paths), got %+v", f.Channels[0].Generic)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc := builderChannel()
			tc.mutate(pc)
			data, _, err := renderConfig(pc)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if err := validateRenderedConfig(data); err != nil {
				t.Fatalf("validate: expected the rendered file accepted, got %v", err)
			}
			f, err := config.Parse(data)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if f.Database.DSNFile != "/etc/callbackd/secrets/database/dsn" || f.Database.DSN != "" {
				t.Fatalf("database: expected only dsnFile at the mounted path, got %+v", f.Database)
			}
			if len(f.Channels) != 1 || f.Channels[0].Name != pc.Name || f.Channels[0].Provider != pc.Spec.Provider {
				t.Fatalf("channels: expected one channel %s (%s), got %+v", pc.Name, pc.Spec.Provider, f.Channels)
			}
			if strings.Contains(string(data), "postgres://") {
				t.Fatalf("rendered config: expected no inline DSN, got one")
			}
			tc.check(t, f)
		})
	}
}

// TestRenderedConfigRefusedIsReported: a channel callbackd would refuse (here, a lock TTL that
// the CRD's own rule would also stop) fails validation with the field named.
func TestRenderedConfigRefusedIsReported(t *testing.T) {
	pc := builderChannel()
	pc.Spec.TTLs.Lock.Duration = 1
	data, _, err := renderConfig(pc)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	err = validateRenderedConfig(data)
	if err == nil || !strings.Contains(err.Error(), "database.lockTimeout") {
		t.Fatalf("validate: expected an error naming database.lockTimeout, got %v", err)
	}
}
