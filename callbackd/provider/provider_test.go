package provider_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys/keystest"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/standardwebhooks"
)

func newWebhookSecret(t *testing.T) (string, []byte) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("generate secret: %v", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key), key
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("expected %s within 5s, it did not happen", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func standardWebhookRequest(key []byte, body []byte) (*http.Request, []byte) {
	now := time.Now()
	r := httptest.NewRequest(http.MethodPost, "/notify/generic", bytes.NewReader(body))
	r.Header.Set("webhook-id", "msg_1")
	r.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	r.Header.Set("webhook-signature", standardwebhooks.Sign(key, "msg_1", now, body))
	return r, body
}

// TestStandardWebhooksSecretRotation rotates the secret files under a running adapter the way a
// Secret volume update does: the new secret verifies within seconds, and the old one keeps
// verifying while both files are present.
func TestStandardWebhooksSecretRotation(t *testing.T) {
	oldSecret, oldKey := newWebhookSecret(t)
	newSecret, newKey := newWebhookSecret(t)
	vol := keystest.NewVolume(t, map[string][]byte{"current": []byte(oldSecret + "\n")})
	ch := config.Channel{
		Name: "generic",
		ChannelSettings: callbackdv1alpha1.ChannelSettings{
			Provider: callbackdv1alpha1.ProviderStandardWebhooks,
			Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "acct_1"},
		},
		Keys: config.KeyFiles{WebhookSecretFiles: []string{vol.Path("current"), vol.Path("previous")}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg := prometheus.NewRegistry()
	a, err := provider.NewWithOptions(ctx, ch, nil, reg, provider.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	body := []byte(`{"type":"payment.succeeded","data":{"order_no":"A1","amount":100}}`)
	verifies := func(key []byte) bool {
		_, err := a.Parse(ctx, func() *http.Request { r, _ := standardWebhookRequest(key, body); return r }(), body)
		return err == nil
	}
	if !verifies(oldKey) {
		t.Fatal("expected the initial secret to verify")
	}
	if verifies(newKey) {
		t.Fatal("expected the not-yet-configured secret to be refused")
	}

	vol.Update(t, map[string][]byte{"current": []byte(newSecret), "previous": []byte(oldSecret)})
	eventually(t, "the new secret to verify", func() bool { return verifies(newKey) })
	if !verifies(oldKey) {
		t.Fatal("expected the old secret to keep verifying while both files are present")
	}

	vol.Update(t, map[string][]byte{"current": []byte(newSecret)})
	eventually(t, "the old secret to be refused once removed", func() bool { return !verifies(oldKey) })
	if !verifies(newKey) {
		t.Fatal("expected the new secret to keep verifying")
	}

	ok := counterValue(t, reg, "callbackd_key_verifications_total", map[string]string{"channel": "generic", "key_id": "current", "result": "ok"})
	if ok < 3 {
		t.Fatalf("expected at least 3 ok verifications counted for key current, got %v", ok)
	}
}

func TestNewRefusesAChannelWithoutUsableKeys(t *testing.T) {
	vol := keystest.NewVolume(t, map[string][]byte{"bad": []byte("whsec_***")})
	for _, tc := range []struct {
		name string
		ch   config.Channel
		want string
	}{
		{"no secret file exists", config.Channel{Name: "c", ChannelSettings: callbackdv1alpha1.ChannelSettings{Provider: callbackdv1alpha1.ProviderStandardWebhooks, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "m"}},
			Keys: config.KeyFiles{WebhookSecretFiles: []string{vol.Path("missing")}}}, "none of the 1 webhook secret files exists"},
		{"unparsable secret", config.Channel{Name: "c", ChannelSettings: callbackdv1alpha1.ChannelSettings{Provider: callbackdv1alpha1.ProviderStandardWebhooks, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "m"}},
			Keys: config.KeyFiles{WebhookSecretFiles: []string{vol.Path("bad")}}}, "not whsec_"},
		{"unknown provider", config.Channel{Name: "c", ChannelSettings: callbackdv1alpha1.ChannelSettings{Provider: "paypal"}}, "unsupported provider"},
	} {
		_, err := provider.New(context.Background(), tc.ch, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: expected an error containing %q, got %v", tc.name, tc.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "***") {
			t.Errorf("%s: error echoes key material: %v", tc.name, err)
		}
	}
}

func TestMetricsAreSharedBetweenChannels(t *testing.T) {
	secret, _ := newWebhookSecret(t)
	vol := keystest.NewVolume(t, map[string][]byte{"s": []byte(secret)})
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, name := range []string{"one", "two"} {
		ch := config.Channel{Name: name, ChannelSettings: callbackdv1alpha1.ChannelSettings{Provider: callbackdv1alpha1.ProviderStandardWebhooks, Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "m"}},
			Keys: config.KeyFiles{WebhookSecretFiles: []string{vol.Path("s")}}}
		a, err := provider.New(ctx, ch, nil, reg)
		if err != nil {
			t.Fatalf("provider.New(%s): expected success with shared metrics, got %v", name, err)
		}
		if got := a.Provider(); got != string(callbackdv1alpha1.ProviderStandardWebhooks) {
			t.Fatalf("provider.New(%s): expected a standardwebhooks adapter, got %q", name, got)
		}
	}
}

// counterValue returns the value of one labelled series of a counter registered in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}
