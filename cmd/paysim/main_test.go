package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

// paysim runs the command line in process and returns its standard output and error.
func paysim(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestKeysWritesWhatCallbackdLoads: the files `paysim keys` writes are the ones callbackd's
// adapter loads through the printed configuration, no key material is printed, and an existing
// key set is never overwritten.
func TestKeysWritesWhatCallbackdLoads(t *testing.T) {
	cases := []struct {
		provider string
		extra    []string
	}{
		{"wechatpay", []string{"--app-id", "wx8888888888888888"}},
		{"wechatpay", []string{"--app-id", "wx8888888888888888", "--wechat-key-kind", "certificate"}},
		{"alipay", []string{"--seller-id", "2088102146225135"}},
		{"stripe", nil},
		{"standardwebhooks", nil},
	}
	for _, tc := range cases {
		t.Run(tc.provider+strings.Join(tc.extra, ""), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "keys")
			args := append([]string{"keys", "--out", dir, "--channel", "ch1", "--provider", tc.provider, "--merchant-id", "1900000109"}, tc.extra...)
			out, err := paysim(t, args...)
			if err != nil {
				t.Fatalf("paysim keys: %v\n%s", err, out)
			}
			set, err := keyset.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := provider.New(ctx, set.Channel(callbackdv1alpha1.ChannelSettings{}), nil, nil); err != nil {
				t.Fatalf("callbackd's adapter refused the key files: %v", err)
			}
			for _, secret := range []string{set.APIv3Key, set.WebhookSecret} {
				if secret != "" && strings.Contains(out, secret) {
					t.Errorf("paysim keys printed a secret; output:\n%s", out)
				}
			}
			if strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("paysim keys printed a private key; output:\n%s", out)
			}
			if !strings.Contains(out, "name: ch1") || !strings.Contains(out, filepath.Join(dir, "callbackd")) {
				t.Errorf("expected the channel's configuration block naming the key files; got:\n%s", out)
			}
			if _, err := paysim(t, args...); err == nil {
				t.Error("a second `paysim keys` into the same folder: expected a refusal")
			}
			for _, f := range secretFiles(set) {
				info, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if perm := info.Mode().Perm(); perm != 0o600 {
					t.Errorf("%s: expected mode 0600, got %o", filepath.Base(f), perm)
				}
			}
		})
	}
}

// secretFiles are the key set's files holding secrets.
func secretFiles(set *keyset.Set) []string {
	m := set.Manifest
	files := append([]string{}, m.Keys.WebhookSecretFiles...)
	for _, f := range []string{m.Keys.WeChatAPIv3KeyFile, m.Keys.WeChatMerchantKeyFile, m.Keys.AlipayAppPrivateKeyFile, m.WeChatPlatformKeyFile, m.AlipayPrivateKeyFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// adapterTarget serves /notify/{channel} with callbackd's adapter for the key set.
func adapterTarget(t *testing.T, set *keyset.Set, answer func(notify.Notification) notify.Verdict) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	adapter, err := provider.New(ctx, set.Channel(callbackdv1alpha1.ChannelSettings{}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/notify/"+set.Manifest.Channel {
			t.Errorf("expected the channel's notify path, got %s", r.URL.Path)
		}
		body, _ := io.ReadAll(r.Body)
		n, err := adapter.Parse(r.Context(), r, body)
		if err != nil {
			adapter.Respond(w, notify.Reject, "refused")
			return
		}
		adapter.Respond(w, answer(n), "")
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func generate(t *testing.T, p callbackdv1alpha1.Provider, m callbackdv1alpha1.MerchantIdentity) (string, *keyset.Set) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keys")
	set, err := keyset.Generate(dir, keyset.Spec{Channel: "ch-" + string(p), Provider: p, Merchant: m})
	if err != nil {
		t.Fatal(err)
	}
	return dir, set
}

func TestStormCommandPrintsJSONSummary(t *testing.T) {
	dir, set := generate(t, callbackdv1alpha1.ProviderAlipay, callbackdv1alpha1.MerchantIdentity{MerchantID: "2021000000000001"})
	srv, hits := adapterTarget(t, set, func(notify.Notification) notify.Verdict { return notify.Success })
	out, err := paysim(t, "storm", "--keys", dir, "--target", srv.URL, "--provider", "alipay",
		"--orders", "6", "--duplicates", "3", "--concurrency", "4", "--shuffle", "--json")
	if err != nil {
		t.Fatalf("paysim storm: %v\n%s", err, out)
	}
	var sum storm.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("expected a JSON summary, got %v:\n%s", err, out)
	}
	if sum.Orders != 6 || sum.Sent != 18 || sum.Answers.Success != 18 || sum.OrdersAcknowledged != 6 || hits.Load() != 18 {
		t.Fatalf("expected 6 orders, 18 sent and acknowledged (server saw 18), got %+v (server saw %d)", sum, hits.Load())
	}
}

func TestStormCommandExitsUnacknowledgedWhenRefused(t *testing.T) {
	dir, set := generate(t, callbackdv1alpha1.ProviderStandardWebhooks, callbackdv1alpha1.MerchantIdentity{MerchantID: "acct"})
	srv, _ := adapterTarget(t, set, func(notify.Notification) notify.Verdict { return notify.Retry })
	out, err := paysim(t, "storm", "--keys", dir, "--target", srv.URL, "--orders", "3", "--duplicates", "2", "--concurrency", "2")
	var unacked errUnacknowledged
	if !errors.As(err, &unacked) || unacked.n != 3 {
		t.Fatalf("expected 3 unacknowledged orders, got %v\n%s", err, out)
	}
	if !strings.Contains(out, "retry=6") {
		t.Errorf("expected the summary to count 6 retry answers; got:\n%s", out)
	}
}

func TestSendingCommandsRefuseNonLoopbackTargets(t *testing.T) {
	dir, _ := generate(t, callbackdv1alpha1.ProviderStandardWebhooks, callbackdv1alpha1.MerchantIdentity{MerchantID: "acct"})
	for _, args := range [][]string{
		{"send", "--keys", dir, "--target", "http://192.0.2.10:8080", "--order", "O1", "--amount", "100"},
		{"storm", "--keys", dir, "--target", "https://api.example.com/notify/x"},
		{"replay", "--keys", dir, "--target", "http://10.1.2.3/", "--schedule", "1s"},
		{"serve-query", "--keys", dir, "--listen", "0.0.0.0:0"},
	} {
		out, err := paysim(t, args...)
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("paysim %s: expected a loopback refusal, got %v\n%s", args[0], err, out)
		}
	}
}

