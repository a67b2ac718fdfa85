package alipay_test

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	smartwalle "github.com/smartwalle/alipay/v3"
	"github.com/smartwalle/nsign"
	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// sdkClient is smartwalle/alipay's client holding the Alipay public key of the test fixture.
func sdkClient(t *testing.T, f *fixture) *smartwalle.Client {
	t.Helper()
	appKey, err := paysim.PrivateKeyPEM(f.otherKey) // the merchant's own key; unused for verifying
	if err != nil {
		t.Fatal(err)
	}
	c, err := smartwalle.New(testAppID, string(appKey), false)
	if err != nil {
		t.Fatalf("smartwalle New: %v", err)
	}
	pub, err := paysim.PublicKeyPEM(&f.alipayKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadAliPayPublicKey(string(pub)); err != nil {
		t.Fatalf("smartwalle LoadAliPayPublicKey: %v", err)
	}
	return c
}

// TestPaysimNotificationsAcceptedBySmartwalle: paysim's notifications (utf-8 and gbk) pass
// smartwalle/alipay's verifier, which works on the URL-decoded values as sent.
func TestPaysimNotificationsAcceptedBySmartwalle(t *testing.T) {
	f := keyMaterial(t)
	c := sdkClient(t, f)
	for _, charset := range []string{"utf-8", "gbk"} {
		t.Run(charset, func(t *testing.T) {
			n := must(t)(sim(f, charset).Trade(trade("I1", paysim.AlipayTradeSuccess, "88.80"), paysim.AlipayOptions{}))
			values, err := url.ParseQuery(string(n.Body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.DecodeNotification(values)
			if err != nil {
				t.Fatalf("smartwalle refused a paysim notification: %v", err)
			}
			if got.OutTradeNo != "I1" || got.TotalAmount != "88.80" || got.TradeStatus != smartwalle.TradeStatusSuccess || got.AppId != testAppID {
				t.Fatalf("expected I1 TRADE_SUCCESS 88.80 for %s, got %+v", testAppID, got)
			}
		})
	}
	t.Run("tampered notification is refused by the SDK too", func(t *testing.T) {
		n := must(t)(sim(f, "utf-8").Trade(trade("I1", paysim.AlipayTradeSuccess, "88.80"), paysim.AlipayOptions{}))
		values, _ := url.ParseQuery(string(n.Body))
		values.Set("total_amount", "0.01")
		if _, err := c.DecodeNotification(values); err == nil {
			t.Fatal("expected smartwalle to refuse a tampered amount")
		}
	})
}

// TestSmartwalleSignedNotificationsAcceptedByOurAdapter: a notification signed with
// smartwalle's own signer (nsign RSA2 with smartwalle's Encoder, ignoring sign and sign_type as
// its verifier does) is accepted, in utf-8 and in gbk.
func TestSmartwalleSignedNotificationsAcceptedByOurAdapter(t *testing.T) {
	f := keyMaterial(t)
	signer := nsign.New(nsign.WithMethod(nsign.NewRSAMethod(crypto.SHA256, f.alipayKey, nil)), nsign.WithEncoder(&smartwalle.Encoder{}))
	for _, charset := range []string{"utf-8", "gbk"} {
		t.Run(charset, func(t *testing.T) {
			fields := map[string]string{
				"notify_id": "2026010100222100000000000000000009", "notify_type": "trade_status_sync", "notify_time": "2026-01-01 10:00:05",
				"app_id": testAppID, "charset": charset, "version": "1.0", "sign_type": "RSA2",
				"out_trade_no": "W1", "trade_no": "2026010122001400000000000009", "trade_status": "TRADE_SUCCESS",
				"total_amount": "12.30", "seller_id": testSellerID, "subject": "中文商品", "gmt_payment": "2026-01-01 10:00:00",
			}
			values := url.Values{}
			for k, v := range fields {
				if charset == "gbk" {
					enc, err := simplifiedchinese.GBK.NewEncoder().String(v)
					if err != nil {
						t.Fatal(err)
					}
					v = enc
				}
				values.Set(k, v)
			}
			sig, err := signer.SignValues(values, nsign.WithIgnore("sign", "sign_type"))
			if err != nil {
				t.Fatalf("smartwalle sign: %v", err)
			}
			values.Set("sign", base64.StdEncoding.EncodeToString(sig))
			body := []byte(values.Encode())
			r := httptest.NewRequest(http.MethodPost, "/notify/ali-main", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			n, err := newAdapter(t, f, testSellerID).Parse(context.Background(), r, body)
			if err != nil {
				t.Fatalf("our adapter refused a smartwalle-signed notification: %v", err)
			}
			if n.OutTradeNo != "W1" || n.Amount != 1230 || n.Kind != notify.KindPayment || n.Status != notify.StatusSucceeded {
				t.Fatalf("expected payment W1 of 1230 fen, got %+v", n)
			}
		})
	}
}
