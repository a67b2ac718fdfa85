package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// jsonAdapter "verifies" nothing and reads {"order":..,"txn":..,"amount":..} (the real adapters
// have their own tests; this one keeps the focus on the gates).
type jsonAdapter struct{}

func (jsonAdapter) Provider() string { return "json" }

func (jsonAdapter) Parse(_ context.Context, _ *http.Request, body []byte) (notify.Notification, error) {
	var b struct {
		Order  string `json:"order"`
		Txn    string `json:"txn"`
		Amount int64  `json:"amount"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "not JSON")
	}
	return notify.Notification{Provider: "json", MerchantID: "m1", OutTradeNo: b.Order, Kind: notify.KindPayment,
		Status: notify.StatusSucceeded, Amount: b.Amount, Currency: "CNY", ProviderTxnID: b.Txn,
		NotifyID: "n", BodyDigest: notify.Digest(body)}, nil
}

func (jsonAdapter) Respond(http.ResponseWriter, notify.Verdict, string) {}

type replica struct {
	p *Pipeline
	m *metrics.Metrics
}

// newReplica is one callbackd replica's pipeline on the shared store and Redis (nil: none).
func newReplica(t *testing.T, st *store.Store, redisAddr string) replica {
	t.Helper()
	w, err := gate.NewWindow(gate.WindowOptions{MaxEntries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	opts := Options{
		Channels: []Channel{{Name: "ch", Adapter: jsonAdapter{}, LockTTL: 10 * time.Second, SuccessTTL: time.Hour, WindowTTL: time.Minute}},
		Ledger:   st, Window: w, Metrics: m,
	}
	if redisAddr != "" {
		client, err := gate.NewRedisClient(config.Redis{Addr: redisAddr, Timeout: metav1.Duration{Duration: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		opts.Claims = gate.NewClaims(client, 50*time.Millisecond)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return replica{p: p, m: m}
}

// TestTwoReplicasOnRealStores sends one notification 100 times at concurrency 20, split between
// two replicas sharing a real PostgreSQL and Redis: every answer is success and the database holds
// one effect. Then the same with Redis stopped, then a second, different payment of a paid order,
// which the gates must let through to be recorded as an exception.
func TestTwoReplicasOnRealStores(t *testing.T) {
	pg := testenv.StartPostgres(t)
	dsn := pg.NewDatabase(t, "pipeline_real")
	ctx := context.Background()
	if _, err := store.Migrate(ctx, dsn, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	st, err := store.Open(ctx, dsn, store.Options{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rg := testenv.StartRedis(t, testenv.RedisOptions{})
	addr := rg.Nodes()[0].Addr
	replicas := []replica{newReplica(t, st, addr), newReplica(t, st, addr)}

	order := func(no string, amount int64) {
		t.Helper()
		if _, _, err := st.CreateOrder(ctx, store.NewOrder{OrderNo: no, Channel: "ch", MerchantID: "m1", Amount: amount, Currency: "CNY"}); err != nil {
			t.Fatalf("create order %s: %v", no, err)
		}
	}
	storm := func(body string, copies, concurrency int) map[notify.Verdict]int {
		var mu sync.Mutex
		verdicts := map[notify.Verdict]int{}
		jobs := make(chan int, copies)
		for i := range copies {
			jobs <- i
		}
		close(jobs)
		var wg sync.WaitGroup
		for range concurrency {
			wg.Go(func() {
				for i := range jobs {
					r := replicas[i%2]
					req := httptest.NewRequest(http.MethodPost, "/notify/ch", strings.NewReader(body))
					rctx, cancel := context.WithTimeout(ctx, 4*time.Second)
					v, _ := r.p.Process(rctx, "ch", req, []byte(body))
					cancel()
					mu.Lock()
					verdicts[v]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return verdicts
	}
	count := func(no string) (receipts, ledger, exceptions int) {
		t.Helper()
		err := st.Pool().QueryRow(ctx, `SELECT
			(SELECT count(*) FROM callback_receipts WHERE order_no = $1),
			(SELECT count(*) FROM ledger_entries WHERE order_no = $1),
			(SELECT count(*) FROM payment_exceptions WHERE order_no = $1)`, no).Scan(&receipts, &ledger, &exceptions)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	body := func(no, txn string, amount int64) string {
		return fmt.Sprintf(`{"order":%q,"txn":%q,"amount":%d}`, no, txn, amount)
	}

	order("R-1", 100)
	if v := storm(body("R-1", "t1", 100), 100, 20); v[notify.Success] != 100 {
		t.Fatalf("100 copies on two replicas: expected 100 successes, got %v", v)
	}
	if r, l, e := count("R-1"); r != 1 || l != 1 || e != 0 {
		t.Fatalf("after the replay: expected 1 receipt, 1 ledger entry, 0 exceptions; got %d, %d, %d", r, l, e)
	}
	var applied float64
	for _, r := range replicas {
		applied += testutil.ToFloat64(r.m.Callbacks.WithLabelValues("ch", "json", metrics.OutcomeApplied))
	}
	if applied != 1 {
		t.Fatalf("applied across both replicas: expected 1, got %v", applied)
	}

	// A second, different payment of the paid order reaches the database through every gate.
	if v := storm(body("R-1", "t2", 100), 10, 5); v[notify.Success] != 10 {
		t.Fatalf("second payment: expected 10 successes, got %v", v)
	}
	if r, l, e := count("R-1"); l != 1 || e != 1 {
		t.Fatalf("after a second payment: expected 1 ledger entry and 1 exception, got receipts %d, ledger %d, exceptions %d", r, l, e)
	}

	// Redis stopped: the database gates alone.
	rg.Nodes()[0].Stop(t)
	order("R-2", 250)
	if v := storm(body("R-2", "t3", 250), 100, 20); v[notify.Success] != 100 {
		t.Fatalf("100 copies with Redis stopped: expected 100 successes, got %v", v)
	}
	if r, l, e := count("R-2"); r != 1 || l != 1 || e != 0 {
		t.Fatalf("with Redis stopped: expected 1 receipt, 1 ledger entry, 0 exceptions; got %d, %d, %d", r, l, e)
	}
}
