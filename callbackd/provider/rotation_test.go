package provider_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys/keystest"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// TestStripeSecretRoll rolls a Stripe endpoint secret under a running adapter: during the roll
// both secrets verify (Stripe signs with both), afterwards only the new one.
func TestStripeSecretRoll(t *testing.T) {
	oldSecret, _ := paysim.NewWebhookSecret()
	newSecret, _ := paysim.NewWebhookSecret()
	vol := keystest.NewVolume(t, map[string][]byte{"current": []byte(oldSecret)})
	ch := config.Channel{
		Name: "stripe-main",
		ChannelSettings: callbackdv1alpha1.ChannelSettings{
			Provider: callbackdv1alpha1.ProviderStripe,
			Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "acct_1"},
		},
		Keys: config.KeyFiles{WebhookSecretFiles: []string{vol.Path("current"), vol.Path("previous")}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := provider.NewWithOptions(ctx, ch, nil, nil, provider.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	body := []byte(`{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":100,"currency":"usd","metadata":{"order_no":"S1"}}}}`)
	verifies := func(secret string) bool {
		n := (&paysim.Stripe{Secrets: []string{secret}}).Event(body)
		r := httptest.NewRequest(http.MethodPost, "/notify/stripe-main", bytes.NewReader(n.Body))
		r.Header = n.Header
		_, err := a.Parse(ctx, r, n.Body)
		return err == nil
	}
	if !verifies(oldSecret) || verifies(newSecret) {
		t.Fatal("expected only the initial secret to verify")
	}
	vol.Update(t, map[string][]byte{"current": []byte(newSecret), "previous": []byte(oldSecret)})
	eventually(t, "the rolled secret to verify", func() bool { return verifies(newSecret) })
	if !verifies(oldSecret) {
		t.Fatal("expected the previous secret to keep verifying during the roll")
	}
	vol.Update(t, map[string][]byte{"current": []byte(newSecret)})
	eventually(t, "the previous secret to be refused after the roll", func() bool { return !verifies(oldSecret) })
}

// TestAlipayPublicKeyReplaced replaces the Alipay public key file under a running adapter:
// notifications signed with the new Alipay key verify within seconds.
func TestAlipayPublicKeyReplaced(t *testing.T) {
	oldKey, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	oldPEM, _ := paysim.PublicKeyPEM(&oldKey.PublicKey)
	newB64, _ := paysim.PublicKeyBase64(&newKey.PublicKey) // the console's bare form
	vol := keystest.NewVolume(t, map[string][]byte{"alipay.pub": oldPEM})
	ch := config.Channel{
		Name: "ali-main",
		ChannelSettings: callbackdv1alpha1.ChannelSettings{
			Provider: callbackdv1alpha1.ProviderAlipay,
			Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "2021000000000001"},
		},
		Keys: config.KeyFiles{AlipayPublicKeyFile: vol.Path("alipay.pub")},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := provider.NewWithOptions(ctx, ch, nil, nil, provider.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	verifies := func(key *paysim.Alipay) bool {
		n, err := key.Trade(paysim.AlipayTrade{OutTradeNo: "A1", TradeStatus: paysim.AlipayTradeSuccess, TotalAmount: "1.00"}, paysim.AlipayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/notify/ali-main", bytes.NewReader(n.Body))
		_, err = a.Parse(ctx, r, n.Body)
		return err == nil
	}
	signedOld := &paysim.Alipay{AppID: "2021000000000001", Key: oldKey}
	signedNew := &paysim.Alipay{AppID: "2021000000000001", Key: newKey}
	if !verifies(signedOld) || verifies(signedNew) {
		t.Fatal("expected only the initial Alipay key to verify")
	}
	vol.Update(t, map[string][]byte{"alipay.pub": []byte(newB64 + "\n")})
	eventually(t, "the new Alipay key to verify", func() bool { return verifies(signedNew) })
}
