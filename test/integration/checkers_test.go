package integration_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// failureRecorder stands in for testing.TB to prove that a checker fails when it should.
type failureRecorder struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (r *failureRecorder) Helper() {}

func (r *failureRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *failureRecorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// run calls check with the recorder on its own goroutine (Fatalf ends it) and returns the
// failures it reported.
func (r *failureRecorder) run(check func(testing.TB)) []string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failures
}

// The negative control of this suite: the checkers the acceptance tests rely on fail on a
// database that shows a double effect or an effect without its receipt, so a passing storm
// test means something.
func TestCheckersCatchDoubleEffectsAndMissingReceipts(t *testing.T) {
	s := newStack(t, sharedPostgres(t), "checkers", stackOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	// One PAID order whose payment was recorded as an effect twice (a payment and a bogus refund
	// of the whole amount stand for "paid twice": the schema forbids two payment rows), and one
	// PAID order with a ledger entry but no receipt.
	for _, no := range []string{"ord-double", "ord-noreceipt"} {
		exec(`INSERT INTO payment_orders (order_no, channel, merchant_id, amount, currency, status, provider_txn_id, paid_at, request_digest)
		      VALUES ($1, 'sw', 'm', 100, 'CNY', 'PAID', 'txn', now(), 'd')`, no)
		exec(`INSERT INTO ledger_entries (order_no, entry_type, amount, currency, idempotency_key) VALUES ($1, 'payment', 100, 'CNY', $1)`, no)
	}
	exec(`INSERT INTO ledger_entries (order_no, entry_type, refund_no, amount, currency, idempotency_key) VALUES ('ord-double', 'refund', 'r1', 100, 'CNY', 'k2')`)
	exec(`INSERT INTO callback_receipts (idempotency_key, channel, merchant_id, order_no, kind, status, amount, outcome)
	      VALUES ('k1', 'sw', 'm', 'ord-double', 'payment', 'SUCCEEDED', 100, 'applied')`)
	exec(`INSERT INTO outbox_events (event_id, channel, order_no, event_type, payload) VALUES ('evt_1', 'sw', 'ord-double', 'payment.succeeded', '{}')`)
	exec(`INSERT INTO outbox_events (event_id, channel, order_no, event_type, payload) VALUES ('evt_2', 'sw', 'ord-noreceipt', 'payment.succeeded', '{}')`)

	failures := (&failureRecorder{TB: t}).run(func(tb testing.TB) { s.expectExactlyOnce(tb, 2) })
	joined := strings.Join(failures, "\n")
	if !strings.Contains(joined, "receipts=1 ledger=3") || !strings.Contains(joined, "more than one ledger entry: expected 0, got 1") {
		t.Errorf("expectExactlyOnce on a double effect and a missing receipt: expected both reported, got:\n%s", joined)
	}

	committed := s.committedOrders(t)
	if !committed["ord-double"] || committed["ord-noreceipt"] {
		t.Errorf("committedOrders: expected ord-double (receipt and ledger) and not ord-noreceipt (ledger only), got %v", committed)
	}
	if ok, err := s.committedNow(ctx, "ord-noreceipt"); err != nil || ok {
		t.Errorf("committedNow(ord-noreceipt): expected false, got %v, %v", ok, err)
	}
}
