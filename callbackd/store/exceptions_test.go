package store

import (
	"errors"
	"testing"
)

func TestExceptionsListAndResolve(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	paid, closed := testOrder("o-paid"), testOrder("o-closed")
	mustCreate(t, s, paid)
	mustCreate(t, s, closed)
	mustApply(t, s, paymentOf(paid, "txn-1"), Applied)
	mustApply(t, s, paymentOf(paid, "txn-2"), Exception)
	mustApply(t, s, closeOf(closed), Applied)
	mustApply(t, s, paymentOf(closed, "txn-3"), Exception)

	all, err := s.Exceptions(ctx, true, 10)
	if err != nil {
		t.Fatalf("Exceptions: %v", err)
	}
	if len(all) != 2 || all[0].Kind != ExceptionPaymentOnClosedOrder || all[1].Kind != ExceptionDuplicatePayment ||
		all[1].ProviderTxnID != "txn-2" || all[1].Amount != 100 || all[1].Currency != "CNY" || all[1].ResolvedAt != nil {
		t.Fatalf("open exceptions = %+v; want payment_on_closed_order then duplicate_payment (txn-2, 100 CNY), open", all)
	}

	if err := s.ResolveException(ctx, all[1].ID); err != nil {
		t.Fatalf("ResolveException: %v", err)
	}
	if err := s.ResolveException(ctx, all[1].ID); err != nil {
		t.Fatalf("ResolveException again: %v", err)
	}
	if err := s.ResolveException(ctx, 999_999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ResolveException(unknown) = %v, want ErrNotFound", err)
	}
	open, err := s.Exceptions(ctx, true, 10)
	if err != nil || len(open) != 1 || open[0].OrderNo != "o-closed" {
		t.Fatalf("open exceptions after resolving one = %+v, %v; want only o-closed's", open, err)
	}
	everything, err := s.Exceptions(ctx, false, 10)
	if err != nil || len(everything) != 2 || everything[1].ResolvedAt == nil {
		t.Fatalf("all exceptions = %+v, %v; want 2, the duplicate payment resolved", everything, err)
	}
	if _, err := s.Exceptions(ctx, false, 0); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("Exceptions(limit 0) = %v, want ErrInvalidInput", err)
	}
}
