package query_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/pipeline"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

const (
	mchID  = "1900000109"
	appID  = "wx8888888888888888"
	aliApp = "2021000000000001"
	seller = "2088102146225135"
)

var paidAt = time.Date(2026, 11, 29, 10, 34, 56, 0, time.UTC)

// fixture is a fake provider for one WeChat Pay and one Alipay channel, with its key sets.
type fixture struct {
	wechat, alipay *keyset.Set
	fake           *fakeprovider.Server
	// tamper, when set, rewrites every answer body of the fake (after it was signed).
	tamper atomic.Pointer[func([]byte) []byte]
	// failures answers this many requests with 500 before passing them to the fake.
	failures atomic.Int64
	srv      *httptest.Server
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{}
	var err error
	if f.wechat, err = keyset.Generate(t.TempDir(), keyset.Spec{Channel: "wx", Provider: callbackdv1alpha1.ProviderWeChatPay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: mchID, AppID: appID}}); err != nil {
		t.Fatal(err)
	}
	if f.alipay, err = keyset.Generate(t.TempDir(), keyset.Spec{Channel: "ali", Provider: callbackdv1alpha1.ProviderAlipay,
		Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: aliApp, SellerID: seller}}); err != nil {
		t.Fatal(err)
	}
	if f.fake, err = fakeprovider.New([]*keyset.Set{f.wechat, f.alipay}, fakeprovider.Options{}); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.failures.Add(-1) >= 0 {
			http.Error(w, `{"code":"SYSTEM_ERROR","message":"busy"}`, http.StatusInternalServerError)
			return
		}
		tamper := f.tamper.Load()
		if tamper == nil {
			f.fake.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		f.fake.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write((*tamper)(rec.Body.Bytes()))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// channels are the callbackd channels of the key sets, querying the fake.
func (f *fixture) channels() []config.Channel {
	settings := callbackdv1alpha1.ChannelSettings{Reconciliation: callbackdv1alpha1.Reconciliation{QueryBaseURL: f.srv.URL}}
	return []config.Channel{f.wechat.Channel(settings), f.alipay.Channel(settings)}
}

// adapters builds the callback adapters of the channels.
func adapters(t testing.TB, channels []config.Channel) map[string]notify.Adapter {
	t.Helper()
	out := map[string]notify.Adapter{}
	for _, ch := range channels {
		a, err := provider.New(t.Context(), ch, nil, nil)
		if err != nil {
			t.Fatalf("adapter of %s: %v", ch.Name, err)
		}
		out[ch.Name] = a
	}
	return out
}

func newClients(t testing.TB, channels []config.Channel, opts query.ClientOptions) (map[string]query.Client, map[string]notify.Adapter) {
	t.Helper()
	as := adapters(t, channels)
	clients, err := query.NewClients(t.Context(), channels, func(name string) (notify.Adapter, bool) {
		a, ok := as[name]
		return a, ok
	}, opts)
	if err != nil {
		t.Fatalf("NewClients: %v", err)
	}
	return clients, as
}

func order(channel, merchant, no string, amount int64) store.Order {
	return store.Order{OrderNo: no, Channel: channel, MerchantID: merchant, Amount: amount, Currency: "CNY", Status: store.StatusPending}
}

// TestStateMapping: every trade state of both providers maps to the answer a callback of the
// same state would mean, with exact amounts.
func TestStateMapping(t *testing.T) {
	f := newFixture(t)
	clients, _ := newClients(t, f.channels(), query.ClientOptions{})
	wx, ali := callbackdv1alpha1.ProviderWeChatPay, callbackdv1alpha1.ProviderAlipay
	f.fake.Put(
		fakeprovider.Trade{Provider: wx, MerchantID: mchID, OutTradeNo: "W-PAID", TransactionID: "4200000001", Amount: 12345, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: wx, MerchantID: mchID, OutTradeNo: "W-NOTPAY", Amount: 500, Currency: "CNY", State: fakeprovider.StateNotPaid},
		fakeprovider.Trade{Provider: wx, MerchantID: mchID, OutTradeNo: "W-CLOSED", Amount: 500, Currency: "CNY", State: fakeprovider.StateClosed},
		fakeprovider.Trade{Provider: ali, MerchantID: aliApp, OutTradeNo: "A-PAID", TransactionID: "2026112922001", Amount: 1, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: ali, MerchantID: aliApp, OutTradeNo: "A-BIG", TransactionID: "2026112922009", Amount: 9007199254740993, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: ali, MerchantID: aliApp, OutTradeNo: "A-WAIT", TransactionID: "2026112922002", Amount: 700, Currency: "CNY", State: fakeprovider.StateNotPaid},
		fakeprovider.Trade{Provider: ali, MerchantID: aliApp, OutTradeNo: "A-CLOSED", TransactionID: "2026112922003", Amount: 700, Currency: "CNY", State: fakeprovider.StateClosed},
	)
	cases := []struct {
		channel, merchant, orderNo string
		state                      query.State
		providerState              string
		kind                       notify.Kind
		status                     notify.Status
		amount                     int64
		txn                        string
	}{
		{"wx", mchID, "W-PAID", query.StatePaid, "SUCCESS", notify.KindPayment, notify.StatusSucceeded, 12345, "4200000001"},
		{"wx", mchID, "W-NOTPAY", query.StateNotPaid, "NOTPAY", notify.KindPayment, notify.StatusIgnored, 0, ""},
		{"wx", mchID, "W-CLOSED", query.StateClosed, "CLOSED", notify.KindClose, notify.StatusSucceeded, 0, ""},
		{"wx", mchID, "W-UNKNOWN", query.StateNotFound, "ORDER_NOT_EXIST", "", "", 0, ""},
		{"ali", aliApp, "A-PAID", query.StatePaid, "TRADE_SUCCESS", notify.KindPayment, notify.StatusSucceeded, 1, "2026112922001"},
		{"ali", aliApp, "A-BIG", query.StatePaid, "TRADE_SUCCESS", notify.KindPayment, notify.StatusSucceeded, 9007199254740993, "2026112922009"},
		{"ali", aliApp, "A-WAIT", query.StateNotPaid, "WAIT_BUYER_PAY", notify.KindPayment, notify.StatusIgnored, 0, "2026112922002"},
		{"ali", aliApp, "A-CLOSED", query.StateClosed, "TRADE_CLOSED", notify.KindClose, notify.StatusSucceeded, 0, "2026112922003"},
		{"ali", aliApp, "A-UNKNOWN", query.StateNotFound, "ACQ.TRADE_NOT_EXIST", "", "", 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.orderNo, func(t *testing.T) {
			a, err := clients[tc.channel].Query(t.Context(), order(tc.channel, tc.merchant, tc.orderNo, 1))
			if err != nil {
				t.Fatalf("expected an answer, got %v", err)
			}
			if a.State != tc.state || a.ProviderState != tc.providerState {
				t.Errorf("state: expected %s (%s), got %s (%s)", tc.state, tc.providerState, a.State, a.ProviderState)
			}
			n := a.Notification
			if n.Kind != tc.kind || n.Status != tc.status || n.Amount != tc.amount || n.ProviderTxnID != tc.txn {
				t.Errorf("notification: expected %s %s amount %d txn %q, got %s %s amount %d txn %q",
					tc.kind, tc.status, tc.amount, tc.txn, n.Kind, n.Status, n.Amount, n.ProviderTxnID)
			}
			if tc.state == query.StateNotFound {
				return
			}
			if n.Channel != tc.channel || n.MerchantID != tc.merchant || n.OutTradeNo != tc.orderNo {
				t.Errorf("identity: expected %s/%s/%s, got %s/%s/%s", tc.channel, tc.merchant, tc.orderNo, n.Channel, n.MerchantID, n.OutTradeNo)
			}
		})
	}
}

// TestQueryAndCallbackShareTheKey: the notification built from a query answer has the same
// idempotency key and gate key as the provider's callback of the same payment, so the gates and
// the database see one event.
func TestQueryAndCallbackShareTheKey(t *testing.T) {
	f := newFixture(t)
	channels := f.channels()
	clients, as := newClients(t, channels, query.ClientOptions{})
	f.fake.Put(
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderWeChatPay, MerchantID: mchID, OutTradeNo: "K-1", TransactionID: "4200000777", Amount: 990, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderAlipay, MerchantID: aliApp, OutTradeNo: "K-1", TransactionID: "2026112900777", Amount: 990, Currency: "CNY", PaidAt: paidAt},
	)

	wx := &paysim.WeChatPay{APIv3Key: f.wechat.APIv3Key, Serial: f.wechat.Manifest.WeChatSerial, Key: f.wechat.PlatformKey}
	wxNote, err := wx.Payment(paysim.WeChatTransaction{MchID: mchID, AppID: appID, OutTradeNo: "K-1", TransactionID: "4200000777",
		TradeType: "JSAPI", TradeState: "SUCCESS", SuccessTime: paysim.WeChatTime(paidAt),
		Amount: paysim.WeChatAmount{Total: 990, PayerTotal: 990, Currency: "CNY", PayerCurrency: "CNY"}}, paysim.WeChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ali := &paysim.Alipay{AppID: aliApp, Key: f.alipay.AlipayKey}
	aliNote, err := ali.Trade(paysim.AlipayTrade{OutTradeNo: "K-1", TradeNo: "2026112900777", TradeStatus: paysim.AlipayTradeSuccess,
		TotalAmount: "9.90", SellerID: seller, GmtPayment: paidAt}, paysim.AlipayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		channel, merchant string
		callback          paysim.Notification
	}{{"wx", mchID, wxNote}, {"ali", aliApp, aliNote}} {
		t.Run(tc.channel, func(t *testing.T) {
			req, err := tc.callback.Request(t.Context(), "http://127.0.0.1/notify/"+tc.channel)
			if err != nil {
				t.Fatal(err)
			}
			fromCallback, err := as[tc.channel].Parse(t.Context(), req, tc.callback.Body)
			if err != nil {
				t.Fatalf("callback refused: %v", err)
			}
			a, err := clients[tc.channel].Query(t.Context(), order(tc.channel, tc.merchant, "K-1", 990))
			if err != nil {
				t.Fatalf("query: %v", err)
			}
			fromQuery := a.Notification
			if got, want := fromQuery.IdempotencyKey(), fromCallback.IdempotencyKey(); got != want {
				t.Errorf("idempotency key: expected the callback's %q, got %q", want, got)
			}
			if got, want := pipeline.GateKey(fromQuery), pipeline.GateKey(fromCallback); got != want {
				t.Errorf("gate key: expected the callback's, got a different one")
			}
			if fromQuery.Amount != fromCallback.Amount || fromQuery.Currency != fromCallback.Currency ||
				fromQuery.ProviderTxnID != fromCallback.ProviderTxnID || !fromQuery.OccurredAt.Equal(fromCallback.OccurredAt) {
				t.Errorf("fields: expected the callback's %d %s %s %s, got %d %s %s %s",
					fromCallback.Amount, fromCallback.Currency, fromCallback.ProviderTxnID, fromCallback.OccurredAt,
					fromQuery.Amount, fromQuery.Currency, fromQuery.ProviderTxnID, fromQuery.OccurredAt)
			}
		})
	}
}

// TestSignatures: the provider refuses requests not signed with the merchant's key, and the
// client refuses answers that do not verify with the provider's key. Both are permanent.
func TestSignatures(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t) // a second set of keys, none of them this channel's
	f.fake.Put(
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderWeChatPay, MerchantID: mchID, OutTradeNo: "S-1", TransactionID: "4200000001", Amount: 12345, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderAlipay, MerchantID: aliApp, OutTradeNo: "S-1", TransactionID: "2026112922001", Amount: 12345, Currency: "CNY", PaidAt: paidAt},
	)

	t.Run("requests signed with another merchant key are refused by the provider", func(t *testing.T) {
		channels := f.channels()
		channels[0].Keys.WeChatMerchantKeyFile = other.wechat.Manifest.Keys.WeChatMerchantKeyFile
		channels[1].Keys.AlipayAppPrivateKeyFile = other.alipay.Manifest.Keys.AlipayAppPrivateKeyFile
		clients, _ := newClients(t, channels, query.ClientOptions{})
		expectPermanent(t, clients["wx"], order("wx", mchID, "S-1", 12345))
		expectPermanent(t, clients["ali"], order("ali", aliApp, "S-1", 12345))
		if n := f.fake.Queries(callbackdv1alpha1.ProviderWeChatPay, mchID, "S-1") + f.fake.Queries(callbackdv1alpha1.ProviderAlipay, aliApp, "S-1"); n != 0 {
			t.Errorf("the provider looked up %d orders for forged requests; expected none", n)
		}
	})

	t.Run("answers altered after signing are refused by the client", func(t *testing.T) {
		clients, _ := newClients(t, f.channels(), query.ClientOptions{})
		tamper := func(b []byte) []byte {
			b = bytes.Replace(b, []byte(`"total":12345`), []byte(`"total":1`), 1)
			return bytes.Replace(b, []byte(`"total_amount":"123.45"`), []byte(`"total_amount":"0.01"`), 1)
		}
		f.tamper.Store(&tamper)
		defer f.tamper.Store(nil)
		expectPermanent(t, clients["wx"], order("wx", mchID, "S-1", 12345))
		expectPermanent(t, clients["ali"], order("ali", aliApp, "S-1", 12345))
	})

	t.Run("answers signed with another provider key are refused by the client", func(t *testing.T) {
		channels := f.channels()
		channels[0].Keys.WeChatPublicKeyDir = other.wechat.Manifest.Keys.WeChatPublicKeyDir
		channels[1].Keys.AlipayPublicKeyFile = other.alipay.Manifest.Keys.AlipayPublicKeyFile
		clients, _ := newClients(t, channels, query.ClientOptions{})
		expectPermanent(t, clients["wx"], order("wx", mchID, "S-1", 12345))
		expectPermanent(t, clients["ali"], order("ali", aliApp, "S-1", 12345))
	})

	t.Run("the genuine keys work", func(t *testing.T) {
		clients, _ := newClients(t, f.channels(), query.ClientOptions{})
		for name, c := range clients {
			merchant := map[string]string{"wx": mchID, "ali": aliApp}[name]
			a, err := c.Query(t.Context(), order(name, merchant, "S-1", 12345))
			if err != nil || a.State != query.StatePaid || a.Notification.Amount != 12345 {
				t.Errorf("%s: expected paid 12345, got %+v, %v", name, a, err)
			}
		}
	})
}

