package fakeprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	smartwalle "github.com/smartwalle/alipay/v3"
	"github.com/wechatpay-apiv3/wechatpay-go/core"
	"github.com/wechatpay-apiv3/wechatpay-go/core/option"
	"github.com/wechatpay-apiv3/wechatpay-go/services/payments/jsapi"
	wxutils "github.com/wechatpay-apiv3/wechatpay-go/utils"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

const (
	mchID   = "1900000109"
	appID   = "wx8888888888888888"
	aliApp  = "2021000000000001"
	seller  = "2088102146225135"
	orderNo = "ORD-20261129-0001"
)

var paidAt = time.Date(2026, 11, 29, 10, 34, 56, 0, time.UTC)

// fixture is a fake provider serving one WeChat Pay and one Alipay channel.
type fixture struct {
	wechat, alipay *keyset.Set
	fake           *fakeprovider.Server
	srv            *httptest.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	wechat, err := keyset.Generate(t.TempDir(), keyset.Spec{Channel: "wx", Provider: callbackdv1alpha1.ProviderWeChatPay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: mchID, AppID: appID}})
	if err != nil {
		t.Fatal(err)
	}
	alipay, err := keyset.Generate(t.TempDir(), keyset.Spec{Channel: "ali", Provider: callbackdv1alpha1.ProviderAlipay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: aliApp, SellerID: seller}})
	if err != nil {
		t.Fatal(err)
	}
	fake, err := fakeprovider.New([]*keyset.Set{wechat, alipay}, fakeprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	fake.Put(
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderWeChatPay, MerchantID: mchID, OutTradeNo: orderNo,
			TransactionID: "4200000001", Amount: 12345, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderWeChatPay, MerchantID: mchID, OutTradeNo: "UNPAID-1",
			Amount: 500, Currency: "CNY", State: fakeprovider.StateNotPaid},
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderAlipay, MerchantID: aliApp, OutTradeNo: orderNo,
			TransactionID: "2026112922001", Amount: 12345, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderAlipay, MerchantID: aliApp, OutTradeNo: "CLOSED-1",
			TransactionID: "2026112922002", Amount: 1, Currency: "CNY", State: fakeprovider.StateClosed},
	)
	return &fixture{wechat: wechat, alipay: alipay, fake: fake, srv: srv}
}

// redirect sends every request of the official SDKs, addressed to the providers' real hosts,
// to the fake on loopback, keeping path and query (what the signatures cover).
type redirect struct{ base *url.URL }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = r.base.Scheme, r.base.Host, ""
	return http.DefaultTransport.RoundTrip(out)
}

func (f *fixture) sdkHTTPClient(t *testing.T) *http.Client {
	base, err := url.Parse(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: redirect{base: base}, Timeout: 10 * time.Second}
}

