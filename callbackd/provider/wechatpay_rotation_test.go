package provider_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/keys/keystest"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// TestWeChatPayMigrationToPublicKey replays WeChat Pay's certificate → public key migration on a
// running adapter: the PUB_KEY_ID_ file appears in the mounted Secret, callbacks signed with it
// verify within seconds, and callbacks signed with the certificate keep verifying while both
// files are present; once the certificate is removed it no longer verifies.
func TestWeChatPayMigrationToPublicKey(t *testing.T) {
	certKey, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	pubKey, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := paysim.NewPlatformCertificate(certKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := paysim.PublicKeyPEM(&pubKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	apiV3Key, err := paysim.NewAPIv3Key()
	if err != nil {
		t.Fatal(err)
	}
	const pubKeyID = "PUB_KEY_ID_0112345678902025"
	vol := keystest.NewVolume(t, map[string][]byte{
		"apiv3.key":                   []byte(apiV3Key + "\n"),
		"pub/" + cert.Serial + ".pem": cert.PEM,
	})
	ch := config.Channel{
		Name: "wx-main",
		ChannelSettings: callbackdv1alpha1.ChannelSettings{
			Provider: callbackdv1alpha1.ProviderWeChatPay,
			Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000001", AppID: "wx01"},
		},
		Keys: config.KeyFiles{WeChatAPIv3KeyFile: vol.Path("apiv3.key"), WeChatPublicKeyDir: vol.Path("pub")},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg := prometheus.NewRegistry()
	a, err := provider.NewWithOptions(ctx, ch, nil, reg, provider.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	viaCert := &paysim.WeChatPay{APIv3Key: apiV3Key, Serial: cert.Serial, Key: certKey}
	viaPub := &paysim.WeChatPay{APIv3Key: apiV3Key, Serial: pubKeyID, Key: pubKey}
	verifies := func(s *paysim.WeChatPay) bool {
		n, err := s.Payment(paysim.WeChatTransaction{MchID: "1900000001", AppID: "wx01", OutTradeNo: "M1", TradeState: "SUCCESS",
			Amount: paysim.WeChatAmount{Total: 1, Currency: "CNY"}}, paysim.WeChatOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/notify/wx-main", bytes.NewReader(n.Body))
		r.Header = n.Header
		_, err = a.Parse(ctx, r, n.Body)
		if err != nil && notify.ReasonOf(err) != notify.ReasonUnknownKey {
			t.Fatalf("expected success or unknown_key, got %v", err)
		}
		return err == nil
	}
	if !verifies(viaCert) || verifies(viaPub) {
		t.Fatal("expected only the certificate to verify before the migration")
	}
	vol.Update(t, map[string][]byte{
		"apiv3.key":                   []byte(apiV3Key + "\n"),
		"pub/" + cert.Serial + ".pem": cert.PEM,
		"pub/" + pubKeyID + ".pem":    pubPEM,
	})
	eventually(t, "the public key to verify", func() bool { return verifies(viaPub) })
	if !verifies(viaCert) {
		t.Fatal("expected the certificate to keep verifying while both files are present")
	}
	vol.Update(t, map[string][]byte{"apiv3.key": []byte(apiV3Key), "pub/" + pubKeyID + ".pem": pubPEM})
	eventually(t, "the certificate to stop verifying once removed", func() bool { return !verifies(viaCert) })

	for _, key := range []string{cert.Serial, pubKeyID} {
		if got := counterValue(t, reg, "callbackd_key_verifications_total", map[string]string{"channel": "wx-main", "key_id": key, "result": "ok"}); got < 1 {
			t.Errorf("expected ok verifications counted for key %s, got %v", key, got)
		}
	}
	if got := counterValue(t, reg, "callbackd_key_reloads_total", map[string]string{"channel": "wx-main", "result": "ok"}); got < 2 {
		t.Errorf("expected at least 2 key reloads counted, got %v", got)
	}
}
