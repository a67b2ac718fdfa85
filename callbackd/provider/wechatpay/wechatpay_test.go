package wechatpay_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/wechatpay"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

const (
	testMchID    = "1900000001"
	testAppID    = "wx0000000000000001"
	testPubKeyID = "PUB_KEY_ID_0119000000012025010100000000000001"
)

// fixture is the test key material, generated once per test binary with crypto/rand.
type fixture struct {
	certKey  *rsa.PrivateKey // signs as the platform certificate
	cert     *paysim.PlatformCertificate
	pubKey   *rsa.PrivateKey // signs as the PUB_KEY_ID_ public key
	otherKey *rsa.PrivateKey // configured nowhere
	apiV3Key string
	wrongKey string
}

var testKeys = sync.OnceValues(func() (*fixture, error) {
	f := &fixture{}
	var err error
	for _, k := range []**rsa.PrivateKey{&f.certKey, &f.pubKey, &f.otherKey} {
		if *k, err = paysim.NewRSAKey(); err != nil {
			return nil, err
		}
	}
	if f.cert, err = paysim.NewPlatformCertificate(f.certKey); err != nil {
		return nil, err
	}
	if f.apiV3Key, err = paysim.NewAPIv3Key(); err != nil {
		return nil, err
	}
	if f.wrongKey, err = paysim.NewAPIv3Key(); err != nil {
		return nil, err
	}
	return f, nil
})

func keyMaterial(t testing.TB) *fixture {
	t.Helper()
	f, err := testKeys()
	if err != nil {
		t.Fatalf("generate test keys: %v", err)
	}
	return f
}

// adapterKeys are the channel's keys: the certificate and the public key both verify.
func adapterKeys(f *fixture) *wechatpay.Keys {
	return &wechatpay.Keys{
		Verifiers: map[string]*rsa.PublicKey{f.cert.Serial: &f.certKey.PublicKey, testPubKeyID: &f.pubKey.PublicKey},
		APIv3Key:  []byte(f.apiV3Key),
	}
}

type adapterOptions struct {
	subMchID string
	now      time.Time
}

func newAdapter(t testing.TB, f *fixture, o adapterOptions) *wechatpay.Adapter {
	t.Helper()
	if o.now.IsZero() {
		o.now = time.Now()
	}
	a, err := wechatpay.New(wechatpay.Config{
		Channel:  "wx-main",
		MchID:    testMchID,
		SubMchID: o.subMchID,
		AppID:    testAppID,
		Keys:     keys.Static(adapterKeys(f)),
		Now:      func() time.Time { return o.now },
	})
	if err != nil {
		t.Fatalf("wechatpay.New: %v", err)
	}
	return a
}

func signer(f *fixture, viaPublicKey bool) *paysim.WeChatPay {
	if viaPublicKey {
		return &paysim.WeChatPay{APIv3Key: f.apiV3Key, Serial: testPubKeyID, Key: f.pubKey}
	}
	return &paysim.WeChatPay{APIv3Key: f.apiV3Key, Serial: f.cert.Serial, Key: f.certKey}
}

