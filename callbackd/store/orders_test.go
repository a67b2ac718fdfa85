package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestCreateOrderIsIdempotentPerRequest(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	expires := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.FixedZone("CST", 8*3600))
	in := testOrder("o-1")
	in.SubMerchantID = "sub-1"
	in.ExpiresAt = &expires

	first, created, err := s.CreateOrder(ctx, in)
	if err != nil || !created {
		t.Fatalf("first CreateOrder = created %v, %v; want created", created, err)
	}
	if first.Status != StatusPending || first.Amount != 100 || first.Currency != "CNY" || first.SubMerchantID != "sub-1" ||
		first.ExpiresAt == nil || !first.ExpiresAt.Equal(expires.Truncate(time.Microsecond)) {
		t.Errorf("created order = %+v; want PENDING 100 CNY sub-1 expiring %v", first, expires)
	}

	again, created, err := s.CreateOrder(ctx, in)
	if err != nil || created {
		t.Fatalf("same request again = created %v, %v; want the existing order, created=false", created, err)
	}
	if again.OrderNo != first.OrderNo || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("same request again returned %+v, want %+v", again, first)
	}

	// The same instant in another zone is the same request.
	utc := expires.UTC()
	sameInstant := in
	sameInstant.ExpiresAt = &utc
	if _, created, err := s.CreateOrder(ctx, sameInstant); err != nil || created {
		t.Errorf("same expiry in UTC = created %v, %v; want the existing order", created, err)
	}

	later := expires.Add(time.Hour)
	for name, mutate := range map[string]func(*NewOrder){
		"amount":       func(o *NewOrder) { o.Amount = 101 },
		"currency":     func(o *NewOrder) { o.Currency = "USD" },
		"channel":      func(o *NewOrder) { o.Channel = "alipay" },
		"merchant":     func(o *NewOrder) { o.MerchantID = "mch-2" },
		"sub-merchant": func(o *NewOrder) { o.SubMerchantID = "" },
		"expiry":       func(o *NewOrder) { o.ExpiresAt = &later },
		"no expiry":    func(o *NewOrder) { o.ExpiresAt = nil },
	} {
		other := in
		mutate(&other)
		if _, _, err := s.CreateOrder(ctx, other); !errors.Is(err, ErrOrderConflict) {
			t.Errorf("different %s for the same order number: err = %v, want ErrOrderConflict", name, err)
		}
	}
	if c := mustCounts(t, s); c.Orders != 1 {
		t.Errorf("orders = %d, want 1", c.Orders)
	}
}

func TestCreateOrderRejectsInvalidInput(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	for name, mutate := range map[string]func(*NewOrder){
		"empty order number":  func(o *NewOrder) { o.OrderNo = "" },
		"empty channel":       func(o *NewOrder) { o.Channel = "" },
		"empty merchant":      func(o *NewOrder) { o.MerchantID = "" },
		"zero amount":         func(o *NewOrder) { o.Amount = 0 },
		"negative amount":     func(o *NewOrder) { o.Amount = -1 },
		"lower-case currency": func(o *NewOrder) { o.Currency = "cny" },
		"long currency":       func(o *NewOrder) { o.Currency = "CNYY" },
		"NUL in order number": func(o *NewOrder) { o.OrderNo = "o\x001" },
		"invalid UTF-8":       func(o *NewOrder) { o.MerchantID = "\xff" },
	} {
		in := testOrder("o-1")
		mutate(&in)
		if _, _, err := s.CreateOrder(ctx, in); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
		}
	}
}

func TestCreateOrderConcurrentSameRequestCreatesOnce(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	const callers = 20
	var created, existing, failed sync.Map
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			_, c, err := s.CreateOrder(ctx, testOrder("o-1"))
			switch {
			case err != nil:
				failed.Store(i, err)
			case c:
				created.Store(i, true)
			default:
				existing.Store(i, true)
			}
		})
	}
	close(start)
	wg.Wait()
	count := func(m *sync.Map) (n int) {
		m.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	failed.Range(func(k, v any) bool { t.Errorf("caller %v: %v", k, v); return true })
	if c, e := count(&created), count(&existing); c != 1 || e != callers-1 {
		t.Fatalf("created %d, existing %d; want 1 and %d", c, e, callers-1)
	}
}

func TestGetOrderReturnsStateAndLedger(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	if _, err := s.GetOrder(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetOrder(missing) = %v, want ErrNotFound", err)
	}
	o := testOrder("o-1")
	mustCreate(t, s, o)
	if d := mustOrder(t, s, o.OrderNo); d.Status != StatusPending || len(d.Ledger) != 0 || d.PaidAt != nil || d.ProviderTxnID != "" {
		t.Fatalf("new order = %+v; want PENDING, unpaid, empty ledger", d)
	}
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)
	mustApply(t, s, refundOf(o, "txn-1", "rf-1", 25), Applied)

	d := mustOrder(t, s, o.OrderNo)
	if d.Status != StatusPartiallyRefunded || d.RefundedAmount != 25 || d.ProviderTxnID != "txn-1" || d.PaidAt == nil {
		t.Errorf("order = %+v; want PARTIALLY_REFUNDED, refunded 25, txn-1, paid", d.Order)
	}
	got := ""
	for _, e := range d.Ledger {
		got += fmt.Sprintf("[%s %q %d %s %s %s]", e.Type, e.RefundNo, e.Amount, e.Currency, e.ProviderTxnID, e.ProviderRefundID)
	}
	want := `[payment "" 100 CNY txn-1 ][refund "rf-1" 25 CNY txn-1 r-rf-1]`
	if got != want {
		t.Errorf("ledger = %s, want %s", got, want)
	}
}

func TestCountsByStatus(t *testing.T) {
	s := newStore(t)
	for i, status := range []OrderStatus{StatusPending, StatusPaid, StatusPaid, StatusClosed, StatusRefunded} {
		o := testOrder(fmt.Sprintf("o-%d", i))
		mustCreate(t, s, o)
		switch status {
		case StatusPaid:
			mustApply(t, s, paymentOf(o, "txn-"+o.OrderNo), Applied)
		case StatusClosed:
			mustApply(t, s, closeOf(o), Applied)
		case StatusRefunded:
			mustApply(t, s, paymentOf(o, "txn-"+o.OrderNo), Applied)
			mustApply(t, s, refundOf(o, "txn-"+o.OrderNo, "rf", 100), Applied)
		}
	}
	c := mustCounts(t, s)
	want := map[OrderStatus]int64{StatusPending: 1, StatusPaid: 2, StatusPartiallyRefunded: 0, StatusRefunded: 1, StatusClosed: 1}
	for st, n := range want {
		if c.OrdersByStatus[st] != n {
			t.Errorf("orders %s = %d, want %d", st, c.OrdersByStatus[st], n)
		}
	}
	if c.Orders != 5 || c.Receipts != 5 || c.LedgerPayments != 3 || c.LedgerRefunds != 1 || c.LedgerEntries != 4 ||
		c.OutboxEvents != 5 || c.Exceptions != 0 {
		t.Errorf("counts = %+v; want 5 orders, 5 receipts, 3 payments + 1 refund, 5 events, no exception", c)
	}
}
