package storm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

var paidAt = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// keySet generates a key set of provider p for the test (RSA key generation is slow).
func keySet(t testing.TB, p callbackdv1alpha1.Provider) *keyset.Set {
	t.Helper()
	m := callbackdv1alpha1.MerchantIdentity{MerchantID: "acct_1"}
	switch p {
	case callbackdv1alpha1.ProviderWeChatPay:
		m = callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wx8888888888888888"}
	case callbackdv1alpha1.ProviderAlipay:
		m = callbackdv1alpha1.MerchantIdentity{MerchantID: "2021000000000001", SellerID: "2088102146225135"}
	}
	set, err := keyset.Generate(t.TempDir(), keyset.Spec{Channel: "ch-" + string(p), Provider: p, Merchant: m})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// adapterServer is a loopback server that parses every request with callbackd's own adapter for
// the key set's channel (built by provider.New from the key files, as callbackd does) and
// answers success, recording what it parsed.
type adapterServer struct {
	*httptest.Server
	mu     sync.Mutex
	parsed []notify.Notification
	failed []string
}

func newAdapterServer(t *testing.T, set *keyset.Set) *adapterServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	adapter, err := provider.New(ctx, set.Channel(callbackdv1alpha1.ChannelSettings{}), nil, nil)
	if err != nil {
		t.Fatalf("callbackd's adapter for the key set: %v", err)
	}
	s := &adapterServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		n, err := adapter.Parse(r.Context(), r, body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.failed = append(s.failed, err.Error())
			adapter.Respond(w, notify.Reject, "refused")
			return
		}
		s.parsed = append(s.parsed, n)
		adapter.Respond(w, notify.Success, "")
	}))
	t.Cleanup(s.Close)
	return s
}