func paidTx(outTradeNo string, total int64) paysim.WeChatTransaction {
	return paysim.WeChatTransaction{
		MchID: testMchID, AppID: testAppID, OutTradeNo: outTradeNo, TransactionID: "4200000000202601010000000001",
		TradeType: "JSAPI", TradeState: "SUCCESS", TradeStateDesc: "支付成功", BankType: "OTHERS",
		SuccessTime: "2026-01-01T10:00:00+08:00", Payer: paysim.WeChatPayer{OpenID: "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
		Amount: paysim.WeChatAmount{Total: total, PayerTotal: total, Currency: "CNY", PayerCurrency: "CNY"},
	}
}

func refundOf(outTradeNo, outRefundNo, status string, amount int64) paysim.WeChatRefund {
	return paysim.WeChatRefund{
		MchID: testMchID, OutTradeNo: outTradeNo, TransactionID: "4200000000202601010000000001",
		OutRefundNo: outRefundNo, RefundID: "50000000382019052709732678859", RefundStatus: status,
		SuccessTime: "2026-01-02T10:00:00+08:00", UserReceivedAccount: "招商银行信用卡0403",
		Amount: paysim.WeChatRefundAmount{Total: 999, Refund: amount, PayerTotal: 999, PayerRefund: amount},
	}
}

func parse(a *wechatpay.Adapter, n paysim.Notification) (notify.Notification, error) {
	r := httptest.NewRequest(http.MethodPost, "/notify/wx-main", bytes.NewReader(n.Body))
	for k, v := range n.Header {
		r.Header[k] = v
	}
	return a.Parse(context.Background(), r, n.Body)
}

// must returns a function that unwraps a built notification, failing t on error.
func must(t testing.TB) func(paysim.Notification, error) paysim.Notification {
	return func(n paysim.Notification, err error) paysim.Notification {
		t.Helper()
		if err != nil {
			t.Fatalf("build notification: %v", err)
		}
		return n
	}
}

func TestParse(t *testing.T) {
	f := keyMaterial(t)
	serviceTx := paidTx("SP1", 500)
	serviceTx.MchID, serviceTx.AppID = "", ""
	serviceTx.SpMchID, serviceTx.SubMchID, serviceTx.SpAppID, serviceTx.SubAppID = testMchID, "1900000109", testAppID, "wx_sub"
	notPaid := paidTx("N1", 100)
	notPaid.TradeState = "NOTPAY"
	tests := []struct {
		name    string
		build   func() (paysim.Notification, error)
		options adapterOptions
		want    notify.Notification
	}{
		{name: "payment signed with the platform certificate",
			build: func() (paysim.Notification, error) {
				return signer(f, false).Payment(paidTx("A1", 999), paysim.WeChatOptions{})
			},
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "A1", Kind: notify.KindPayment, Status: notify.StatusSucceeded,
				Amount: 999, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001", OccurredAt: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)}},
		{name: "payment signed with the PUB_KEY_ID_ public key",
			build: func() (paysim.Notification, error) {
				return signer(f, true).Payment(paidTx("A2", 1), paysim.WeChatOptions{})
			},
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "A2", Kind: notify.KindPayment, Status: notify.StatusSucceeded,
				Amount: 1, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001", OccurredAt: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)}},
		{name: "explicit signature type",
			build: func() (paysim.Notification, error) {
				return signer(f, false).Payment(paidTx("A3", 5), paysim.WeChatOptions{SignatureType: wechatpay.SignatureType})
			},
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "A3", Kind: notify.KindPayment, Status: notify.StatusSucceeded,
				Amount: 5, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001", OccurredAt: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)}},
		{name: "trade_state other than SUCCESS is ignored",
			build: func() (paysim.Notification, error) { return signer(f, false).Payment(notPaid, paysim.WeChatOptions{}) },
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "N1", Kind: notify.KindPayment, Status: notify.StatusIgnored,
				ProviderTxnID: "4200000000202601010000000001"}},
		{name: "service provider payment", options: adapterOptions{subMchID: "1900000109"},
			build: func() (paysim.Notification, error) {
				return signer(f, false).Payment(serviceTx, paysim.WeChatOptions{})
			},
			want: notify.Notification{MerchantID: testMchID, SubMerchantID: "1900000109", OutTradeNo: "SP1", Kind: notify.KindPayment,
				Status: notify.StatusSucceeded, Amount: 500, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001",
				OccurredAt: time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)}},
		{name: "refund succeeded",
			build: func() (paysim.Notification, error) {
				return signer(f, true).Refund(refundOf("A1", "R1", "SUCCESS", 300), paysim.WeChatOptions{})
			},
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "A1", Kind: notify.KindRefund, OutRefundNo: "R1",
				Status: notify.StatusSucceeded, Amount: 300, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001",
				ProviderRefundID: "50000000382019052709732678859", OccurredAt: time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC)}},
		{name: "refund abnormal",
			build: func() (paysim.Notification, error) {
				return signer(f, true).Refund(refundOf("A1", "R2", "ABNORMAL", 300), paysim.WeChatOptions{})
			},
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "A1", Kind: notify.KindRefund, OutRefundNo: "R2",
				Status: notify.StatusFailed, Amount: 300, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001",
				ProviderRefundID: "50000000382019052709732678859", OccurredAt: time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC)}},
		{name: "refund closed",
			build: func() (paysim.Notification, error) {
				return signer(f, true).Refund(refundOf("A1", "R3", "CLOSED", 300), paysim.WeChatOptions{})
			},
			want: notify.Notification{MerchantID: testMchID, OutTradeNo: "A1", Kind: notify.KindRefund, OutRefundNo: "R3",
				Status: notify.StatusFailed, Amount: 300, Currency: "CNY", ProviderTxnID: "4200000000202601010000000001",
				ProviderRefundID: "50000000382019052709732678859", OccurredAt: time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := must(t)(tc.build())
			got, err := parse(newAdapter(t, f, tc.options), n)
			if err != nil {
				t.Fatalf("expected a notification, got %v", err)
			}
			var env struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(n.Body, &env)
			want := tc.want
			want.Channel, want.Provider, want.NotifyID, want.BodyDigest = "wx-main", wechatpay.ProviderName, env.ID, notify.Digest(n.Body)
			got.OccurredAt, want.OccurredAt = got.OccurredAt.UTC(), want.OccurredAt.UTC()
			if got != want {
				t.Fatalf("expected %+v,\ngot      %+v", want, got)
			}
		})
	}
}

