package wechatpay_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wechatpay-apiv3/wechatpay-go/core"
	"github.com/wechatpay-apiv3/wechatpay-go/core/auth/verifiers"
	sdknotify "github.com/wechatpay-apiv3/wechatpay-go/core/notify"
	"github.com/wechatpay-apiv3/wechatpay-go/services/payments"
	"github.com/wechatpay-apiv3/wechatpay-go/utils"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// sdkHandler is wechatpay-go's own notify handler, configured like a merchant in the middle of
// the certificate → public key migration: both kinds of key verify.
func sdkHandler(t *testing.T, f *fixture) *sdknotify.Handler {
	t.Helper()
	verifier := verifiers.NewSHA256WithRSACombinedVerifier(
		core.NewCertificateMapWithList([]*x509.Certificate{f.cert.Cert}), testPubKeyID, f.pubKey.PublicKey)
	h, err := sdknotify.NewRSANotifyHandler(f.apiV3Key, verifier)
	if err != nil {
		t.Fatalf("wechatpay-go NewRSANotifyHandler: %v", err)
	}
	return h
}

// TestPaysimNotificationsAcceptedByWechatpayGo: what paysim sends is what the official SDK
// accepts, through both kinds of key.
func TestPaysimNotificationsAcceptedByWechatpayGo(t *testing.T) {
	f := keyMaterial(t)
	h := sdkHandler(t, f)
	for _, viaPublicKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("public key %v", viaPublicKey), func(t *testing.T) {
			n := must(t)(signer(f, viaPublicKey).Payment(paidTx("I1", 1234), paysim.WeChatOptions{}))
			r, err := n.Request(context.Background(), "http://127.0.0.1/notify/wx-main")
			if err != nil {
				t.Fatal(err)
			}
			var tx payments.Transaction
			req, err := h.ParseNotifyRequest(context.Background(), r, &tx)
			if err != nil {
				t.Fatalf("wechatpay-go refused a paysim notification: %v", err)
			}
			if req.EventType != "TRANSACTION.SUCCESS" || req.ResourceType != "encrypt-resource" {
				t.Fatalf("expected event TRANSACTION.SUCCESS with an encrypted resource, got %s / %s", req.EventType, req.ResourceType)
			}
			if tx.OutTradeNo == nil || *tx.OutTradeNo != "I1" || tx.Amount == nil || *tx.Amount.Total != 1234 || *tx.Mchid != testMchID {
				t.Fatalf("expected out_trade_no I1, total 1234, mchid %s; got %+v", testMchID, tx)
			}
		})
	}
	t.Run("probe is refused by the SDK too", func(t *testing.T) {
		n := must(t)(signer(f, false).Payment(paidTx("I1", 1), paysim.WeChatOptions{Probe: true}))
		r, _ := n.Request(context.Background(), "http://127.0.0.1/notify/wx-main")
		if _, err := h.ParseNotifyRequest(context.Background(), r, &payments.Transaction{}); err == nil {
			t.Fatal("expected wechatpay-go to refuse a SIGNTEST probe")
		}
	})
}

// TestWechatpayGoSignedNotificationsAcceptedByOurAdapter: a notification signed with the SDK's
// own signing routine (and nonce generator), over a plaintext marshalled from the SDK's own
// transaction model, and whose encryption the SDK's own decryption routine accepts, is accepted
// by our adapter.
func TestWechatpayGoSignedNotificationsAcceptedByOurAdapter(t *testing.T) {
	f := keyMaterial(t)
	str := func(s string) *string { return &s }
	total := int64(4321)
	plain, err := json.Marshal(payments.Transaction{
		Mchid: str(testMchID), Appid: str(testAppID), OutTradeNo: str("S1"), TransactionId: str("4200000000000000000000000042"),
		TradeType: str("NATIVE"), TradeState: str("SUCCESS"), SuccessTime: str("2026-03-01T12:00:00+08:00"),
		Amount: &payments.TransactionAmount{Total: &total, PayerTotal: &total, Currency: str("CNY"), PayerCurrency: str("CNY")},
	})
	if err != nil {
		t.Fatal(err)
	}
	gcmNonce := "0123456789ab"
	block, _ := aes.NewCipher([]byte(f.apiV3Key))
	gcm, _ := cipher.NewGCM(block)
	ciphertext := base64.StdEncoding.EncodeToString(gcm.Seal(nil, []byte(gcmNonce), plain, []byte("transaction")))
	if back, err := utils.DecryptAES256GCM(f.apiV3Key, "transaction", gcmNonce, ciphertext); err != nil || back != string(plain) {
		t.Fatalf("the SDK's DecryptAES256GCM does not open the resource: %v", err)
	}
	created := time.Now()
	body, err := json.Marshal(map[string]any{
		"id": "EV-2018022511223320873", "create_time": created.Format(time.RFC3339), "resource_type": "encrypt-resource",
		"event_type": "TRANSACTION.SUCCESS", "summary": "支付成功",
		"resource": sdknotify.EncryptedResource{Algorithm: "AEAD_AES_256_GCM", Ciphertext: ciphertext, Nonce: gcmNonce, AssociatedData: "transaction", OriginalType: "transaction"},
	})
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := utils.GenerateNonce()
	if err != nil {
		t.Fatal(err)
	}
	ts := fmt.Sprint(created.Unix())
	for _, tc := range []struct {
		name   string
		serial string
		sign   func(string) (string, error)
	}{
		{"platform certificate", f.cert.Serial, func(m string) (string, error) { return utils.SignSHA256WithRSA(m, f.certKey) }},
		{"public key", testPubKeyID, func(m string) (string, error) { return utils.SignSHA256WithRSA(m, f.pubKey) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig, err := tc.sign(ts + "\n" + nonce + "\n" + string(body) + "\n")
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodPost, "/notify/wx-main", bytes.NewReader(body))
			r.Header.Set("Wechatpay-Serial", tc.serial)
			r.Header.Set("Wechatpay-Signature", sig)
			r.Header.Set("Wechatpay-Timestamp", ts)
			r.Header.Set("Wechatpay-Nonce", nonce)
			r.Header.Set("Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048")
			n, err := newAdapter(t, f, adapterOptions{}).Parse(context.Background(), r, body)
			if err != nil {
				t.Fatalf("our adapter refused an SDK-signed notification: %v", err)
			}
			if n.OutTradeNo != "S1" || n.Amount != 4321 || n.Kind != notify.KindPayment || n.Status != notify.StatusSucceeded || n.NotifyID != "EV-2018022511223320873" {
				t.Fatalf("expected payment S1 of 4321 fen, got %+v", n)
			}
		})
	}
}
