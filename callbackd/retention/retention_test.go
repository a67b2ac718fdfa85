package retention_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/retention"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	var err error
	pg, err = testenv.NewPostgres(
		testenv.WithoutFsync("retention tests check batching and locking against concurrent writers, not disk durability"),
		testenv.WithSetting("max_connections", "100"),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "retention tests: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pg.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "retention tests: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := testContext(t)
	dsn := pg.NewDatabase(t, "")
	if _, err := store.Migrate(ctx, dsn, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := store.Open(ctx, dsn, store.Options{MaxConns: 24})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

const receiptRetention = 30 * 24 * time.Hour

func channels() []config.Channel {
	ch := config.Channel{Name: "wx"}
	ch.TTLs.ReceiptRetention = metav1.Duration{Duration: receiptRetention}
	return []config.Channel{ch}
}

func order(no string) store.NewOrder {
	return store.NewOrder{OrderNo: no, Channel: "wx", MerchantID: "mch-1", Amount: 100, Currency: "CNY"}
}

func payment(no string) notify.Notification {
	return notify.Notification{Channel: "wx", Provider: "wechatpay", MerchantID: "mch-1", OutTradeNo: no,
		Kind: notify.KindPayment, Status: notify.StatusSucceeded, Amount: 100, Currency: "CNY",
		ProviderTxnID: "txn-" + no, NotifyID: "n-" + no}
}

func count(t *testing.T, s *store.Store, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(testContext(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func exec(t *testing.T, s *store.Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.Pool().Exec(testContext(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestSweepPurgesInBatchesWhileCallbacksApply is acceptance 6 (and h5's test 3): while payments
// and their duplicates are applied concurrently, repeated sweeps remove every expired receipt in
// small batches, without an error on either side and without a duplicate effect; fresh receipts,
// orders, ledger and outbox are kept; expired API idempotency keys and submit tokens go too.
func TestSweepPurgesInBatchesWhileCallbacksApply(t *testing.T) {
	s := newStore(t)
	ctx := testContext(t)
	const oldOrders, newOrders = 300, 300

	// 300 orders paid 40 days ago, 300 registered and waiting for their payment.
	for i := range oldOrders {
		no := fmt.Sprintf("old-%03d", i)
		if _, _, err := s.CreateOrder(ctx, order(no)); err != nil {
			t.Fatalf("CreateOrder(%s): %v", no, err)
		}
		if res, err := s.Apply(ctx, payment(no)); err != nil || res.Outcome != store.Applied {
			t.Fatalf("Apply(%s) = %v, %v; want applied", no, res.Outcome, err)
		}
	}
	exec(t, s, `UPDATE callback_receipts SET created_at = now() - interval '40 days'`)
	for i := range newOrders {
		if _, _, err := s.CreateOrder(ctx, order(fmt.Sprintf("new-%03d", i))); err != nil {
			t.Fatalf("CreateOrder: %v", err)
		}
	}
	// API records: 3 of each expired (3 days old), 2 of each fresh.
	for i := range 5 {
		key := fmt.Sprintf("idem-%d", i)
		if _, _, err := s.ClaimIdempotencyKey(ctx, key, "digest"); err != nil {
			t.Fatalf("ClaimIdempotencyKey: %v", err)
		}
		if _, err := s.IssueSubmitToken(ctx); err != nil {
			t.Fatalf("IssueSubmitToken: %v", err)
		}
	}
	exec(t, s, `UPDATE api_idempotency_keys SET created_at = now() - interval '3 days' WHERE idempotency_key IN ('idem-0', 'idem-1', 'idem-2')`)
	exec(t, s, `UPDATE submit_tokens SET created_at = now() - interval '3 days' WHERE token_hash IN (SELECT token_hash FROM submit_tokens ORDER BY token_hash LIMIT 3)`)

	sw, err := retention.NewSweeper(s.Pool(), channels(), retention.Options{BatchSize: 10, Pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewSweeper: %v", err)
	}

	// Writers: every new order's payment, each twice, interleaved with every old order's payment
	// again (a late provider retry whose receipt may or may not have been purged yet: a duplicate
	// either way), from 6 goroutines.
	var work []notify.Notification
	for i := range max(newOrders, oldOrders) {
		if i < newOrders {
			work = append(work, payment(fmt.Sprintf("new-%03d", i)))
		}
		if i < oldOrders {
			work = append(work, payment(fmt.Sprintf("old-%03d", i)))
		}
		if i < newOrders {
			work = append(work, payment(fmt.Sprintf("new-%03d", i)))
		}
	}
	jobs := make(chan notify.Notification)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[store.Outcome]int{}
		errs     []error
	)
	for range 6 {
		wg.Go(func() {
			for n := range jobs {
				res, err := s.Apply(ctx, n)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("Apply(%s): %w", n.OutTradeNo, err))
				}
				outcomes[res.Outcome]++
				mu.Unlock()
			}
		})
	}
	sweepDone := make(chan struct{})
	var (
		total  retention.Report
		sweeps int
	)
	go func() {
		defer close(sweepDone)
		writersDone := false
		for !writersDone {
			mu.Lock()
			writersDone = outcomes[store.Applied]+outcomes[store.Duplicate]+outcomes[store.NoChange]+len(errs) >= len(work)
			mu.Unlock()
			rep, err := sw.Sweep(ctx)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("Sweep: %w", err))
				mu.Unlock()
				return
			}
			sweeps++
			total.Receipts += rep.Receipts
			total.IdempotencyKeys += rep.IdempotencyKeys
			total.SubmitTokens += rep.SubmitTokens
			total.Batches += rep.Batches
		}
	}()
	for _, n := range work {
		jobs <- n
	}
	close(jobs)
	wg.Wait()
	<-sweepDone

	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d sweeps, %d batches, %d receipts purged; outcomes %v", sweeps, total.Batches, total.Receipts, outcomes)
	if outcomes[store.Applied] != newOrders {
		t.Errorf("%d payments applied, want exactly one per new order (%d)", outcomes[store.Applied], newOrders)
	}
	if total.Receipts != oldOrders {
		t.Errorf("sweeps purged %d receipts, want the %d expired ones", total.Receipts, oldOrders)
	}
	if min := oldOrders / 10; total.Batches <= min {
		t.Errorf("sweeps ran %d batches, want more than %d: %d receipts in batches of 10", total.Batches, min, oldOrders)
	}
	cutoff := time.Now().Add(-receiptRetention)
	if n := count(t, s, `SELECT count(*) FROM callback_receipts WHERE created_at < $1`, cutoff); n != 0 {
		t.Errorf("%d expired receipts remain, want 0", n)
	}
	if n := count(t, s, `SELECT count(*) FROM callback_receipts WHERE order_no LIKE 'new-%'`); n != newOrders {
		t.Errorf("%d receipts of the new orders remain, want all %d", n, newOrders)
	}
	if n := count(t, s, `SELECT count(*) FROM ledger_entries WHERE entry_type = 'payment'`); n != oldOrders+newOrders {
		t.Errorf("%d payment ledger entries, want exactly one per order (%d): a purge must never let an effect repeat", n, oldOrders+newOrders)
	}
	if n := count(t, s, `SELECT count(*) FROM outbox_events`); n != oldOrders+newOrders {
		t.Errorf("%d outbox events, want exactly one per order (%d)", n, oldOrders+newOrders)
	}
	if n := count(t, s, `SELECT count(*) FROM payment_orders WHERE status = 'PAID'`); n != oldOrders+newOrders {
		t.Errorf("%d orders PAID, want all %d", n, oldOrders+newOrders)
	}
	if total.IdempotencyKeys != 3 || count(t, s, `SELECT count(*) FROM api_idempotency_keys`) != 2 {
		t.Errorf("purged %d idempotency keys leaving %d, want the 3 expired purged and the 2 fresh kept",
			total.IdempotencyKeys, count(t, s, `SELECT count(*) FROM api_idempotency_keys`))
	}
	if total.SubmitTokens != 3 || count(t, s, `SELECT count(*) FROM submit_tokens`) != 2 {
		t.Errorf("purged %d submit tokens leaving %d, want the 3 expired purged and the 2 fresh kept",
			total.SubmitTokens, count(t, s, `SELECT count(*) FROM submit_tokens`))
	}
}

// TestOnlyOneReplicaSweepsAtATime: while another session holds the retention lock a sweep is
// skipped and deletes nothing; once it is released the sweep runs.
func TestOnlyOneReplicaSweepsAtATime(t *testing.T) {
	s := newStore(t)
	ctx := testContext(t)
	if _, _, err := s.ClaimIdempotencyKey(ctx, "idem-old", "digest"); err != nil {
		t.Fatalf("ClaimIdempotencyKey: %v", err)
	}
	exec(t, s, `UPDATE api_idempotency_keys SET created_at = now() - interval '3 days'`)

	other, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer other.Release()
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, retention.LockID); err != nil {
		t.Fatalf("take the lock as another replica: %v", err)
	}
	sw, err := retention.NewSweeper(s.Pool(), channels(), retention.Options{})
	if err != nil {
		t.Fatalf("NewSweeper: %v", err)
	}
	rep, err := sw.Sweep(ctx)
	if err != nil || !rep.Skipped || rep.IdempotencyKeys != 0 {
		t.Fatalf("Sweep while another replica sweeps = %+v, %v; want skipped, nothing deleted", rep, err)
	}
	if n := count(t, s, `SELECT count(*) FROM api_idempotency_keys`); n != 1 {
		t.Fatalf("%d idempotency keys after a skipped sweep, want 1", n)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, retention.LockID); err != nil {
		t.Fatalf("release the lock: %v", err)
	}
	rep, err = sw.Sweep(ctx)
	if err != nil || rep.Skipped || rep.IdempotencyKeys != 1 {
		t.Fatalf("Sweep after the release = %+v, %v; want it to run and purge the expired key", rep, err)
	}
	// The sweep gave its lock back: another session can take it at once.
	var got bool
	if err := other.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, retention.LockID).Scan(&got); err != nil || !got {
		t.Fatalf("pg_try_advisory_lock after a sweep = %v, %v; want the lock free", got, err)
	}
	_, _ = other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, retention.LockID)
}

// TestCutoffFollowsTheInjectedClock: receipts are purged when the clock passes their channel's
// retention, not before.
func TestCutoffFollowsTheInjectedClock(t *testing.T) {
	s := newStore(t)
	ctx := testContext(t)
	if _, _, err := s.CreateOrder(ctx, order("o-1")); err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	if _, err := s.Apply(ctx, payment("o-1")); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	var created time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT created_at FROM callback_receipts`).Scan(&created); err != nil {
		t.Fatalf("read receipt: %v", err)
	}
	clk := clock.NewFake(created.Add(receiptRetention - time.Second))
	sw, err := retention.NewSweeper(s.Pool(), channels(), retention.Options{Clock: clk})
	if err != nil {
		t.Fatalf("NewSweeper: %v", err)
	}
	if rep, err := sw.Sweep(ctx); err != nil || rep.Receipts != 0 {
		t.Fatalf("Sweep 1s before the receipt expires = %+v, %v; want nothing purged", rep, err)
	}
	clk.Advance(2 * time.Second)
	if rep, err := sw.Sweep(ctx); err != nil || rep.Receipts != 1 {
		t.Fatalf("Sweep 1s after the receipt expired = %+v, %v; want it purged", rep, err)
	}
}