func TestStormCommandChecksProvider(t *testing.T) {
	dir, _ := generate(t, callbackdv1alpha1.ProviderStandardWebhooks, callbackdv1alpha1.MerchantIdentity{MerchantID: "acct"})
	_, err := paysim(t, "storm", "--keys", dir, "--target", "http://127.0.0.1:1", "--provider", "wechatpay")
	if err == nil || !strings.Contains(err.Error(), "standardwebhooks") {
		t.Fatalf("expected a provider mismatch naming the key set's provider, got %v", err)
	}
}

// TestReplayCommandGivesUpAfterTheSchedule: a target that never acknowledges gets exactly
// len(schedule)+1 deliveries per order, and the command says so through its exit.
func TestReplayCommandGivesUpAfterTheSchedule(t *testing.T) {
	dir, set := generate(t, callbackdv1alpha1.ProviderStandardWebhooks, callbackdv1alpha1.MerchantIdentity{MerchantID: "acct"})
	srv, hits := adapterTarget(t, set, func(notify.Notification) notify.Verdict { return notify.Retry })
	out, err := paysim(t, "replay", "--keys", dir, "--target", srv.URL, "--schedule", "15s,30s,1m", "--compress", "3000",
		"--orders", "2", "--concurrency", "2", "--json")
	var unacked errUnacknowledged
	if !errors.As(err, &unacked) || unacked.n != 2 {
		t.Fatalf("expected 2 orders given up, got %v\n%s", err, out)
	}
	var res storm.ReplayResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("expected a JSON result: %v\n%s", err, out)
	}
	if res.GaveUp != 2 || res.Summary.Sent != 8 || hits.Load() != 8 {
		t.Fatalf("expected 2 given up after 4 deliveries each (8), got %+v (server saw %d)", res, hits.Load())
	}
}

func TestReplayDefaultsToTheProviderSchedule(t *testing.T) {
	wx, err := replaySchedule("", callbackdv1alpha1.ProviderWeChatPay)
	if err != nil || len(wx) != 15 {
		t.Fatalf("WeChat Pay: expected its 15 documented intervals, got %v (%v)", wx, err)
	}
	var total int64
	for _, d := range wx {
		total += int64(d)
	}
	if want := int64(24*3600+4*60) * 1e9; total != want {
		t.Errorf("WeChat Pay's schedule spans 24h4m, got %v", total)
	}
	if _, err := replaySchedule("", callbackdv1alpha1.ProviderStripe); err == nil {
		t.Error("stripe has no built-in schedule: expected an error asking for --schedule")
	}
}