// wechatSDK is wechatpay-go's client holding the merchant key from the key set and verifying
// answers with WeChat Pay's public key (PUB_KEY_ID_ mode).
func (f *fixture) wechatSDK(t *testing.T) jsapi.JsapiApiService {
	t.Helper()
	m := f.wechat.Manifest
	merchantKey, err := wxutils.LoadPrivateKeyWithPath(m.Keys.WeChatMerchantKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	client, err := core.NewClient(context.Background(),
		option.WithWechatPayPublicKeyAuthCipher(mchID, m.Keys.WeChatMerchantSerial, merchantKey, m.WeChatSerial, &f.wechat.PlatformKey.PublicKey),
		option.WithHTTPClient(f.sdkHTTPClient(t)))
	if err != nil {
		t.Fatalf("wechatpay-go NewClient: %v", err)
	}
	return jsapi.JsapiApiService{Client: client}
}

// TestWeChatQueryInteropWithWechatpayGo: wechatpay-go signs the query with the merchant key
// from `paysim keys`, the fake verifies it, and the SDK verifies the fake's signed answer.
func TestWeChatQueryInteropWithWechatpayGo(t *testing.T) {
	f := newFixture(t)
	svc := f.wechatSDK(t)
	ctx := context.Background()

	tx, _, err := svc.QueryOrderByOutTradeNo(ctx, jsapi.QueryOrderByOutTradeNoRequest{OutTradeNo: core.String(orderNo), Mchid: core.String(mchID)})
	if err != nil {
		t.Fatalf("query a paid order: expected success, got %v", err)
	}
	if got := str(tx.TradeState); got != "SUCCESS" {
		t.Errorf("trade_state: expected SUCCESS, got %q", got)
	}
	if tx.Amount == nil || i64(tx.Amount.Total) != 12345 || str(tx.Amount.Currency) != "CNY" {
		t.Errorf("amount: expected 12345 CNY, got %+v", tx.Amount)
	}
	if got := str(tx.TransactionId); got != "4200000001" {
		t.Errorf("transaction_id: expected 4200000001, got %q", got)
	}
	if got := str(tx.SuccessTime); got != "2026-11-29T18:34:56+08:00" {
		t.Errorf("success_time: expected 2026-11-29T18:34:56+08:00, got %q", got)
	}
	if got := str(tx.Appid); got != appID {
		t.Errorf("appid: expected %s, got %q", appID, got)
	}

	tx, _, err = svc.QueryOrderByOutTradeNo(ctx, jsapi.QueryOrderByOutTradeNoRequest{OutTradeNo: core.String("UNPAID-1"), Mchid: core.String(mchID)})
	if err != nil {
		t.Fatalf("query an unpaid order: %v", err)
	}
	if got := str(tx.TradeState); got != "NOTPAY" {
		t.Errorf("unpaid order trade_state: expected NOTPAY, got %q", got)
	}

	_, result, err := svc.QueryOrderByOutTradeNo(ctx, jsapi.QueryOrderByOutTradeNoRequest{OutTradeNo: core.String("NO-SUCH-ORDER"), Mchid: core.String(mchID)})
	var apiErr *core.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "ORDER_NOT_EXIST" {
		t.Fatalf("unknown order: expected 404 ORDER_NOT_EXIST, got %v (result %+v)", err, result)
	}
	if got := f.fake.Queries(callbackdv1alpha1.ProviderWeChatPay, mchID, orderNo); got != 1 {
		t.Errorf("queries of %s: expected 1, got %d", orderNo, got)
	}
}

// TestWeChatQueryRefusesBadRequestSignatures: the fake is no softer than WeChat Pay.
func TestWeChatQueryRefusesBadRequestSignatures(t *testing.T) {
	f := newFixture(t)
	path := "/v3/pay/transactions/out-trade-no/" + orderNo + "?mchid=" + mchID
	now := time.Now().Unix()
	cases := []struct {
		name, auth string
	}{
		{"no authorization", ""},
		{"other scheme", `Bearer abc`},
		{"forged signature", `WECHATPAY2-SHA256-RSA2048 mchid="` + mchID + `",nonce_str="n",timestamp="` + itoa(now) + `",serial_no="` + f.wechat.Manifest.Keys.WeChatMerchantSerial + `",signature="AAAA"`},
		{"unknown serial", `WECHATPAY2-SHA256-RSA2048 mchid="` + mchID + `",nonce_str="n",timestamp="` + itoa(now) + `",serial_no="DEADBEEF",signature="AAAA"`},
		{"other mchid", `WECHATPAY2-SHA256-RSA2048 mchid="1",nonce_str="n",timestamp="` + itoa(now) + `",serial_no="` + f.wechat.Manifest.Keys.WeChatMerchantSerial + `",signature="AAAA"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte(`"SIGN_ERROR"`)) {
				t.Fatalf("expected 401 SIGN_ERROR, got %d %s", resp.StatusCode, body)
			}
		})
	}
	if got := f.fake.Queries(callbackdv1alpha1.ProviderWeChatPay, mchID, orderNo); got != 0 {
		t.Errorf("refused queries must not count as lookups: expected 0, got %d", got)
	}
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func i64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

// alipaySDK is smartwalle/alipay's client with the application key from the key set, verifying
// answers with the Alipay public key callbackd is configured with.
func (f *fixture) alipaySDK(t *testing.T) *smartwalle.Client {
	t.Helper()
	m := f.alipay.Manifest
	appKey, err := os.ReadFile(m.Keys.AlipayAppPrivateKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := smartwalle.New(aliApp, string(appKey), true,
		smartwalle.WithProductionGateway(f.srv.URL+"/gateway.do"), smartwalle.WithHTTPClient(f.sdkHTTPClient(t)))
	if err != nil {
		t.Fatalf("smartwalle New: %v", err)
	}
	pub, err := os.ReadFile(m.Keys.AlipayPublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadAliPayPublicKey(string(pub)); err != nil {
		t.Fatalf("smartwalle LoadAliPayPublicKey: %v", err)
	}
	return c
}

// TestAlipayQueryInteropWithSmartwalle: smartwalle/alipay signs alipay.trade.query with the
// application key, the fake verifies it, and the SDK verifies the fake's signed answer.
func TestAlipayQueryInteropWithSmartwalle(t *testing.T) {
	f := newFixture(t)
	c := f.alipaySDK(t)
	ctx := context.Background()

	cases := []struct {
		orderNo     string
		wantCode    smartwalle.Code
		wantStatus  smartwalle.TradeStatus
		wantAmount  string
		wantSubCode string
	}{
		{orderNo, smartwalle.CodeSuccess, smartwalle.TradeStatusSuccess, "123.45", ""},
		{"CLOSED-1", smartwalle.CodeSuccess, smartwalle.TradeStatusClosed, "0.01", ""},
		{"NO-SUCH-ORDER", smartwalle.Code("40004"), "", "", "ACQ.TRADE_NOT_EXIST"},
	}
	for _, tc := range cases {
		t.Run(tc.orderNo, func(t *testing.T) {
			rsp, err := c.TradeQuery(ctx, smartwalle.TradeQuery{OutTradeNo: tc.orderNo})
			if err != nil {
				t.Fatalf("TradeQuery: expected a verified answer, got %v", err)
			}
			if rsp.Code != tc.wantCode || rsp.TradeStatus != tc.wantStatus || rsp.TotalAmount != tc.wantAmount || rsp.SubCode != tc.wantSubCode {
				t.Fatalf("expected code=%s status=%q amount=%q sub_code=%q, got code=%s status=%q amount=%q sub_code=%q",
					tc.wantCode, tc.wantStatus, tc.wantAmount, tc.wantSubCode, rsp.Code, rsp.TradeStatus, rsp.TotalAmount, rsp.SubCode)
			}
		})
	}
	if got := f.fake.Queries(callbackdv1alpha1.ProviderAlipay, aliApp, orderNo); got != 1 {
		t.Errorf("queries of %s: expected 1, got %d", orderNo, got)
	}
}

// TestAlipayQueryRefusesBadRequestSignatures: a request signed with another key, or asking for
// the RSA (SHA1) downgrade, gets isv.invalid-signature.
func TestAlipayQueryRefusesBadRequestSignatures(t *testing.T) {
	f := newFixture(t)
	other, err := keyset.Generate(t.TempDir(), keyset.Spec{Channel: "ali2", Provider: callbackdv1alpha1.ProviderAlipay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: aliApp}})
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := os.ReadFile(other.Manifest.Keys.AlipayAppPrivateKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := smartwalle.New(aliApp, string(otherKey), true, smartwalle.WithProductionGateway(f.srv.URL+"/gateway.do"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := c.URLValues(smartwalle.TradeQuery{OutTradeNo: orderNo})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("signed with another application key", func(t *testing.T) {
		expectInvalidSignature(t, f.srv.URL, values)
	})
	t.Run("sign_type RSA", func(t *testing.T) {
		v := url.Values{}
		for k, vs := range values {
			v[k] = vs
		}
		v.Set("sign_type", "RSA")
		expectInvalidSignature(t, f.srv.URL, v)
	})
}

func expectInvalidSignature(t *testing.T, base string, values url.Values) {
	t.Helper()
	resp, err := http.PostForm(base+"/gateway.do", values)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		Response struct {
			Code    string `json:"code"`
			SubCode string `json:"sub_code"`
		} `json:"alipay_trade_query_response"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, body)
	}
	if doc.Response.Code != "40002" || doc.Response.SubCode != "isv.invalid-signature" {
		t.Fatalf("expected 40002 isv.invalid-signature, got %s", body)
	}
}

// TestPutTradesSideDoor: trades registered over HTTP are served like those given to Put, and
// malformed registrations are refused without effect.
func TestPutTradesSideDoor(t *testing.T) {
	f := newFixture(t)
	put := func(body string) int {
		req, _ := http.NewRequest(http.MethodPut, f.srv.URL+"/paysim/trades", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(`[{"provider":"alipay","merchant_id":"` + aliApp + `","out_trade_no":"SIDE-1","transaction_id":"T1","amount":99,"currency":"CNY","paid_at":"2026-11-29T10:00:00Z"}]`); code != http.StatusNoContent {
		t.Fatalf("PUT a valid trade: expected 204, got %d", code)
	}
	for _, bad := range []string{`{}`, `[{"provider":"alipay"}]`, `[{"provider":"alipay","merchant_id":"x","out_trade_no":"y","state":"MAYBE"}]`, `[{"nope":1}]`} {
		if code := put(bad); code != http.StatusBadRequest {
			t.Errorf("PUT %s: expected 400, got %d", bad, code)
		}
	}
	rsp, err := f.alipaySDK(t).TradeQuery(context.Background(), smartwalle.TradeQuery{OutTradeNo: "SIDE-1"})
	if err != nil {
		t.Fatal(err)
	}
	if rsp.TradeStatus != smartwalle.TradeStatusSuccess || rsp.TotalAmount != "0.99" {
		t.Fatalf("expected SIDE-1 TRADE_SUCCESS 0.99, got %s %q", rsp.TradeStatus, rsp.TotalAmount)
	}
}