// TestIdempotencyKeyIgnoresNotificationID: two resends of one payment (new notification id,
// nonce, timestamp and signature) have the same key; a refund of the same order does not.
func TestIdempotencyKeyIgnoresNotificationID(t *testing.T) {
	f := keyMaterial(t)
	a := newAdapter(t, f, adapterOptions{})
	first, err := parse(a, must(t)(signer(f, false).Payment(paidTx("K1", 100), paysim.WeChatOptions{})))
	if err != nil {
		t.Fatal(err)
	}
	resend, err := parse(a, must(t)(signer(f, true).Payment(paidTx("K1", 100), paysim.WeChatOptions{Timestamp: time.Now().Add(-time.Minute)})))
	if err != nil {
		t.Fatal(err)
	}
	refund, err := parse(a, must(t)(signer(f, false).Refund(refundOf("K1", "KR1", "SUCCESS", 100), paysim.WeChatOptions{})))
	if err != nil {
		t.Fatal(err)
	}
	if first.NotifyID == resend.NotifyID {
		t.Fatalf("expected distinct notification ids, got %s twice", first.NotifyID)
	}
	if first.IdempotencyKey() != resend.IdempotencyKey() {
		t.Fatalf("expected equal keys for a resend, got %q and %q", first.IdempotencyKey(), resend.IdempotencyKey())
	}
	if first.IdempotencyKey() == refund.IdempotencyKey() {
		t.Fatalf("expected the refund key to differ from the payment key, both %q", first.IdempotencyKey())
	}
	if !strings.Contains(first.IdempotencyKey(), testMchID) {
		t.Fatalf("expected the key to include the mchid, got %q", first.IdempotencyKey())
	}
}

// resign replaces the body of n with edit(body) and signs it again with key, so that only the
// edited part (the encrypted resource) is wrong.
func resign(t *testing.T, n paysim.Notification, key *rsa.PrivateKey, edit func(map[string]any)) paysim.Notification {
	t.Helper()
	var env map[string]any
	if err := json.Unmarshal(n.Body, &env); err != nil {
		t.Fatal(err)
	}
	edit(env)
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := paysim.SignWeChat(key, n.Header.Get("Wechatpay-Timestamp"), n.Header.Get("Wechatpay-Nonce"), body)
	if err != nil {
		t.Fatal(err)
	}
	h := n.Header.Clone()
	h.Set("Wechatpay-Signature", sig)
	return paysim.Notification{Header: h, Body: body}
}

