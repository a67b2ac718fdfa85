package alipay_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider/alipay"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

const (
	testAppID    = "2021000000000001"
	testSellerID = "2088000000000001"
)

type fixture struct {
	alipayKey *rsa.PrivateKey // Alipay's signing key; the channel holds its public half
	otherKey  *rsa.PrivateKey
}

var testKeys = sync.OnceValues(func() (*fixture, error) {
	var f fixture
	var err error
	if f.alipayKey, err = paysim.NewRSAKey(); err != nil {
		return nil, err
	}
	if f.otherKey, err = paysim.NewRSAKey(); err != nil {
		return nil, err
	}
	return &f, nil
})

func keyMaterial(t testing.TB) *fixture {
	t.Helper()
	f, err := testKeys()
	if err != nil {
		t.Fatalf("generate test keys: %v", err)
	}
	return f
}

func newAdapter(t testing.TB, f *fixture, sellerID string) *alipay.Adapter {
	t.Helper()
	a, err := alipay.New(alipay.Config{Channel: "ali-main", AppID: testAppID, SellerID: sellerID,
		Keys: keys.Static(&alipay.Keys{PublicKey: &f.alipayKey.PublicKey})})
	if err != nil {
		t.Fatalf("alipay.New: %v", err)
	}
	return a
}

func sim(f *fixture, charset string) *paysim.Alipay {
	return &paysim.Alipay{AppID: testAppID, Key: f.alipayKey, Charset: charset}
}

var paidAt = time.Date(2026, 1, 1, 10, 0, 0, 0, time.FixedZone("CST", 8*3600))

func trade(outTradeNo, status, total string) paysim.AlipayTrade {
	return paysim.AlipayTrade{OutTradeNo: outTradeNo, TradeNo: "2026010122001400000000000001", TradeStatus: status,
		TotalAmount: total, ReceiptAmount: total, SellerID: testSellerID, BuyerID: "2088102000000001",
		Subject: "测试商品 Test goods", GmtPayment: paidAt, NotifyID: "2026010100222100000000000000000001"}
}

