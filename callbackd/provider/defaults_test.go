package provider_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// TestStripeChannelFromConfigFileUsesStripeFieldPaths loads a stripe channel through the config
// loader, defaults and all, as `callbackd serve` does. The loader once filled the generic field
// paths with the Standard Webhooks defaults (data.order_no, payment.succeeded), which silently
// acknowledged real Stripe payments without booking them.
func TestStripeChannelFromConfigFileUsesStripeFieldPaths(t *testing.T) {
	dir := t.TempDir()
	secret, err := paysim.NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "whsec")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`
database: {dsn: "postgres://callbackd@127.0.0.1:5432/callbackd"}
channels:
  - name: stripe-main
    provider: stripe
    merchant: {merchantID: acct_1}
    keys: {webhookSecretFiles: [%q]}
`, secretFile)
	f, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	f.SetDefaults()
	if err := f.Validate(); err != nil {
		t.Fatalf("config.Validate: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := provider.NewWithOptions(ctx, f.Channels[0], nil, nil, provider.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	body := []byte(`{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":2599,"currency":"usd","metadata":{"order_no":"S-42"}}}}`)
	n := (&paysim.Stripe{Secrets: []string{secret}}).Event(body)
	r := httptest.NewRequest(http.MethodPost, "/notify/stripe-main", bytes.NewReader(n.Body))
	r.Header = n.Header
	got, err := a.Parse(ctx, r, n.Body)
	if err != nil {
		t.Fatalf("Parse of a Stripe payment_intent.succeeded: expected a notification, got %v", err)
	}
	if got.OutTradeNo != "S-42" || got.Kind != notify.KindPayment || got.Status != notify.StatusSucceeded ||
		got.Amount != 2599 || got.Currency != "USD" || got.ProviderTxnID != "pi_1" {
		t.Fatalf("expected order S-42 paid 2599 USD by pi_1, got order %q kind %s status %s amount %d %s txn %q",
			got.OutTradeNo, got.Kind, got.Status, got.Amount, got.Currency, got.ProviderTxnID)
	}
}
