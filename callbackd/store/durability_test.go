package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The promise the provider relies on: whatever Apply acknowledged (returned without error)
// survives the database process being killed mid-storm; what it did not acknowledge may or may
// not have committed, and re-sending everything afterwards converges to exactly one effect per
// order. Runs on a server of its own with fsync on, the production setting.
func TestAcknowledgedEffectsSurviveAKilledDatabase(t *testing.T) {
	server := testenv.StartPostgres(t)
	ctx := testContext(t)
	if _, err := Migrate(ctx, server.DSN(), nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := Open(ctx, server.DSN(), Options{MaxConns: 8})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()

	const (
		orders    = 300
		killAfter = 100 // acknowledged payments before the kill
		workers   = 6
	)
	seedOrders(t, s, "dur", orders)

	var (
		next, ackedCount atomic.Int64
		mu               sync.Mutex
		acked            []string
		failures         atomic.Int64
		reached          = make(chan struct{})
		wg               sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > orders {
					return
				}
				n := benchPayment("dur", i)
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				res, err := s.Apply(callCtx, n)
				cancel()
				if err != nil {
					failures.Add(1)
					continue
				}
				if res.Outcome != Applied {
					t.Errorf("%s: outcome %q before any retry, want applied", n.OutTradeNo, res.Outcome)
					continue
				}
				mu.Lock()
				acked = append(acked, n.OutTradeNo)
				mu.Unlock()
				if ackedCount.Add(1) == killAfter {
					close(reached)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-reached:
		server.Kill(t) // mid-storm: the workers are still applying
	case <-done:
		t.Fatalf("the storm ended before %d acknowledgements; the kill never happened", killAfter)
	}
	<-done
	if failures.Load() == 0 {
		t.Fatalf("no Apply failed after the kill; the test did not exercise a crash")
	}
	s.Close()
	server.Start(t)

	s2, err := Open(ctx, server.DSN(), Options{MaxConns: 8})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	var durable int
	if err := s2.Pool().QueryRow(ctx, `
SELECT count(*) FROM payment_orders o JOIN ledger_entries l USING (order_no)
WHERE o.order_no = ANY($1) AND o.status = 'PAID' AND l.entry_type = 'payment'`, acked).Scan(&durable); err != nil {
		t.Fatalf("count durable payments: %v", err)
	}
	if durable != len(acked) {
		t.Fatalf("%d of %d acknowledged payments survived the kill, want all", durable, len(acked))
	}

	// The provider resends everything: acknowledged ones are duplicates, the rest apply once.
	ackedSet := make(map[string]bool, len(acked))
	for _, no := range acked {
		ackedSet[no] = true
	}
	outcomes := map[Outcome]int{}
	for i := int64(1); i <= orders; i++ {
		n := benchPayment("dur", i)
		res, err := s2.Apply(ctx, n)
		if err != nil {
			t.Fatalf("resend %s: %v", n.OutTradeNo, err)
		}
		if ackedSet[n.OutTradeNo] && res.Outcome != Duplicate {
			t.Errorf("resend of acknowledged %s = %q, want duplicate", n.OutTradeNo, res.Outcome)
		}
		if res.Outcome != Applied && res.Outcome != Duplicate {
			t.Errorf("resend of %s = %q, want applied or duplicate", n.OutTradeNo, res.Outcome)
		}
		outcomes[res.Outcome]++
	}
	c := mustCounts(t, s2)
	if c.OrdersByStatus[StatusPaid] != orders || c.LedgerPayments != orders || c.Receipts != orders || c.OutboxEvents != orders {
		t.Fatalf("after the resend: counts %+v; want %d paid orders, ledger payments, receipts and events", c, orders)
	}
	t.Logf("%d acknowledged before the kill (all durable), %d calls failed; resend: %s", len(acked), failures.Load(),
		fmt.Sprint(outcomes))
}
