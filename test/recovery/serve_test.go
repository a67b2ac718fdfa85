package recovery

import (
	"bytes"
	"context"
	"encoding/json"
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/cli"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// lockedBuffer is a log sink written by many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeRecoveryPaths runs callbackd as `serve` does, with a WeChat Pay and an Alipay channel
// whose query API is the fake provider: the reconciler it starts pays orders whose notifications
// were dropped, POST /v1/orders/{order_no}/sync settles an order on demand, and
// `callbackd order show|sync` do the same from the command line.
func TestServeRecoveryPaths(t *testing.T) {
	e := newEnv(t) // keys, the fake provider and a migrated database (its store is only read here)
	dir := t.TempDir()
	const apiToken = "mapi_recovery_token_0123456789"
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(apiToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.File{
		Listen:        "127.0.0.1:0",
		Database:      config.Database{DSN: e.dsn, MaxConns: 8},
		Redis:         &config.Redis{Addr: redisGroup.Nodes()[0].Addr},
		APITokensFile: tokens,
	}
	cfg.Channels = append(cfg.Channels, e.channels...)
	for i := range cfg.Channels {
		cfg.Channels[i].Reconciliation = callbackdv1alpha1.Reconciliation{
			QueryBaseURL:     e.queryURL,
			PendingAfter:     metav1.Duration{Duration: time.Second},
			Interval:         metav1.Duration{Duration: 500 * time.Millisecond},
			QueriesPerSecond: 50,
		}
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	cfgFile := filepath.Join(dir, "callbackd.json")
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	// Orders: one per channel that only the reconciler can settle, one for the sync endpoint, one
	// for the CLI. The provider knows them all paid; no notification is ever sent.
	dropped := map[string]string{uniq(t, "SERVE-DROP-WX"): wxChannel, uniq(t, "SERVE-DROP-ALI"): aliChannel}
	for no, ch := range dropped {
		e.registerOrder(t, ch, no, 2500, nil)
		e.pay(ch, no, "44"+no[len(no)-6:], 2500)
	}

	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			all := logs.String()
			t.Logf("callbackd log (last 6000 bytes):\n%s", all[max(0, len(all)-6000):])
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() {
		served <- cli.Serve(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)), func(main, _ net.Addr) { addrs <- main })
	}()
	defer func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: expected a clean drain, got %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Serve did not return within 60s of cancellation")
		}
	}()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case err := <-served:
		t.Fatalf("Serve stopped before listening: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not listen within 60s")
	}

	// The reconciler pays the dropped orders once they are a second old.
	deadline := time.Now().Add(30 * time.Second)
	for no := range dropped {
		for {
			s := e.state(t, no)
			if s.status == store.StatusPaid {
				if s.payments != 1 || s.outboxEvents != 1 {
					t.Errorf("%s: expected 1 payment and 1 event, got %d and %d", no, s.payments, s.outboxEvents)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: expected the reconciler to pay it within 30s, still %s", no, s.status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The sync endpoint settles an order at once (before the reconciler would).
	syncNo := uniq(t, "SERVE-SYNC")
	e.registerOrder(t, aliChannel, syncNo, 1234, nil)
	e.pay(aliChannel, syncNo, "2026112955501", 1234)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/orders/"+syncNo+"/sync", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST sync: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var view struct {
		Order struct {
			Status        string `json:"status"`
			ProviderTxnID string `json:"provider_txn_id"`
			LedgerEntries []struct {
				Amount int64 `json:"amount"`
			} `json:"ledger_entries"`
		} `json:"order"`
		Queried       bool   `json:"queried"`
		ProviderState string `json:"provider_state"`
		Action        string `json:"action"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &view) != nil {
		t.Fatalf("POST sync: expected 200 with the order, got %d %s", resp.StatusCode, body)
	}
	if view.Order.Status != "PAID" || view.Order.ProviderTxnID != "2026112955501" || len(view.Order.LedgerEntries) != 1 ||
		view.Order.LedgerEntries[0].Amount != 1234 || !view.Queried || view.ProviderState != "TRADE_SUCCESS" || view.Action != "paid" {
		t.Errorf("POST sync: expected PAID by 2026112955501 with one entry of 1234, queried TRADE_SUCCESS, paid; got %s", body)
	}

	// The command line: sync a pending order, then show it.
	cliNo := uniq(t, "SERVE-CLI")
	e.registerOrder(t, wxChannel, cliNo, 4321, nil)
	e.pay(wxChannel, cliNo, "4200555001", 4321)
	code, out, errOut := runCLI(t, "order", "sync", cliNo, "--config", cfgFile, "-o", "json")
	if code != cli.ExitOK {
		t.Fatalf("order sync: expected exit 0, got %d\n%s%s", code, out, errOut)
	}
	var synced struct {
		Status string `json:"status"`
		Ledger []struct {
			Type   string `json:"type"`
			Amount int64  `json:"amount"`
		} `json:"ledger"`
		Sync struct {
			Queried bool   `json:"queried"`
			Action  string `json:"action"`
			Outcome string `json:"outcome"`
		} `json:"sync"`
	}
	if err := json.Unmarshal([]byte(out), &synced); err != nil {
		t.Fatalf("order sync -o json: %v\n%s", err, out)
	}
	// The reconciler may have settled it between registration and the command: then the CLI finds
	// it paid and does not ask the provider; either way there is exactly one payment.
	if synced.Status != "PAID" || len(synced.Ledger) != 1 || synced.Ledger[0].Amount != 4321 {
		t.Errorf("order sync: expected PAID with one payment of 4321, got %s", out)
	}
	if synced.Sync.Queried && (synced.Sync.Action != "paid" || synced.Sync.Outcome == "") {
		t.Errorf("order sync: a query must report the payment it applied, got %s", out)
	}
	code, out, errOut = runCLI(t, "order", "show", cliNo, "--dsn", e.dsn)
	if code != cli.ExitOK || !strings.Contains(out, "PAID") || !strings.Contains(out, "4200555001") {
		t.Errorf("order show: expected exit 0 and the paid order, got %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "order", "show", "NO-SUCH-ORDER", "--dsn", e.dsn)
	if code != cli.ExitError || !strings.Contains(errOut, "no order NO-SUCH-ORDER") {
		t.Errorf("order show of an unknown order: expected exit 1 naming it, got %d %s", code, errOut)
	}
	code, _, errOut = runCLI(t, "order", "sync")
	if code != cli.ExitUsage {
		t.Errorf("order sync without ORDER_NO: expected exit 2, got %d %s", code, errOut)
	}
	if s := e.state(t, cliNo); s.payments != 1 || s.outboxEvents != 1 {
		t.Errorf("%s: expected 1 payment and 1 event, got %d and %d", cliNo, s.payments, s.outboxEvents)
	}

	// The reconciler's metrics are served.
	mresp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	metricsText, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`callbackd_reconciler_queries_total{channel="wx",result="paid"}`,
		`callbackd_reconciler_stuck_orders{channel="ali"}`,
		`callbackd_reconciler_sweeps_total{channel="wx",result="done"}`,
	} {
		if !strings.Contains(string(metricsText), want) {
			t.Errorf("/metrics: expected %s", want)
		}
	}
}

// runCLI runs callbackd's command line in process.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := cli.Main(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}