func post(a *alipay.Adapter, target string, n paysim.Notification) (notify.Notification, error) {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(n.Body))
	for k, v := range n.Header {
		r.Header[k] = v
	}
	return a.Parse(context.Background(), r, n.Body)
}

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
	refund := trade("A1", paysim.AlipayTradeSuccess, "99.00")
	refund.OutBizNo, refund.RefundFee, refund.GmtRefund = "RF1", "10.50", paidAt.Add(time.Hour)
	fullRefund := trade("A1", paysim.AlipayTradeClosed, "99.00")
	fullRefund.OutBizNo, fullRefund.RefundFee, fullRefund.GmtRefund = "RF2", "99.00", paidAt.Add(time.Hour)
	closed := trade("A2", paysim.AlipayTradeClosed, "5.00")
	closed.GmtPayment = time.Time{}
	base := notify.Notification{Channel: "ali-main", Provider: alipay.ProviderName, MerchantID: testAppID,
		ProviderTxnID: "2026010122001400000000000001", NotifyID: "2026010100222100000000000000000001", Currency: "CNY"}
	with := func(edit func(*notify.Notification)) notify.Notification { n := base; edit(&n); return n }
	tests := []struct {
		name    string
		charset string
		trade   paysim.AlipayTrade
		want    notify.Notification
	}{
		{"TRADE_SUCCESS utf-8", "utf-8", trade("A1", paysim.AlipayTradeSuccess, "99.00"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindPayment, notify.StatusSucceeded, 9900, paidAt
		})},
		{"TRADE_SUCCESS gbk-encoded body", "gbk", trade("A1", paysim.AlipayTradeSuccess, "99.00"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindPayment, notify.StatusSucceeded, 9900, paidAt
		})},
		{"TRADE_FINISHED is a payment too", "utf-8", trade("A1", paysim.AlipayTradeFinished, "99.00"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindPayment, notify.StatusSucceeded, 9900, paidAt
		})},
		{"amount 0.1", "utf-8", trade("A1", paysim.AlipayTradeSuccess, "0.1"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindPayment, notify.StatusSucceeded, 10, paidAt
		})},
		{"amount 0.10", "utf-8", trade("A1", paysim.AlipayTradeSuccess, "0.10"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindPayment, notify.StatusSucceeded, 10, paidAt
		})},
		{"amount 00.10", "utf-8", trade("A1", paysim.AlipayTradeSuccess, "00.10"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindPayment, notify.StatusSucceeded, 10, paidAt
		})},
		{"partial refund", "utf-8", refund, with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.OutRefundNo, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindRefund, "RF1", notify.StatusSucceeded, 1050, paidAt.Add(time.Hour)
		})},
		{"full refund closes the trade but is a refund", "gbk", fullRefund, with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.OutRefundNo, n.Status, n.Amount, n.OccurredAt = "A1", notify.KindRefund, "RF2", notify.StatusSucceeded, 9900, paidAt.Add(time.Hour)
		})},
		{"TRADE_CLOSED without refund is a close", "utf-8", closed, with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status = "A2", notify.KindClose, notify.StatusSucceeded
		})},
		{"WAIT_BUYER_PAY is acknowledged and ignored", "utf-8", trade("A3", paysim.AlipayWaitBuyerPay, "1.00"), with(func(n *notify.Notification) {
			n.OutTradeNo, n.Kind, n.Status, n.OccurredAt = "A3", notify.KindPayment, notify.StatusIgnored, time.Time{}
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := must(t)(sim(f, tc.charset).Trade(tc.trade, paysim.AlipayOptions{}))
			if tc.charset == "gbk" && bytes.Contains(n.Body, []byte("%E6%B5%8B")) {
				t.Fatal("expected the gbk body to carry gbk bytes, found utf-8 ones")
			}
			got, err := post(newAdapter(t, f, testSellerID), "/notify/ali-main", n)
			if err != nil {
				t.Fatalf("expected a notification, got %v", err)
			}
			want := tc.want
			want.BodyDigest = notify.Digest(n.Body)
			if !got.OccurredAt.Equal(want.OccurredAt) {
				t.Fatalf("expected occurred at %v, got %v", want.OccurredAt, got.OccurredAt)
			}
			got.OccurredAt, want.OccurredAt = time.Time{}, time.Time{}
			if got != want {
				t.Fatalf("expected %+v,\ngot      %+v", want, got)
			}
		})
	}
}

func TestTradeFinishedDeduplicatesWithTradeSuccess(t *testing.T) {
	f := keyMaterial(t)
	a := newAdapter(t, f, "")
	success, err := post(a, "/notify/ali-main", must(t)(sim(f, "utf-8").Trade(trade("D1", paysim.AlipayTradeSuccess, "1.00"), paysim.AlipayOptions{})))
	if err != nil {
		t.Fatal(err)
	}
	finished, err := post(a, "/notify/ali-main", must(t)(sim(f, "gbk").Trade(trade("D1", paysim.AlipayTradeFinished, "1.00"), paysim.AlipayOptions{})))
	if err != nil {
		t.Fatal(err)
	}
	if success.IdempotencyKey() != finished.IdempotencyKey() {
		t.Fatalf("expected TRADE_FINISHED to share the key of TRADE_SUCCESS, got %q and %q", finished.IdempotencyKey(), success.IdempotencyKey())
	}
	if !strings.Contains(success.IdempotencyKey(), testAppID) {
		t.Fatalf("expected the key to include the app_id, got %q", success.IdempotencyKey())
	}
}