func newSender(t *testing.T, set *keyset.Set, url string) *storm.Sender {
	t.Helper()
	n, err := storm.NewNotifier(set)
	if err != nil {
		t.Fatal(err)
	}
	s, err := storm.NewSender(n, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNotificationsAcceptedByCallbackdAdapters: for every provider, a storm's notifications are
// accepted by callbackd's adapter configured from the key files `paysim keys` wrote, the
// adapter's answer reads as success, and what it parsed is the trade that was paid. Resends
// carry the same notification id.
func TestNotificationsAcceptedByCallbackdAdapters(t *testing.T) {
	for _, p := range []callbackdv1alpha1.Provider{
		callbackdv1alpha1.ProviderWeChatPay, callbackdv1alpha1.ProviderAlipay,
		callbackdv1alpha1.ProviderStripe, callbackdv1alpha1.ProviderStandardWebhooks,
	} {
		t.Run(string(p), func(t *testing.T) {
			set := keySet(t, p)
			srv := newAdapterServer(t, set)
			sender := newSender(t, set, srv.URL+"/notify/"+set.Manifest.Channel)
			trade := storm.Trade{OrderNo: "ORD-1", Amount: 1234, Currency: "CNY", TransactionID: "TXN-1", PaidAt: paidAt}
			for i := 0; i < 2; i++ {
				a, err := sender.Send(context.Background(), trade)
				if err != nil {
					t.Fatal(err)
				}
				if a.Outcome != storm.OutcomeSuccess {
					t.Fatalf("attempt %d: expected success, got %s (%d %q); adapter errors: %v", i+1, a.Outcome, a.Status, a.Body, srv.failed)
				}
			}
			if len(srv.parsed) != 2 {
				t.Fatalf("expected 2 parsed notifications, got %d", len(srv.parsed))
			}
			n := srv.parsed[0]
			if n.OutTradeNo != "ORD-1" || n.Amount != 1234 || n.ProviderTxnID != "TXN-1" || n.Kind != notify.KindPayment ||
				n.MerchantID != set.Manifest.Merchant.MerchantID || (n.Currency != "" && n.Currency != "CNY") {
				t.Errorf("expected payment ORD-1 1234 CNY TXN-1 for %s, got %+v", set.Manifest.Merchant.MerchantID, n)
			}
			if srv.parsed[0].NotifyID != srv.parsed[1].NotifyID {
				t.Errorf("a resend must keep the notification id: %q then %q", srv.parsed[0].NotifyID, srv.parsed[1].NotifyID)
			}
			if srv.parsed[0].BodyDigest == srv.parsed[1].BodyDigest && p == callbackdv1alpha1.ProviderWeChatPay {
				t.Errorf("a WeChat Pay resend must be encrypted and signed afresh, got the same body twice")
			}
		})
	}
}

// TestStormDeliversEveryDuplicate: N orders × D duplicates are all sent, all answered, each
// order exactly D times, and the summary adds up.
func TestStormDeliversEveryDuplicate(t *testing.T) {
	set := keySet(t, callbackdv1alpha1.ProviderStandardWebhooks)
	srv := newAdapterServer(t, set)
	sender := newSender(t, set, srv.URL+"/notify/sw")
	trades := storm.NewTrades("STORM", 25, "CNY", paidAt)
	sum, err := sender.Storm(context.Background(), storm.Config{Trades: trades, Duplicates: 4, Concurrency: 8, Shuffle: true})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Orders != 25 || sum.OrdersAcknowledged != 25 || sum.Sent != 100 || sum.Answers.Success != 100 || sum.Answers.Retry+sum.Answers.Reject+sum.Answers.TransportError != 0 {
		t.Fatalf("expected 25 orders, 100 sent, 100 success; got %+v", sum)
	}
	perOrder := map[string]int{}
	for _, n := range srv.parsed {
		perOrder[n.OutTradeNo]++
	}
	for _, tr := range trades {
		if perOrder[tr.OrderNo] != 4 {
			t.Errorf("order %s: expected 4 deliveries, got %d", tr.OrderNo, perOrder[tr.OrderNo])
		}
	}
	l := sum.Latency
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
		t.Errorf("latency percentiles must be positive and ordered, got %+v", l)
	}
	if sum.Throughput <= 0 || sum.DurationSeconds <= 0 {
		t.Errorf("expected a positive duration and throughput, got %+v", sum)
	}
	var decoded storm.Summary
	b, _ := json.Marshal(sum)
	if err := json.Unmarshal(b, &decoded); err != nil || decoded.Answers != sum.Answers || decoded.Sent != sum.Sent {
		t.Errorf("the JSON summary must round-trip: %s (%v)", b, err)
	}
}

// TestStormCountsTransportErrors: a target that closes connections without answering yields
// transport errors, not successes.
func TestStormCountsTransportErrors(t *testing.T) {
	set := keySet(t, callbackdv1alpha1.ProviderStandardWebhooks)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	sum, err := newSender(t, set, srv.URL).Storm(context.Background(), storm.Config{Trades: storm.NewTrades("T", 3, "CNY", paidAt), Duplicates: 2, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 6 || sum.Answers.TransportError != 6 || sum.OrdersAcknowledged != 0 || len(sum.Unacknowledged) != 3 {
		t.Fatalf("expected 6 sent, 6 transport errors; got %+v", sum)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		provider callbackdv1alpha1.Provider
		status   int
		body     string
		want     storm.Outcome
	}{
		{callbackdv1alpha1.ProviderWeChatPay, 204, "", storm.OutcomeSuccess},
		{callbackdv1alpha1.ProviderWeChatPay, 200, `{"code":"FAIL"}`, storm.OutcomeSuccess}, // the status decides
		{callbackdv1alpha1.ProviderWeChatPay, 202, "", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderWeChatPay, 500, `{"code":"FAIL"}`, storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderWeChatPay, 400, `{"code":"FAIL"}`, storm.OutcomeReject},
		{callbackdv1alpha1.ProviderWeChatPay, 429, "", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderAlipay, 200, "success", storm.OutcomeSuccess},
		{callbackdv1alpha1.ProviderAlipay, 200, "success\n", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderAlipay, 200, "SUCCESS", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderAlipay, 200, "fail", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderAlipay, 500, "success", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderAlipay, 400, "fail", storm.OutcomeReject},
		{callbackdv1alpha1.ProviderStripe, 202, "", storm.OutcomeSuccess},
		{callbackdv1alpha1.ProviderStandardWebhooks, 204, "", storm.OutcomeSuccess},
		{callbackdv1alpha1.ProviderStandardWebhooks, 503, "", storm.OutcomeRetry},
		{callbackdv1alpha1.ProviderStandardWebhooks, 401, "", storm.OutcomeReject},
		{callbackdv1alpha1.ProviderStandardWebhooks, 302, "", storm.OutcomeRetry},
	}
	for _, tc := range cases {
		if got := storm.Classify(tc.provider, tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("%s answered %d %q: expected %s, got %s", tc.provider, tc.status, tc.body, tc.want, got)
		}
	}
}

func TestCheckTargetAcceptsOnlyLoopback(t *testing.T) {
	cases := []struct {
		target string
		ok     bool
	}{
		{"http://127.0.0.1:8080/notify/wx", true},
		{"http://127.9.9.9/notify/wx", true},
		{"https://[::1]:8443/notify/wx", true},
		{"http://localhost:8080/notify/wx", true},
		{"http://10.0.0.1/notify/wx", false},
		{"http://0.0.0.0:8080/", false},
		{"http://example.com/notify/wx", false},
		{"http://localhost.example.com/", false},
		{"http://127.0.0.1.nip.io/", false},
		{"ftp://127.0.0.1/", false},
		{"127.0.0.1:8080", false},
	}
	for _, tc := range cases {
		_, err := storm.CheckTarget(tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTarget(%q): expected ok=%v, got error %v", tc.target, tc.ok, err)
		}
		if !tc.ok && strings.HasPrefix(tc.target, "http") && !errors.Is(err, storm.ErrNotLoopback) {
			t.Errorf("CheckTarget(%q): expected ErrNotLoopback, got %v", tc.target, err)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	got, err := storm.ParseSchedule("15s, 15s,30s,3m,1h")
	want := []time.Duration{15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute, time.Hour}
	if err != nil || len(got) != len(want) {
		t.Fatalf("expected %v, got %v (%v)", want, got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("expected %v, got %v", want, got)
		}
	}
	for _, bad := range []string{"", ",", "15", "0s", "-1s", "1x"} {
		if _, err := storm.ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q): expected an error", bad)
		}
	}
}

func TestYuan(t *testing.T) {
	for fen, want := range map[int64]string{0: "0.00", 1: "0.01", 10: "0.10", 100: "1.00", 9999: "99.99", 123456789: "1234567.89"} {
		if got, err := storm.Yuan(fen); err != nil || got != want {
			t.Errorf("Yuan(%d): expected %s, got %s (%v)", fen, want, got, err)
		}
	}
	if _, err := storm.Yuan(-1); err == nil {
		t.Error("Yuan(-1): expected an error")
	}
}

// TestBalancedSenderAlternatesTargets: with several replicas the deliveries are spread in turn,
// so the duplicates of one notification reach different replicas.
func TestBalancedSenderAlternatesTargets(t *testing.T) {
	set := keySet(t, callbackdv1alpha1.ProviderStandardWebhooks)
	a, b := newAdapterServer(t, set), newAdapterServer(t, set)
	n, err := storm.NewNotifier(set)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := storm.NewBalancedSender(n, []string{a.URL + "/notify/sw", b.URL + "/notify/sw"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := sender.Storm(context.Background(), storm.Config{Trades: storm.NewTrades("LB", 10, "CNY", paidAt), Duplicates: 2, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Answers.Success != 20 || len(a.parsed) != 10 || len(b.parsed) != 10 {
		t.Fatalf("expected 20 acknowledged deliveries, 10 per replica; got %d, %d and %d", sum.Answers.Success, len(a.parsed), len(b.parsed))
	}
	if _, err := storm.NewBalancedSender(n, []string{a.URL, "http://203.0.113.7/"}, nil); !errors.Is(err, storm.ErrNotLoopback) {
		t.Errorf("a non-loopback replica among loopback ones: expected ErrNotLoopback, got %v", err)
	}
}
