package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// raceBothReads makes a payment and a close of one order read the order before either of them
// updates it (the interleaving a row lock normally prevents), then lets both finish. It returns
// the two outcomes and the final order.
func raceBothReads(t *testing.T, s *Store) (pay, cls Result, final OrderDetails) {
	t.Helper()
	ctx := testContext(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)

	// Both transactions wait here until both have read the order (or a second has passed, so
	// a variant that serializes the reads cannot hang the test).
	var arrived sync.WaitGroup
	arrived.Add(2)
	released := make(chan struct{})
	go func() { arrived.Wait(); close(released) }()
	var calls atomic.Int32
	s.hooks.afterOrderRead = func() {
		if calls.Add(1) > 2 {
			return // a retried transaction: the interleaving already happened
		}
		arrived.Done()
		select {
		case <-released:
		case <-time.After(time.Second):
		}
	}
	defer func() { s.hooks.afterOrderRead = nil }()

	var payErr, clsErr error
	var wg sync.WaitGroup
	wg.Go(func() { pay, payErr = s.Apply(ctx, paymentOf(o, "txn-1")) })
	wg.Go(func() { cls, clsErr = s.Apply(ctx, closeOf(o)) })
	wg.Wait()
	if payErr != nil || clsErr != nil {
		t.Fatalf("Apply errors: payment %v, close %v", payErr, clsErr)
	}
	return pay, cls, mustOrder(t, s, o.OrderNo)
}

// Negative control: with the row lock AND the status guard removed, the race the production
// code prevents really happens: both the payment and the close take effect, and the order ends
// CLOSED with a payment in its ledger. This proves that the race tests can fail.
func TestNegativeControlUnguardedUpdateDoublesTheEffect(t *testing.T) {
	s := newStore(t)
	s.hooks.skipRowLock = true
	s.hooks.unguardedUpdate = true

	pay, cls, final := raceBothReads(t, s)

	if pay.Outcome != Applied || cls.Outcome != Applied {
		t.Fatalf("without lock and guard: payment %q, close %q; want both applied (the double effect)", pay.Outcome, cls.Outcome)
	}
	// Whichever update ran last decides the status; either way the order was both paid and
	// closed, and the merchant was told both.
	if len(final.Ledger) != 1 || (final.Status != StatusClosed && final.Status != StatusPaid) {
		t.Fatalf("without lock and guard: order %s with %d ledger entries; want a payment in the ledger",
			final.Status, len(final.Ledger))
	}
	rows, err := s.Pool().Query(testContext(t), `SELECT event_type FROM outbox_events ORDER BY event_type`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	if fmt.Sprint(types) != fmt.Sprint([]string{EventOrderClosed, EventPaymentSucceeded}) {
		t.Fatalf("without lock and guard: outbox events %v, want both %s and %s", types, EventOrderClosed, EventPaymentSucceeded)
	}
	t.Logf("without lock and guard the order ended %s after being both paid and closed", final.Status)
}

// The same interleaving without the row lock but with the status guard: the guard alone keeps
// the effect single (the loser's update matches no row, its transaction is retried and decided
// again on the new state).
func TestStatusGuardAloneKeepsTheEffectSingle(t *testing.T) {
	s := newStore(t)
	s.hooks.skipRowLock = true

	pay, cls, final := raceBothReads(t, s)

	payWon := pay.Outcome == Applied && cls.Outcome == NoChange && final.Status == StatusPaid
	closeWon := cls.Outcome == Applied && pay.Outcome == Exception && final.Status == StatusClosed
	if !payWon && !closeWon {
		t.Fatalf("with the guard: payment %q, close %q, order %s; want exactly one effect", pay.Outcome, cls.Outcome, final.Status)
	}
	c := mustCounts(t, s)
	switch {
	case payWon && (c.LedgerPayments != 1 || c.OutboxEvents != 1 || c.Exceptions != 0):
		t.Fatalf("payment won, counts %+v; want 1 payment, 1 event, no exception", c)
	case closeWon && (c.LedgerPayments != 0 || c.OutboxEvents != 2 || c.Exceptions != 1):
		t.Fatalf("close won, counts %+v; want no payment, 2 events (closed, exception), 1 exception", c)
	}
}