func expectPermanent(t *testing.T, c query.Client, o store.Order) {
	t.Helper()
	a, err := c.Query(t.Context(), o)
	if !errors.Is(err, query.ErrPermanent) {
		t.Errorf("%s: expected a permanent failure, got answer %+v, error %v", o.Channel, a, err)
	}
}

// TestTransientFailures: server errors, a dead endpoint and a slow provider are transient.
func TestTransientFailures(t *testing.T) {
	f := newFixture(t)
	f.fake.Put(fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderWeChatPay, MerchantID: mchID, OutTradeNo: "T-1", TransactionID: "4200000001", Amount: 1, Currency: "CNY", PaidAt: paidAt})

	t.Run("HTTP 500", func(t *testing.T) {
		clients, _ := newClients(t, f.channels(), query.ClientOptions{})
		for name, c := range clients {
			f.failures.Store(1)
			merchant := map[string]string{"wx": mchID, "ali": aliApp}[name]
			if _, err := c.Query(t.Context(), order(name, merchant, "T-1", 1)); !errors.Is(err, query.ErrTransient) {
				t.Errorf("%s: expected a transient failure, got %v", name, err)
			}
		}
	})

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + ln.Addr().String()
		ln.Close()
		channels := f.channels()
		for i := range channels {
			channels[i].Reconciliation.QueryBaseURL = dead
		}
		clients, _ := newClients(t, channels, query.ClientOptions{})
		if _, err := clients["wx"].Query(t.Context(), order("wx", mchID, "T-1", 1)); !errors.Is(err, query.ErrTransient) {
			t.Errorf("expected a transient failure, got %v", err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer slow.Close()
		defer close(release)
		channels := f.channels()
		channels[0].Reconciliation.QueryBaseURL = slow.URL
		clients, _ := newClients(t, channels, query.ClientOptions{Timeout: 100 * time.Millisecond})
		if _, err := clients["wx"].Query(t.Context(), order("wx", mchID, "T-1", 1)); !errors.Is(err, query.ErrTransient) {
			t.Errorf("expected a transient failure, got %v", err)
		}
	})
}

