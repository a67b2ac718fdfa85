package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// syncBuffer is a log sink written by many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeEndToEnd runs `callbackd migrate` and Serve against a real PostgreSQL and Redis: one
// order, one signed notification sent 40 times concurrently, exactly one effect; then the same
// with Redis stopped; refusals of bad input; every metric on /metrics; a clean drain.
func TestServeEndToEnd(t *testing.T) {
	pg := testenv.StartPostgres(t)
	dsn := pg.NewDatabase(t, "callbackd_e2e")
	rg := testenv.StartRedis(t, testenv.RedisOptions{})

	for i := range 2 { // migrations are idempotent
		if code, out, errOut := run(t, "migrate", "--dsn", dsn); code != ExitOK {
			t.Fatalf("migrate run %d: expected exit 0, got %d\n%s%s", i+1, code, out, errOut)
		}
	}

	dir := t.TempDir()
	secret, err := paysim.NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	const apiToken = "mapi_e2e_token_0123456789"
	writeTestFile(t, filepath.Join(dir, "whsec"), secret+"\n")
	writeTestFile(t, filepath.Join(dir, "tokens"), apiToken+"\n")
	cfg := &config.File{
		Listen:        "127.0.0.1:0",
		Database:      config.Database{DSN: dsn, MaxConns: 8},
		Redis:         &config.Redis{Addr: rg.Nodes()[0].Addr},
		APITokensFile: filepath.Join(dir, "tokens"),
		Server:        config.Server{MaxBodyBytes: 4096},
		Channels: []config.Channel{{
			Name: "webhooks",
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderStandardWebhooks,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "acct_1"},
				TTLs:     callbackdv1alpha1.TTLs{Lock: metav1.Duration{Duration: 10 * time.Second}},
			},
			Keys: config.KeyFiles{WebhookSecretFiles: []string{filepath.Join(dir, "whsec")}},
		}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}

	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			all := logs.String()
			t.Logf("callbackd log (last 6000 bytes):\n%s", all[max(0, len(all)-6000):])
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)), func(main, _ net.Addr) { addrs <- main })
	}()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case err := <-served:
		t.Fatalf("Serve stopped before listening: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not listen within 60s")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 32}}
	waitReady(t, client, base)

	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	signer := &paysim.StandardWebhooks{Secrets: []string{secret}}
	createOrder := func(orderNo string, amount int64) {
		t.Helper()
		body := fmt.Sprintf(`{"order_no":%q,"channel":"webhooks","merchant_id":"acct_1","amount":%d,"currency":"CNY"}`, orderNo, amount)
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("create order %s: %v", orderNo, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			t.Fatalf("create order %s: expected 201, got %d %s", orderNo, resp.StatusCode, b)
		}
	}
	notification := func(msgID, orderNo, txn string, amount int64) paysim.Notification {
		t.Helper()
		body := fmt.Sprintf(`{"type":"payment.succeeded","data":{"id":%q,"order_no":%q,"amount":%d,"currency":"CNY"}}`, txn, orderNo, amount)
		n, err := signer.Event(msgID, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	send := func(n paysim.Notification) (int, string) {
		req, err := n.Request(context.Background(), base+"/notify/webhooks")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	storm := func(n paysim.Notification, times, concurrency int) (ok int, answers map[int]int) {
		var mu sync.Mutex
		answers = map[int]int{}
		work := make(chan struct{}, times)
		for range times {
			work <- struct{}{}
		}
		close(work)
		var wg sync.WaitGroup
		for range concurrency {
			wg.Go(func() {
				for range work {
					code, body := send(n)
					mu.Lock()
					answers[code]++
					if code >= 300 {
						t.Logf("answer %d %q", code, body)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return answers[http.StatusOK] + answers[http.StatusNoContent], answers
	}
	effects := func(orderNo string) (receipts, ledger, outbox int, status string) {
		t.Helper()
		err := db.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM callback_receipts WHERE order_no = $1),
			(SELECT count(*) FROM ledger_entries WHERE order_no = $1),
			(SELECT count(*) FROM outbox_events),
			(SELECT status FROM payment_orders WHERE order_no = $1)`, orderNo).Scan(&receipts, &ledger, &outbox, &status)
		if err != nil {
			t.Fatalf("count effects of %s: %v", orderNo, err)
		}
		return
	}

	// 1. The replay: 40 deliveries of one notification at concurrency 10.
	createOrder("E2E-1", 1234)
	if ok, answers := storm(notification("msg_e2e_1", "E2E-1", "txn_1", 1234), 40, 10); ok != 40 {
		t.Fatalf("40 deliveries with Redis up: expected 40 successes, got answers %v", answers)
	}
	if r, l, o, st := effects("E2E-1"); r != 1 || l != 1 || o != 1 || st != "PAID" {
		t.Fatalf("with Redis up: expected 1 receipt, 1 ledger entry, 1 outbox event, PAID; got %d, %d, %d, %s", r, l, o, st)
	}

	// 2. The same with Redis stopped: the database gates alone keep exactly-once.
	rg.Nodes()[0].Stop(t)
	createOrder("E2E-2", 500)
	if ok, answers := storm(notification("msg_e2e_2", "E2E-2", "txn_2", 500), 30, 10); ok != 30 {
		t.Fatalf("30 deliveries with Redis stopped: expected 30 successes, got answers %v", answers)
	}
	if r, l, o, st := effects("E2E-2"); r != 1 || l != 1 || o != 2 || st != "PAID" {
		t.Fatalf("with Redis stopped: expected 1 receipt, 1 ledger entry, 2 outbox events in all, PAID; got %d, %d, %d, %s", r, l, o, st)
	}

	// 3. Bad input is refused and changes nothing.
	createOrder("E2E-3", 700)
	forged := notification("msg_e2e_3", "E2E-3", "txn_3", 700)
	forged.Body = bytes.Replace(forged.Body, []byte("700"), []byte("7"), 1)
	for _, c := range []struct {
		name string
		n    paysim.Notification
	}{
		{"forged body", forged},
		{"amount mismatch", notification("msg_e2e_4", "E2E-3", "txn_3", 699)},
		{"unknown order", notification("msg_e2e_5", "NO-SUCH-ORDER", "txn_5", 100)},
		{"oversized body", paysim.Notification{Header: forged.Header, Body: bytes.Repeat([]byte("x"), 5000)}},
	} {
		if code, body := send(c.n); code < 400 || code >= 500 {
			t.Errorf("%s: expected a 4xx refusal, got %d %q", c.name, code, body)
		}
	}
	if r, l, _, st := effects("E2E-3"); r != 0 || l != 0 || st != "PENDING" {
		t.Fatalf("after refused input: expected nothing written (0 receipts, 0 ledger, PENDING), got %d, %d, %s", r, l, st)
	}

	// 4. /metrics exposes every metric, and the counts add up.
	resp, err := getURL(client, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(exposition)
	for _, name := range []string{metrics.CallbacksTotal, metrics.DuplicatesStoppedTotal, metrics.RedisDegradedTotal,
		metrics.LockContentionTotal, metrics.ProcessingSeconds + "_bucket", metrics.InFlight, metrics.AnomaliesTotal,
		metrics.OverloadRejectionsTotal, metrics.KeyVerificationsTotal, "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(text, "\n"+name) {
			t.Errorf("/metrics: expected %s, not found", name)
		}
	}
	for _, want := range []string{
		`callbackd_callbacks_total{channel="webhooks",outcome="applied",provider="standardwebhooks"} 2`,
		`callbackd_anomalies_total{channel="webhooks",reason="amount_mismatch"} 1`,
		`callbackd_anomalies_total{channel="webhooks",reason="unknown_order"} 1`,
		`callbackd_anomalies_total{channel="webhooks",reason="body_too_large"} 1`,
		`callbackd_anomalies_total{channel="webhooks",reason="bad_signature"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics: expected the line %q", want)
		}
	}
	if !strings.Contains(text, `callbackd_redis_degraded_total{channel="webhooks",reason="claim_error"}`) ||
		strings.Contains(text, `callbackd_redis_degraded_total{channel="webhooks",reason="claim_error"} 0`) {
		t.Errorf("/metrics: expected Redis degraded events counted while Redis was stopped")
	}

	// 5. PostgreSQL down: not ready, and callbacks get the retryable failure with nothing
	// recorded; back up: ready, and the resend takes effect once.
	createOrder("E2E-4", 900)
	pg.Stop(t)
	waitStatus(t, client, base+"/readyz", http.StatusServiceUnavailable)
	n4 := notification("msg_e2e_6", "E2E-4", "txn_6", 900)
	if code, body := send(n4); code < 500 {
		t.Fatalf("a callback while PostgreSQL is down: expected a 5xx retryable failure, got %d %q", code, body)
	}
	pg.Start(t)
	waitStatus(t, client, base+"/readyz", http.StatusOK)
	if ok, answers := storm(n4, 10, 5); ok != 10 {
		t.Fatalf("resending after the restart: expected 10 successes, got answers %v", answers)
	}
	if r, l, _, st := effects("E2E-4"); r != 1 || l != 1 || st != "PAID" {
		t.Fatalf("after the outage: expected 1 receipt, 1 ledger entry, PAID; got %d, %d, %s", r, l, st)
	}

	// 6. A clean drain, and no secret in the logs.
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after SIGTERM: expected a clean drain (nil), got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s of the cancellation")
	}
	all := logs.String()
	for _, s := range []string{secret, strings.TrimPrefix(secret, "whsec_"), apiToken, dsn} {
		if strings.Contains(all, s) {
			t.Fatalf("the logs carry a secret (%d chars)", len(s))
		}
	}
	if !strings.Contains(all, `"reason":"amount_mismatch"`) {
		t.Errorf("logs: expected a structured refusal line for the amount mismatch")
	}
}

func waitReady(t *testing.T, client *http.Client, base string) {
	t.Helper()
	waitStatus(t, client, base+"/readyz", http.StatusOK)
}

func waitStatus(t *testing.T, client *http.Client, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := 0
	for time.Now().Before(deadline) {
		resp, err := getURL(client, url)
		if err == nil {
			resp.Body.Close()
			if last = resp.StatusCode; last == want {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: expected %d within 30s, last answer %d", url, want, last)
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func getURL(c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}