// TestQueryStringIsNeverRead: parameters appended to the notify URL (which anyone can add) never
// reach the notification; only the signed body counts.
func TestQueryStringIsNeverRead(t *testing.T) {
	f := keyMaterial(t)
	a := newAdapter(t, f, "")
	n := must(t)(sim(f, "utf-8").Trade(trade("Q1", paysim.AlipayWaitBuyerPay, "1.00"), paysim.AlipayOptions{}))
	got, err := post(a, "/notify/ali-main?trade_status=TRADE_SUCCESS&out_trade_no=EVIL&total_amount=1000.00&app_id=other&sign_type=RSA", n)
	if err != nil {
		t.Fatalf("expected the signed body to be accepted, got %v", err)
	}
	if got.Status != notify.StatusIgnored || got.OutTradeNo != "Q1" || got.Amount != 0 {
		t.Fatalf("expected the body's WAIT_BUYER_PAY for Q1 (ignored), got %+v", got)
	}

	// A body stripped of trade_status cannot borrow it from the query string.
	fields := trade("Q2", "", "1.00").Fields()
	stripped := must(t)(sim(f, "utf-8").Notify(fields, paysim.AlipayOptions{}))
	if _, err := post(a, "/notify/ali-main?trade_status=TRADE_SUCCESS", stripped); notify.ReasonOf(err) != notify.ReasonUnsupported {
		t.Fatalf("expected unsupported_event for a body without trade_status, got %v", err)
	}
	// Everything in the query string and nothing in the body is nothing.
	if _, err := a.Parse(context.Background(), httptest.NewRequest(http.MethodPost, "/notify/ali-main?"+string(n.Body), nil), nil); err == nil {
		t.Fatal("expected a notification carried only by the query string to be refused")
	}
}

func TestParseRefuses(t *testing.T) {
	f := keyMaterial(t)
	good := func() paysim.Notification {
		return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, "99.00"), paysim.AlipayOptions{}))
	}
	otherApp := &paysim.Alipay{AppID: "2021000000000999", Key: f.alipayKey}
	otherSeller := trade("A1", paysim.AlipayTradeSuccess, "1.00")
	otherSeller.SellerID = "2088000000000999"
	tests := []struct {
		name   string
		build  func() paysim.Notification
		reason notify.Reason
	}{
		{"flipped body byte", func() paysim.Notification {
			n := good()
			i := bytes.Index(n.Body, []byte("total_amount=99")) + len("total_amount=")
			n.Body[i] = '1'
			return n
		}, notify.ReasonBadSignature},
		{"field appended after signing", func() paysim.Notification {
			n := good()
			n.Body = append(n.Body, "&refund_fee=99.00&out_biz_no=X"...)
			return n
		}, notify.ReasonBadSignature},
		{"signed by a stranger", func() paysim.Notification {
			return must(t)((&paysim.Alipay{AppID: testAppID, Key: f.otherKey}).Trade(trade("A1", paysim.AlipayTradeSuccess, "1.00"), paysim.AlipayOptions{}))
		}, notify.ReasonBadSignature},
		{"sign_type=RSA downgrade", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, "1.00"), paysim.AlipayOptions{SignType: "RSA"}))
		}, notify.ReasonUnsupported},
		{"RSA (SHA1) signature without sign_type", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, "1.00"), paysim.AlipayOptions{SignType: "RSA", OmitSignType: true}))
		}, notify.ReasonBadSignature},
		{"app_id of another merchant", func() paysim.Notification {
			return must(t)(otherApp.Trade(trade("A1", paysim.AlipayTradeSuccess, "1.00"), paysim.AlipayOptions{}))
		}, notify.ReasonMerchantMismatch},
		{"seller_id of another merchant", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(otherSeller, paysim.AlipayOptions{}))
		}, notify.ReasonMerchantMismatch},
		{"amount 1.001", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, "1.001"), paysim.AlipayOptions{}))
		}, notify.ReasonMalformed},
		{"amount -1", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, "-1"), paysim.AlipayOptions{}))
		}, notify.ReasonMalformed},
		{"amount 1e2", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, "1e2"), paysim.AlipayOptions{}))
		}, notify.ReasonMalformed},
		{"missing total_amount", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("A1", paysim.AlipayTradeSuccess, ""), paysim.AlipayOptions{}))
		}, notify.ReasonMalformed},
		{"missing sign", func() paysim.Notification {
			n := good()
			i := bytes.Index(n.Body, []byte("&sign="))
			j := bytes.Index(n.Body[i+1:], []byte("&"))
			n.Body = append(n.Body[:i:i], n.Body[i+1+j:]...)
			return n
		}, notify.ReasonMalformed},
		{"duplicated field", func() paysim.Notification {
			n := good()
			n.Body = append(n.Body, "&trade_status=TRADE_SUCCESS"...)
			return n
		}, notify.ReasonMalformed},
		{"gbk bytes declared as utf-8", func() paysim.Notification {
			n := must(t)(sim(f, "gbk").Notify(map[string]string{"out_trade_no": "A1", "trade_status": "TRADE_SUCCESS", "total_amount": "1.00", "subject": "测试", "charset": "utf-8"}, paysim.AlipayOptions{}))
			return n
		}, notify.ReasonMalformed},
		{"unknown charset", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Notify(map[string]string{"out_trade_no": "A1", "trade_status": "TRADE_SUCCESS", "total_amount": "1.00", "charset": "big5"}, paysim.AlipayOptions{}))
		}, notify.ReasonMalformed},
		{"missing out_trade_no", func() paysim.Notification {
			return must(t)(sim(f, "utf-8").Trade(trade("", paysim.AlipayTradeSuccess, "1.00"), paysim.AlipayOptions{}))
		}, notify.ReasonMalformed},
		{"not a form", func() paysim.Notification {
			return paysim.Notification{Header: http.Header{}, Body: []byte("%zz")}
		}, notify.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := post(newAdapter(t, f, testSellerID), "/notify/ali-main", tc.build())
			if err == nil || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("expected refusal %s, got %v (notification %+v)", tc.reason, err, got)
			}
			var nerr *notify.Error
			if !errors.As(err, &nerr) {
				t.Fatalf("expected a *notify.Error, got %T", err)
			}
		})
	}
}