// TestRequestFormat: the WeChat Pay query is the documented GET with the merchant's mchid, and
// errors never carry key material.
func TestRequestFormat(t *testing.T) {
	f := newFixture(t)
	var got atomic.Pointer[http.Request]
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Clone(context.Background()))
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"code":"PARAM_ERROR","message":"bad"}`)
	}))
	defer spy.Close()
	channels := f.channels()
	channels[0].Reconciliation.QueryBaseURL = spy.URL + "/"
	clients, _ := newClients(t, channels, query.ClientOptions{Now: func() time.Time { return time.Unix(1764400000, 0) }})
	_, err := clients["wx"].Query(t.Context(), order("wx", mchID, "A/B 1", 1))
	if !errors.Is(err, query.ErrPermanent) {
		t.Fatalf("HTTP 400: expected a permanent failure, got %v", err)
	}
	r := got.Load()
	if r == nil {
		t.Fatal("the client sent no request")
	}
	if want := "/v3/pay/transactions/out-trade-no/A%2FB%201?mchid=" + mchID; r.Method != http.MethodGet || r.URL.RequestURI() != want {
		t.Errorf("request: expected GET %s, got %s %s", want, r.Method, r.URL.RequestURI())
	}
	auth := r.Header.Get("Authorization")
	for _, part := range []string{`WECHATPAY2-SHA256-RSA2048 mchid="` + mchID + `"`, `timestamp="` + strconv.Itoa(1764400000) + `"`,
		`serial_no="` + f.wechat.Manifest.Keys.WeChatMerchantSerial + `"`, `nonce_str="`, `signature="`} {
		if !bytes.Contains([]byte(auth), []byte(part)) {
			t.Errorf("Authorization: expected it to contain %s, got %s", part, auth)
		}
	}

	if _, err := clients["wx"].Query(t.Context(), order("wx", "another-mchid", "X", 1)); !errors.Is(err, query.ErrPermanent) {
		t.Errorf("an order of another merchant: expected a permanent failure, got %v", err)
	}
}

// TestNewClientsLeavesOutUnqueryableChannels: channels without signing keys or without a query
// API get no client.
func TestNewClientsLeavesOutUnqueryableChannels(t *testing.T) {
	f := newFixture(t)
	channels := f.channels()
	channels[0].Keys.WeChatMerchantKeyFile = ""
	clients, _ := newClients(t, channels, query.ClientOptions{})
	if _, ok := clients["wx"]; ok {
		t.Error("a WeChat Pay channel without a merchant key: expected no client")
	}
	if _, ok := clients["ali"]; !ok {
		t.Error("the Alipay channel: expected a client")
	}
}
