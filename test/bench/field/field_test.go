package field_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/test/bench/field"
)

// TestDesignNames pins the names the benchmark reports.
func TestDesignNames(t *testing.T) {
	want := []string{field.NameCheckThenAct, field.NameUniqueIndexOnly, field.NameRedisLockOnly}
	got := field.Designs(nil, nil, nil)
	if len(got) != len(want) {
		t.Fatalf("expected %d designs, got %d", len(want), len(got))
	}
	for i, d := range got {
		if d.Name != want[i] {
			t.Errorf("design %d: expected name %q, got %q", i, want[i], d.Name)
		}
		if d.Setup == nil || d.Handler == nil || d.DoubleEffects == nil || d.Reset == nil || d.Preload == nil {
			t.Errorf("design %s: expected every function and the handler set, got a nil one", d.Name)
		}
		// Without a verifier nothing is believed: the provider is told to resend.
		w := httptest.NewRecorder()
		d.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/notify/"+channel, strings.NewReader("{}")))
		if w.Code != http.StatusInternalServerError {
			t.Errorf("design %s without a verifier: expected 500, got %d", d.Name, w.Code)
		}
	}
}

// TestBooksOnce: each design books one notification once, acknowledges a sequential resend
// without a second effect, and refuses what must be refused, in WeChat Pay's dialect.
func TestBooksOnce(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	for _, name := range []string{field.NameCheckThenAct, field.NameUniqueIndexOnly, field.NameRedisLockOnly} {
		t.Run(name, func(t *testing.T) {
			d, url, schema := e.designs[name], e.urls[name], schemas[name]
			order, txn := e.prefix+"-once-"+name, "4200"+e.prefix+"-once-"+name
			if err := d.Preload(ctx, []string{order, order + "-x"}, 990); err != nil {
				t.Fatalf("Preload: %v", err)
			}
			good := payment(t, order, txn, 990)
			forged := payment(t, order, txn, 990)
			forged.Body = append([]byte(nil), forged.Body...)
			forged.Body[len(forged.Body)-2] ^= 1 // any byte of the body breaks the signature

			steps := []struct {
				what       string
				n          paysim.Notification
				wantStatus int
				wantLedger int64
			}{
				{"forged signature", forged, http.StatusBadRequest, 0},
				{"unknown order", payment(t, order+"-nope", txn+"-nope", 990), http.StatusBadRequest, 0},
				{"wrong amount", payment(t, order+"-x", txn+"-x", 1), http.StatusBadRequest, 0},
				{"first delivery", good, http.StatusNoContent, 1},
				{"resend", good, http.StatusNoContent, 1},
				{"resend re-signed", payment(t, order, txn, 990), http.StatusNoContent, 1},
			}
			for _, s := range steps {
				req, err := s.n.Request(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := e.client.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", s.what, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != s.wantStatus {
					t.Fatalf("%s: expected HTTP %d, got %d (%s)", s.what, s.wantStatus, resp.StatusCode, body)
				}
				if s.wantStatus != http.StatusNoContent {
					var f struct{ Code, Message string }
					if err := json.Unmarshal(body, &f); err != nil || f.Code != "FAIL" || f.Message == "" {
						t.Errorf("%s: expected a WeChat Pay failure body {\"code\":\"FAIL\",\"message\":...}, got %q", s.what, body)
					}
				}
				if got := e.ledgerCount(t, schema, order); got != s.wantLedger {
					t.Fatalf("%s: expected %d ledger entries for the order, got %d", s.what, s.wantLedger, got)
				}
			}
			if got := e.orderStatus(t, schema, order); got != field.StatusPaid {
				t.Errorf("expected order status %s, got %s", field.StatusPaid, got)
			}
			if got := e.ledgerCount(t, schema, order+"-x"); got != 0 {
				t.Errorf("wrong-amount order: expected no ledger entry, got %d", got)
			}
			if got, err := d.DoubleEffects(ctx); err != nil || got != 0 {
				t.Errorf("expected 0 double effects, got %d (err %v)", got, err)
			}
		})
	}
}