// TestStormDropRecordsPaidOrdersAtTheFakeProvider: with --query-api and --drop, every order is
// recorded as paid at the fake provider but the dropped ones are never notified, so only the
// active query path can find them.
func TestStormDropRecordsPaidOrdersAtTheFakeProvider(t *testing.T) {
	dir, set := generate(t, callbackdv1alpha1.ProviderWeChatPay, callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wx8888888888888888"})
	target, hits := adapterTarget(t, set, func(notify.Notification) notify.Verdict { return notify.Success })
	fake, err := fakeprovider.New([]*keyset.Set{set}, fakeprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fakeSrv := httptest.NewServer(fake)
	defer fakeSrv.Close()

	out, err := paysim(t, "storm", "--keys", dir, "--target", target.URL, "--orders", "5", "--duplicates", "2",
		"--concurrency", "2", "--prefix", "DROP", "--query-api", fakeSrv.URL, "--drop", "2", "--json")
	if err != nil {
		t.Fatalf("paysim storm --drop: %v\n%s", err, out)
	}
	var sum storm.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("expected a JSON summary: %v\n%s", err, out)
	}
	if sum.Orders != 3 || sum.Sent != 6 || sum.Answers.Success != 6 || hits.Load() != 6 {
		t.Fatalf("expected the 3 orders not dropped notified and acknowledged twice each (6), got %d orders, %d sent, %d acknowledged, %d received",
			sum.Orders, sum.Sent, sum.Answers.Success, hits.Load())
	}
	if fake.Len() != 5 {
		t.Fatalf("expected all 5 orders recorded as paid at the fake provider, got %d", fake.Len())
	}
	for _, no := range []string{"DROP-000000", "DROP-000001", "DROP-000004"} {
		tr, ok := fake.Trade(callbackdv1alpha1.ProviderWeChatPay, "1900000109", no)
		if !ok || tr.Amount <= 0 || tr.TransactionID == "" {
			t.Errorf("order %s: expected a paid trade at the fake provider, got %+v (known=%v)", no, tr, ok)
		}
	}
	if _, err := paysim(t, "storm", "--keys", dir, "--target", target.URL, "--orders", "5", "--drop", "2"); err == nil || !strings.Contains(err.Error(), "--query-api") {
		t.Errorf("--drop without --query-api: expected a refusal naming --query-api, got %v", err)
	}
}

func TestSendCommandDeliversTheSameNotificationAgain(t *testing.T) {
	dir, set := generate(t, callbackdv1alpha1.ProviderWeChatPay, callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wx8888888888888888"})
	var mu sync.Mutex
	var ids []string
	target, hits := adapterTarget(t, set, func(n notify.Notification) notify.Verdict {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, n.NotifyID+"/"+n.OutTradeNo)
		return notify.Success
	})
	out, err := paysim(t, "send", "--keys", dir, "--target", target.URL, "--order", "ORD-9", "--amount", "990", "--times", "2")
	if err != nil {
		t.Fatalf("paysim send: %v\n%s", err, out)
	}
	if hits.Load() != 2 || strings.Count(out, ": success (HTTP 204)") != 2 {
		t.Fatalf("expected 2 acknowledged attempts, server saw %d; output:\n%s", hits.Load(), out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] != ids[1] || !strings.HasSuffix(ids[0], "/ORD-9") {
		t.Errorf("expected the same notification (id and order) twice, got %v", ids)
	}
}

// TestServeQueryCommand runs the fake query API until its context ends.
func TestServeQueryCommand(t *testing.T) {
	dir, _ := generate(t, callbackdv1alpha1.ProviderAlipay, callbackdv1alpha1.MerchantIdentity{MerchantID: "2021000000000001"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	root := newRootCommand(pw, io.Discard)
	root.SetArgs([]string{"serve-query", "--listen", "127.0.0.1:0", "--keys", dir})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()

	line := make([]byte, 256)
	n, err := pr.Read(line)
	if err != nil {
		t.Fatalf("read the serve-query banner: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	m := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).Find(line[:n])
	if m == nil {
		t.Fatalf("expected the listening address in %q", line[:n])
	}
	err = fakeprovider.PutTrades(ctx, string(m), []fakeprovider.Trade{{Provider: callbackdv1alpha1.ProviderAlipay,
		MerchantID: "2021000000000001", OutTradeNo: "Q1", TransactionID: "T1", Amount: 100, Currency: "CNY"}})
	if err != nil {
		t.Fatalf("PutTrades to serve-query: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve-query after its context ended: expected a clean stop, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve-query did not stop within 10s of its context ending")
	}
}