func TestParseRefuses(t *testing.T) {
	f := keyMaterial(t)
	now := time.Now()
	cert := signer(f, false)
	good := func() paysim.Notification { return must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{})) }
	resource := func(env map[string]any) map[string]any { return env["resource"].(map[string]any) }
	otherMerchant := paidTx("A1", 100)
	otherMerchant.MchID = "1900000002"
	otherApp := paidTx("A1", 100)
	otherApp.AppID = "wx_other"
	otherSub := paidTx("A1", 100)
	otherSub.MchID = ""
	otherSub.SpMchID, otherSub.SubMchID = testMchID, "1900000999"
	badRefund := refundOf("A1", "R1", "SUCCESS", 1)
	badRefund.MchID = "1900000002"

	tests := []struct {
		name    string
		build   func() paysim.Notification
		options adapterOptions
		reason  notify.Reason
	}{
		{"flipped body byte", func() paysim.Notification {
			n := good()
			i := bytes.Index(n.Body, []byte(`"summary"`)) + 3
			n.Body[i] ^= 0x20
			return n
		}, adapterOptions{}, notify.ReasonBadSignature},
		{"wrong serial (the other configured key)", func() paysim.Notification {
			n := good()
			n.Header.Set("Wechatpay-Serial", testPubKeyID)
			return n
		}, adapterOptions{}, notify.ReasonBadSignature},
		{"unknown serial", func() paysim.Notification {
			return must(t)((&paysim.WeChatPay{APIv3Key: f.apiV3Key, Serial: "5157F09EFDC096DE15EBE81A47057A72", Key: f.otherKey}).Payment(paidTx("A1", 100), paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonUnknownKey},
		{"signed by a stranger under a known serial", func() paysim.Notification {
			return must(t)((&paysim.WeChatPay{APIv3Key: f.apiV3Key, Serial: f.cert.Serial, Key: f.otherKey}).Payment(paidTx("A1", 100), paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonBadSignature},
		{"expired timestamp (300 s old)", func() paysim.Notification {
			return must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{Timestamp: now.Add(-300 * time.Second)}))
		}, adapterOptions{now: now}, notify.ReasonStaleTimestamp},
		{"timestamp 300 s ahead", func() paysim.Notification {
			return must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{Timestamp: now.Add(300 * time.Second)}))
		}, adapterOptions{now: now}, notify.ReasonStaleTimestamp},
		{"SIGNTEST probe", func() paysim.Notification {
			return must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{Probe: true}))
		}, adapterOptions{}, notify.ReasonProbe},
		{"other signature type", func() paysim.Notification {
			return must(t)(cert.Payment(paidTx("A1", 100), paysim.WeChatOptions{SignatureType: "WECHATPAY2-SM2-WITH-SM3"}))
		}, adapterOptions{}, notify.ReasonUnsupported},
		{"wrong APIv3 key", func() paysim.Notification {
			return must(t)((&paysim.WeChatPay{APIv3Key: f.wrongKey, Serial: f.cert.Serial, Key: f.certKey}).Payment(paidTx("A1", 100), paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonDecrypt},
		{"tampered ciphertext (re-signed)", func() paysim.Notification {
			return resign(t, good(), f.certKey, func(env map[string]any) {
				ct, _ := base64.StdEncoding.DecodeString(resource(env)["ciphertext"].(string))
				ct[0] ^= 1
				resource(env)["ciphertext"] = base64.StdEncoding.EncodeToString(ct)
			})
		}, adapterOptions{}, notify.ReasonDecrypt},
		{"tampered associated data (re-signed)", func() paysim.Notification {
			return resign(t, good(), f.certKey, func(env map[string]any) { resource(env)["associated_data"] = "refund" })
		}, adapterOptions{}, notify.ReasonDecrypt},
		{"tampered nonce (re-signed)", func() paysim.Notification {
			return resign(t, good(), f.certKey, func(env map[string]any) { resource(env)["nonce"] = "AAAAAAAAAAAA" })
		}, adapterOptions{}, notify.ReasonDecrypt},
		{"other algorithm (re-signed)", func() paysim.Notification {
			return resign(t, good(), f.certKey, func(env map[string]any) { resource(env)["algorithm"] = "AEAD_SM4_GCM" })
		}, adapterOptions{}, notify.ReasonUnsupported},
		{"mchid of another merchant", func() paysim.Notification {
			return must(t)(cert.Payment(otherMerchant, paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonMerchantMismatch},
		{"appid of another app", func() paysim.Notification {
			return must(t)(cert.Payment(otherApp, paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonMerchantMismatch},
		{"sub_mchid of another sub-merchant", func() paysim.Notification {
			return must(t)(cert.Payment(otherSub, paysim.WeChatOptions{}))
		}, adapterOptions{subMchID: "1900000109"}, notify.ReasonMerchantMismatch},
		{"refund for another merchant", func() paysim.Notification {
			return must(t)(cert.Refund(badRefund, paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonMerchantMismatch},
		{"refund status contradicting the event", func() paysim.Notification {
			return must(t)(cert.Event(wechatpay.EventRefundSuccess, "refund", "", refundOf("A1", "R1", "ABNORMAL", 1), paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonMalformed},
		{"float amount", func() paysim.Notification {
			return must(t)(cert.Event(wechatpay.EventTransactionSuccess, "transaction", "", map[string]any{
				"mchid": testMchID, "appid": testAppID, "out_trade_no": "A1", "trade_state": "SUCCESS", "amount": map[string]any{"total": 1.5}}, paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonMalformed},
		{"missing amount", func() paysim.Notification {
			return must(t)(cert.Event(wechatpay.EventTransactionSuccess, "transaction", "", map[string]any{
				"mchid": testMchID, "appid": testAppID, "out_trade_no": "A1", "trade_state": "SUCCESS"}, paysim.WeChatOptions{}))
		}, adapterOptions{}, notify.ReasonMalformed},
		{"missing headers", func() paysim.Notification {
			n := good()
			n.Header.Del("Wechatpay-Nonce")
			return n
		}, adapterOptions{}, notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(newAdapter(t, f, tc.options), tc.build())
			if err == nil || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("expected refusal %s, got %v (notification %+v)", tc.reason, err, got)
			}
			var nerr *notify.Error
			if !errors.As(err, &nerr) {
				t.Fatalf("expected a *notify.Error, got %T", err)
			}
			if strings.Contains(err.Error(), f.apiV3Key) {
				t.Fatal("the error message contains the APIv3 key")
			}
		})
	}
}

func TestRespond(t *testing.T) {
	a := newAdapter(t, keyMaterial(t), adapterOptions{})
	for _, tc := range []struct {
		v      notify.Verdict
		status int
		body   string
	}{
		{notify.Success, http.StatusNoContent, ""},
		{notify.Retry, http.StatusInternalServerError, `{"code":"FAIL","message":"try later"}`},
		{notify.Reject, http.StatusBadRequest, `{"code":"FAIL","message":"try later"}`},
	} {
		rec := httptest.NewRecorder()
		a.Respond(rec, tc.v, "try later")
		if rec.Code != tc.status || rec.Body.String() != tc.body {
			t.Errorf("Respond(%s): expected %d %q, got %d %q", tc.v, tc.status, tc.body, rec.Code, rec.Body.String())
		}
	}
}

// FuzzParse sends arbitrary headers and bodies: the adapter must never panic, must refuse with a
// *notify.Error, and whatever it accepts (only what carries a valid signature) must be a
// notification of this merchant with an order number.
func FuzzParse(f *testing.F) {
	fx, err := testKeys()
	if err != nil {
		f.Fatalf("generate test keys: %v", err)
	}
	now := time.Now()
	seeds := []func() (paysim.Notification, error){
		func() (paysim.Notification, error) {
			return signer(fx, false).Payment(paidTx("F1", 100), paysim.WeChatOptions{})
		},
		func() (paysim.Notification, error) {
			return signer(fx, true).Refund(refundOf("F1", "FR1", "SUCCESS", 10), paysim.WeChatOptions{})
		},
		func() (paysim.Notification, error) {
			return signer(fx, false).Payment(paidTx("F1", 100), paysim.WeChatOptions{Probe: true})
		},
	}
	for _, s := range seeds {
		n, err := s()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(n.Header.Get("Wechatpay-Serial"), n.Header.Get("Wechatpay-Signature"), n.Header.Get("Wechatpay-Timestamp"), n.Header.Get("Wechatpay-Nonce"), n.Body)
	}
	f.Add("", "", "", "", []byte("{}"))
	a := newAdapter(f, fx, adapterOptions{now: now})
	f.Fuzz(func(t *testing.T, serial, sig, ts, nonce string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/notify/wx-main", bytes.NewReader(body))
		r.Header["Wechatpay-Serial"] = []string{serial}
		r.Header["Wechatpay-Signature"] = []string{sig}
		r.Header["Wechatpay-Timestamp"] = []string{ts}
		r.Header["Wechatpay-Nonce"] = []string{nonce}
		n, err := a.Parse(context.Background(), r, body)
		if err != nil {
			var nerr *notify.Error
			if !errors.As(err, &nerr) {
				t.Fatalf("expected a *notify.Error, got %T: %v", err, err)
			}
			return
		}
		if n.OutTradeNo == "" && n.Status != notify.StatusIgnored {
			t.Fatalf("accepted a notification without out_trade_no: %+v", n)
		}
		if n.MerchantID != testMchID {
			t.Fatalf("accepted a notification for merchant %q", n.MerchantID)
		}
	})
}

func TestKeysNeverPrintTheirMaterial(t *testing.T) {
	f := keyMaterial(t)
	k := adapterKeys(f)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(format, k); strings.Contains(got, f.apiV3Key) || strings.Contains(got, string(k.APIv3Key[:8])) {
			t.Errorf("%s of the keys shows the APIv3 key: %s", format, got)
		}
	}
}