// TestIgnoredNotification: a verified notification that is not a successful payment is
// acknowledged and books nothing.
func TestIgnoredNotification(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	order := e.prefix + "-ignored"
	tx := paid(order, "4200"+order, 10)
	tx.TradeState, tx.TradeStateDesc = "NOTPAY", "未支付"
	n, err := signer().Payment(tx, paysim.WeChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range e.designs {
		if err := d.Preload(ctx, []string{order}, 10); err != nil {
			t.Fatalf("%s: Preload: %v", name, err)
		}
		got, err := e.post(ctx, e.urls[name], n)
		if err != nil || got != http.StatusNoContent {
			t.Errorf("%s: expected 204 for a NOTPAY notification, got %d (err %v)", name, got, err)
		}
		if got := e.orderStatus(t, schemas[name], order); got != field.StatusPending {
			t.Errorf("%s: expected the order still %s, got %s", name, field.StatusPending, got)
		}
	}
}

// TestRedisLockHeldAnswersRetry: while another attempt holds the lock, redis-lock-only answers
// WeChat Pay's retryable failure (500 + FAIL) and books nothing.
func TestRedisLockHeldAnswersRetry(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	order, txn := e.prefix+"-locked", "4200"+e.prefix+"-locked"
	d := e.designs[field.NameRedisLockOnly]
	if err := d.Preload(ctx, []string{order}, 500); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, "field:lock:"+txn, "other-attempt", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	n := payment(t, order, txn, 500)
	if got, err := e.post(ctx, e.urls[field.NameRedisLockOnly], n); err != nil || got != http.StatusInternalServerError {
		t.Fatalf("lock held: expected 500, got %d (err %v)", got, err)
	}
	if got := e.ledgerCount(t, "field_lock", order); got != 0 {
		t.Fatalf("lock held: expected no ledger entry, got %d", got)
	}
	// Reset clears the design's Redis keys too, so the next scenario does not start locked.
	if err := d.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := e.rdb.Exists(ctx, "field:lock:"+txn).Result(); err != nil || n != 0 {
		t.Fatalf("after Reset: expected the lock key gone, got exists=%d (err %v)", n, err)
	}
}

// storm delivers n concurrently from 64 senders, released at once. Like WeChat Pay, a sender
// resends after a 5xx (at most maxResends times, 2 ms apart); every sender must end with a 204.
func (e *env) storm(ctx context.Context, url string, n paysim.Notification) error {
	const senders, maxResends = 64, 200
	start := make(chan struct{})
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for attempt := 0; ; attempt++ {
				code, err := e.post(ctx, url, n)
				if err != nil {
					errs <- err
					return
				}
				if code == http.StatusNoContent {
					return
				}
				if code < 500 || attempt == maxResends {
					errs <- fmt.Errorf("expected 204 in the end, got %d after %d resends", code, attempt)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	return <-errs
}

// TestConcurrentDuplicates: 64 concurrent duplicates of one payment. check-then-act and
// redis-lock-only must show double effects within a bounded number of rounds (each round a new
// order); unique-index-only must book every order exactly once.
func TestConcurrentDuplicates(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		design     string
		wantDouble bool
		rounds     int // at most this many rounds (wantDouble: until the first double effect)
	}{
		{field.NameCheckThenAct, true, 20},
		{field.NameRedisLockOnly, true, 60},
		{field.NameUniqueIndexOnly, false, 10},
	}
	for _, c := range cases {
		t.Run(c.design, func(t *testing.T) {
			ctx := testContext(t)
			d, url := e.designs[c.design], e.urls[c.design]
			orders := make([]string, c.rounds)
			for i := range orders {
				orders[i] = fmt.Sprintf("%s-dup-%s-%03d", e.prefix, c.design, i)
			}
			if err := d.Preload(ctx, orders, 1200); err != nil {
				t.Fatalf("Preload: %v", err)
			}
			var double int64
			round := 0
			for ; round < c.rounds; round++ {
				n := payment(t, orders[round], "4200"+orders[round], 1200)
				if err := e.storm(ctx, url, n); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				var err error
				if double, err = d.DoubleEffects(ctx); err != nil {
					t.Fatal(err)
				}
				if c.wantDouble && double > 0 {
					round++
					break
				}
			}
			var entries int64
			q := "SELECT count(*) FROM " + pgx.Identifier{schemas[c.design], "ledger"}.Sanitize()
			if err := e.pool.QueryRow(ctx, q).Scan(&entries); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d double effect(s), %d ledger entries for %d orders after %d round(s) of 64 concurrent duplicates",
				c.design, double, entries, round, round)
			if c.wantDouble {
				if double == 0 {
					t.Fatalf("expected double effects under concurrent duplicates within %d rounds, got none", c.rounds)
				}
				return
			}
			if double != 0 || entries != int64(round) {
				t.Fatalf("expected 0 double effects and %d ledger entries (one per order), got %d double effects and %d entries",
					round, double, entries)
			}
		})
	}
}

// TestDoubleEffectsCounts: DoubleEffects counts orders with more than one ledger entry, on planted
// ledgers, for each design; Reset empties the tables and Setup is idempotent.
func TestDoubleEffectsCounts(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	cases := []struct {
		name    string
		entries map[string]int // order -> ledger entries planted
		want    int64
	}{
		{"empty", map[string]int{}, 0},
		{"each once", map[string]int{"a": 1, "b": 1, "c": 1}, 0},
		{"one twice", map[string]int{"a": 1, "b": 2, "c": 0}, 1},
		{"twice and thrice", map[string]int{"a": 2, "b": 3, "c": 1, "d": 0}, 2},
	}
	for name, d := range e.designs {
		if err := d.Setup(ctx); err != nil {
			t.Fatalf("%s: second Setup (must be idempotent): %v", name, err)
		}
		for _, c := range cases {
			if err := d.Reset(ctx); err != nil {
				t.Fatalf("%s: Reset: %v", name, err)
			}
			var orders []string
			for o := range c.entries {
				orders = append(orders, o)
			}
			if err := d.Preload(ctx, orders, 100); err != nil {
				t.Fatalf("%s/%s: Preload: %v", name, c.name, err)
			}
			for o, k := range c.entries {
				for i := range k {
					_, err := e.pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schemas[name], "ledger"}.Sanitize()+
						" (order_no, transaction_id, amount) VALUES ($1, $2, 100)", o, fmt.Sprintf("t-%s-%d", o, i))
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			if got, err := d.DoubleEffects(ctx); err != nil || got != c.want {
				t.Errorf("%s/%s: expected %d double effects, got %d (err %v)", name, c.name, c.want, got, err)
			}
		}
		if err := d.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		var orders int64
		if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schemas[name], "orders"}.Sanitize()).Scan(&orders); err != nil {
			t.Fatal(err)
		}
		if got, err := d.DoubleEffects(ctx); err != nil || got != 0 || orders != 0 {
			t.Errorf("%s: after Reset expected 0 orders and 0 double effects, got %d orders and %d (err %v)", name, orders, got, err)
		}
	}
}

// TestPreloadBulk: Preload registers many PENDING orders at once and refuses existing ones.
func TestPreloadBulk(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	orders := make([]string, 5000)
	for i := range orders {
		orders[i] = fmt.Sprintf("bulk-%05d", i)
	}
	for name, d := range e.designs {
		if err := d.Preload(ctx, orders, 250); err != nil {
			t.Fatalf("%s: Preload: %v", name, err)
		}
		var pending, total int64
		err := e.pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'PENDING' AND amount = 250), count(*) FROM "+
			pgx.Identifier{schemas[name], "orders"}.Sanitize()).Scan(&pending, &total)
		if err != nil {
			t.Fatal(err)
		}
		if pending != int64(len(orders)) || total != int64(len(orders)) {
			t.Errorf("%s: expected %d PENDING orders of 250, got %d of %d", name, len(orders), pending, total)
		}
		if err := d.Preload(ctx, orders[:1], 250); err == nil {
			t.Errorf("%s: expected Preload of an existing order to fail, got nil", name)
		}
	}
}
