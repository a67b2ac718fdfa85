package keyset_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

func TestGenerateThenLoadRoundTrips(t *testing.T) {
	specs := []keyset.Spec{
		{Channel: "wx", Provider: callbackdv1alpha1.ProviderWeChatPay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wx1"}},
		{Channel: "wxc", Provider: callbackdv1alpha1.ProviderWeChatPay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wx1"}, WeChatKeyKind: keyset.WeChatKeyCertificate},
		{Channel: "ali", Provider: callbackdv1alpha1.ProviderAlipay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "2021000000000001"}},
		{Channel: "sw", Provider: callbackdv1alpha1.ProviderStandardWebhooks, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "acct"}},
	}
	for _, spec := range specs {
		t.Run(spec.Channel, func(t *testing.T) {
			dir := t.TempDir()
			gen, err := keyset.Generate(dir, spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := keyset.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Manifest.Channel != spec.Channel || got.Manifest.Provider != spec.Provider || got.Manifest.Merchant != spec.Merchant {
				t.Errorf("manifest: expected %s %s %+v, got %+v", spec.Channel, spec.Provider, spec.Merchant, got.Manifest)
			}
			if got.APIv3Key != gen.APIv3Key || got.WebhookSecret != gen.WebhookSecret ||
				(gen.PlatformKey != nil && !gen.PlatformKey.Equal(got.PlatformKey)) ||
				(gen.AlipayKey != nil && !gen.AlipayKey.Equal(got.AlipayKey)) {
				t.Error("the loaded key material differs from the generated one")
			}
			isCert := strings.HasPrefix(got.Manifest.WeChatSerial, "PUB_KEY_ID_")
			if spec.Provider == callbackdv1alpha1.ProviderWeChatPay && isCert == (spec.WeChatKeyKind == keyset.WeChatKeyCertificate) {
				t.Errorf("key kind %q: unexpected serial %q", spec.WeChatKeyKind, got.Manifest.WeChatSerial)
			}
			if _, err := keyset.Generate(dir, spec); err == nil {
				t.Error("a second Generate into the same folder: expected a refusal")
			}
			info, err := os.Stat(filepath.Join(dir, "provider"))
			if err != nil || info.Mode().Perm() != 0o700 {
				t.Errorf("provider folder: expected mode 0700, got %v (%v)", info.Mode().Perm(), err)
			}
		})
	}
}

func TestGenerateRefusesIncompleteSpecs(t *testing.T) {
	cases := map[string]keyset.Spec{
		"no channel":       {Provider: callbackdv1alpha1.ProviderAlipay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "a"}},
		"no merchant":      {Channel: "c", Provider: callbackdv1alpha1.ProviderAlipay},
		"wechat no appid":  {Channel: "c", Provider: callbackdv1alpha1.ProviderWeChatPay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "m"}},
		"unknown kind":     {Channel: "c", Provider: callbackdv1alpha1.ProviderWeChatPay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "m", AppID: "a"}, WeChatKeyKind: "x"},
		"unknown provider": {Channel: "c", Provider: "paypal", Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "m"}},
	}
	for name, spec := range cases {
		dir := t.TempDir()
		if _, err := keyset.Generate(dir, spec); err == nil {
			t.Errorf("%s: expected an error", name)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: a refused spec must write nothing, found %d entries", name, len(entries))
		}
	}
}

func TestLoadNamesTheMissingFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := keyset.Generate(dir, keyset.Spec{Channel: "ali", Provider: callbackdv1alpha1.ProviderAlipay, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "provider", "alipay_private_key.pem")); err != nil {
		t.Fatal(err)
	}
	_, err := keyset.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "alipay_private_key.pem") {
		t.Fatalf("expected an error naming alipay_private_key.pem, got %v", err)
	}
}