func TestRespond(t *testing.T) {
	a := newAdapter(t, keyMaterial(t), "")
	for _, tc := range []struct {
		v      notify.Verdict
		status int
		body   string
	}{
		{notify.Success, http.StatusOK, "success"},
		{notify.Retry, http.StatusInternalServerError, "fail"},
		{notify.Reject, http.StatusBadRequest, "fail"},
	} {
		rec := httptest.NewRecorder()
		a.Respond(rec, tc.v, "detail never shown to Alipay")
		if rec.Code != tc.status || rec.Body.String() != tc.body {
			t.Errorf("Respond(%s): expected %d %q, got %d %q", tc.v, tc.status, tc.body, rec.Code, rec.Body.String())
		}
	}
}

func TestLoadKeysAcceptsPEMAndBareBase64(t *testing.T) {
	f := keyMaterial(t)
	pemKey, err := paysim.PublicKeyPEM(&f.alipayKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	b64, err := paysim.PublicKeyBase64(&f.alipayKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string][]byte{"PEM": pemKey, "bare base64": []byte(b64 + "\n")} {
		pub, err := alipay.ParsePublicKey(raw)
		if err != nil || !pub.Equal(&f.alipayKey.PublicKey) {
			t.Errorf("%s: expected the Alipay public key, got %v", name, err)
		}
	}
	if _, err := alipay.ParsePublicKey([]byte("not a key")); err == nil {
		t.Error("expected garbage to be refused")
	}
}

// FuzzParse sends arbitrary bodies: the adapter must never panic and must refuse with a
// *notify.Error; whatever it accepts carries an order number of this app.
func FuzzParse(f *testing.F) {
	fx, err := testKeys()
	if err != nil {
		f.Fatalf("generate test keys: %v", err)
	}
	refund := trade("F1", paysim.AlipayTradeClosed, "9.90")
	refund.OutBizNo, refund.RefundFee = "FR1", "9.90"
	for _, c := range []struct {
		charset string
		trade   paysim.AlipayTrade
	}{
		{"utf-8", trade("F1", paysim.AlipayTradeSuccess, "99.00")},
		{"gbk", trade("F1", paysim.AlipayTradeFinished, "0.10")},
		{"utf-8", refund},
		{"gbk", trade("F2", paysim.AlipayWaitBuyerPay, "1")},
	} {
		n, err := sim(fx, c.charset).Trade(c.trade, paysim.AlipayOptions{})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(n.Body)
	}
	f.Add([]byte("a=1&a=2&sign=%%"))
	a := newAdapter(f, fx, "")
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/notify/ali-main", bytes.NewReader(body))
		n, err := a.Parse(context.Background(), r, body)
		if err != nil {
			var nerr *notify.Error
			if !errors.As(err, &nerr) {
				t.Fatalf("expected a *notify.Error, got %T: %v", err, err)
			}
			return
		}
		if n.OutTradeNo == "" || n.MerchantID != testAppID || n.Amount < 0 {
			t.Fatalf("accepted an unusable notification: %+v", n)
		}
	})
}
