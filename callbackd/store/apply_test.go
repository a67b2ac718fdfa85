package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// TestApplyOutcomes is the state machine as a table: an order, the notifications that came
// before, one more notification, and what Apply must answer and write.
func TestApplyOutcomes(t *testing.T) {
	base := testOrder("o-1")
	usd := base
	usd.Currency = "USD"
	withSub := base
	withSub.SubMerchantID = "sub-9"

	with := func(n notify.Notification, f func(*notify.Notification)) notify.Notification {
		f(&n)
		return n
	}
	failedRefund := with(refundOf(base, "txn-1", "rf-1", 30), func(n *notify.Notification) { n.Status = notify.StatusFailed })

	tests := []struct {
		name   string
		order  NewOrder
		before []notify.Notification
		n      notify.Notification
		want   Outcome
		// wantStatus is the order status after the call.
		wantStatus OrderStatus
		// wantWrites is whether the call writes anything at all.
		wantWrites bool
		wantErr    error
		wantExc    ExceptionKind
	}{
		{name: "payment of a pending order", order: base, n: paymentOf(base, "txn-1"),
			want: Applied, wantStatus: StatusPaid, wantWrites: true},
		{name: "the same payment again", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: paymentOf(base, "txn-1"), want: Duplicate, wantStatus: StatusPaid},
		{name: "the same payment with another notify id", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.NotifyID = "resend-7" }), want: Duplicate, wantStatus: StatusPaid},
		{name: "unknown order", order: base, n: paymentOf(testOrder("o-404"), "txn-1"), want: UnknownOrder},
		{name: "amount below the order's", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Amount = 99 }), want: AmountMismatch, wantStatus: StatusPending},
		{name: "amount above the order's", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Amount = 101 }), want: AmountMismatch, wantStatus: StatusPending},
		{name: "negative amount", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Amount = -100 }), want: AmountMismatch},
		{name: "other merchant", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.MerchantID = "mch-2" }), want: MerchantMismatch, wantStatus: StatusPending},
		{name: "missing sub-merchant", order: withSub,
			n: with(paymentOf(withSub, "txn-1"), func(n *notify.Notification) { n.SubMerchantID = "" }), want: MerchantMismatch, wantStatus: StatusPending},
		{name: "other channel", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Channel = "alipay" }), want: MerchantMismatch, wantStatus: StatusPending},
		{name: "other currency", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Currency = "USD" }), want: CurrencyMismatch, wantStatus: StatusPending},
		{name: "currency not stated is the provider's implicit one", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Currency = "" }), want: Applied, wantStatus: StatusPaid, wantWrites: true},
		{name: "lower-case currency", order: usd,
			n: with(paymentOf(usd, "txn-1"), func(n *notify.Notification) { n.Currency = "usd" }), want: Applied, wantStatus: StatusPaid, wantWrites: true},
		{name: "payment without a provider transaction id (generic providers)", order: base,
			n: with(paymentOf(base, ""), func(n *notify.Notification) { n.OccurredAt = time.Time{} }), want: Applied, wantStatus: StatusPaid, wantWrites: true},
		{name: "payment without a transaction id of a paid order", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: paymentOf(base, ""), want: Duplicate, wantStatus: StatusPaid},
		{name: "ignored notification", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Status = notify.StatusIgnored }), want: Ignored, wantStatus: StatusPending},
		{name: "second payment with another transaction", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: paymentOf(base, "txn-2"), want: Exception, wantExc: ExceptionDuplicatePayment, wantStatus: StatusPaid, wantWrites: true},
		{name: "payment of a closed order", order: base, before: []notify.Notification{closeOf(base)},
			n: paymentOf(base, "txn-1"), want: Exception, wantExc: ExceptionPaymentOnClosedOrder, wantStatus: StatusClosed, wantWrites: true},
		{name: "close of a pending order", order: base, n: closeOf(base), want: Applied, wantStatus: StatusClosed, wantWrites: true},
		{name: "close of a paid order", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: closeOf(base), want: NoChange, wantStatus: StatusPaid, wantWrites: true},
		{name: "close of another merchant's order", order: base,
			n: with(closeOf(base), func(n *notify.Notification) { n.MerchantID = "mch-2" }), want: MerchantMismatch, wantStatus: StatusPending},
		{name: "partial refund", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: refundOf(base, "txn-1", "rf-1", 30), want: Applied, wantStatus: StatusPartiallyRefunded, wantWrites: true},
		{name: "full refund", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: refundOf(base, "txn-1", "rf-1", 100), want: Applied, wantStatus: StatusRefunded, wantWrites: true},
		{name: "refund beyond the paid amount", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: refundOf(base, "txn-1", "rf-1", 101), want: Exception, wantExc: ExceptionRefundExceedsPaid, wantStatus: StatusPaid, wantWrites: true},
		{name: "refund of zero", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: refundOf(base, "txn-1", "rf-1", 0), want: AmountMismatch, wantStatus: StatusPaid},
		{name: "refund in another currency", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: with(refundOf(base, "txn-1", "rf-1", 30), func(n *notify.Notification) { n.Currency = "EUR" }), want: CurrencyMismatch, wantStatus: StatusPaid},
		{name: "refund of a closed order", order: base, before: []notify.Notification{closeOf(base)},
			n: refundOf(base, "txn-1", "rf-1", 30), want: Exception, wantExc: ExceptionRefundOnClosedOrder, wantStatus: StatusClosed, wantWrites: true},
		{name: "refund before the payment was applied", order: base,
			n: refundOf(base, "txn-1", "rf-1", 30), wantErr: ErrRefundBeforePayment},
		{name: "failed refund", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: failedRefund, want: NoChange, wantStatus: StatusPaid, wantWrites: true},
		{name: "refund succeeding after a failed attempt with the same number", order: base,
			before: []notify.Notification{paymentOf(base, "txn-1"), failedRefund},
			n:      refundOf(base, "txn-1", "rf-1", 30), want: Applied, wantStatus: StatusPartiallyRefunded, wantWrites: true},
		{name: "the same refund again", order: base,
			before: []notify.Notification{paymentOf(base, "txn-1"), refundOf(base, "txn-1", "rf-1", 30)},
			n:      refundOf(base, "txn-1", "rf-1", 30), want: Duplicate, wantStatus: StatusPartiallyRefunded},
		{name: "refund of an unknown kind", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.Kind = "chargeback" }), wantErr: ErrInvalidInput},
		{name: "NUL byte in a field", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.NotifyID = "a\x00b" }), wantErr: ErrInvalidInput},
		{name: "invalid UTF-8 in a field", order: base,
			n: with(paymentOf(base, "txn-1"), func(n *notify.Notification) { n.ProviderTxnID = "\xff\xfe" }), wantErr: ErrInvalidInput},
		{name: "refund without a refund number", order: base, before: []notify.Notification{paymentOf(base, "txn-1")},
			n: refundOf(base, "txn-1", "", 30), wantErr: ErrInvalidInput},
	}
	// One database for the table: each case gets order numbers of its own, and the row counts
	// are compared before and after its notification (the cases run one after the other).
	s := newStore(t)
	for i, tc := range tests {
		prefix := fmt.Sprintf("c%d-", i)
		tc.order.OrderNo = prefix + tc.order.OrderNo
		tc.n.OutTradeNo = prefix + tc.n.OutTradeNo
		tc.before = slices.Clone(tc.before)
		for j := range tc.before {
			tc.before[j].OutTradeNo = prefix + tc.before[j].OutTradeNo
		}
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			mustCreate(t, s, tc.order)
			for _, n := range tc.before {
				if res, err := s.Apply(ctx, n); err != nil || !res.Outcome.Acknowledge() {
					t.Fatalf("setup Apply(%s) = %q, %v; want an acknowledged outcome", n.Kind, res.Outcome, err)
				}
			}
			before := mustCounts(t, s)

			res, err := s.Apply(ctx, tc.n)

			after := mustCounts(t, s)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Apply error = %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Apply error = %v, want outcome %q", err, tc.want)
				}
				if res.Outcome != tc.want {
					t.Fatalf("Apply outcome = %q (%s), want %q", res.Outcome, res.Detail, tc.want)
				}
				if res.Exception != tc.wantExc {
					t.Errorf("exception kind = %q, want %q", res.Exception, tc.wantExc)
				}
				if tc.want != Ignored && res.OrderStatus != string(tc.wantStatus) {
					t.Errorf("result order status = %q, want %q", res.OrderStatus, tc.wantStatus)
				}
			}
			if wrote := !sameCounts(before, after); wrote != tc.wantWrites {
				t.Errorf("rows written = %v, want %v (counts before %+v, after %+v)", wrote, tc.wantWrites, before, after)
			}
			if tc.wantStatus != "" {
				if got := mustOrder(t, s, tc.order.OrderNo).Status; got != tc.wantStatus {
					t.Errorf("stored order status = %q, want %q", got, tc.wantStatus)
				}
			}
		})
	}
}

func TestApplyMismatchLeavesNoReceiptSoTheCorrectNotificationStillApplies(t *testing.T) {
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	wrong := paymentOf(o, "txn-1")
	wrong.Amount = 1
	mustApply(t, s, wrong, AmountMismatch)
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)
}

func TestApplyWritesOrderLedgerOutboxAndReceipt(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	n := paymentOf(o, "txn-1")
	res := mustApply(t, s, n, Applied)

	if want := EventID(n.IdempotencyKey()); res.EventID != want {
		t.Errorf("event id = %q, want %q (derived from the idempotency key)", res.EventID, want)
	}
	d := mustOrder(t, s, o.OrderNo)
	if d.Status != StatusPaid || d.ProviderTxnID != "txn-1" || d.PaidAt == nil || !d.PaidAt.Equal(n.OccurredAt) {
		t.Errorf("order = %s txn %q paid_at %v; want PAID, txn-1, %v", d.Status, d.ProviderTxnID, d.PaidAt, n.OccurredAt)
	}
	if len(d.Ledger) != 1 || d.Ledger[0].Type != "payment" || d.Ledger[0].Amount != 100 || d.Ledger[0].Currency != "CNY" {
		t.Errorf("ledger = %+v, want one payment of 100 CNY", d.Ledger)
	}
	var (
		eventType, status string
		payload           EventPayload
	)
	if err := s.Pool().QueryRow(ctx, `SELECT event_type, status, payload FROM outbox_events WHERE event_id = $1`,
		res.EventID).Scan(&eventType, &status, &payload); err != nil {
		t.Fatalf("read outbox event: %v", err)
	}
	if eventType != EventPaymentSucceeded || status != "PENDING" || payload.OrderNo != o.OrderNo ||
		payload.Amount != 100 || payload.OrderStatus != string(StatusPaid) || payload.EventID != res.EventID {
		t.Errorf("outbox event = %s %s %+v; want a pending %s for %s", eventType, status, payload, EventPaymentSucceeded, o.OrderNo)
	}
	var outcome, notifyID string
	if err := s.Pool().QueryRow(ctx, `SELECT outcome, notify_id FROM callback_receipts WHERE idempotency_key = $1`,
		n.IdempotencyKey()).Scan(&outcome, &notifyID); err != nil {
		t.Fatalf("read receipt: %v", err)
	}
	if outcome != string(Applied) || notifyID != n.NotifyID {
		t.Errorf("receipt outcome %q notify id %q, want %q %q", outcome, notifyID, Applied, n.NotifyID)
	}
	ok, err := s.ReceiptCommitted(ctx, n.IdempotencyKey())
	if err != nil || !ok {
		t.Errorf("ReceiptCommitted = %v, %v; want true", ok, err)
	}
	ok, err = s.ReceiptCommitted(ctx, paymentOf(testOrder("o-2"), "txn-9").IdempotencyKey())
	if err != nil || ok {
		t.Errorf("ReceiptCommitted(unknown key) = %v, %v; want false", ok, err)
	}
}

// The field's replay storm, at the database gate only: 50 concurrent copies of one notification.
func TestApplyConcurrentCopiesApplyExactlyOnce(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	n := paymentOf(o, "txn-1")

	const copies = 50
	outcomes := make(chan Outcome, copies)
	errs := make(chan error, copies)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range copies {
		wg.Go(func() {
			<-start
			res, err := s.Apply(ctx, n)
			if err != nil {
				errs <- err
				return
			}
			outcomes <- res.Outcome
		})
	}
	close(start)
	wg.Wait()
	close(outcomes)
	close(errs)
	for err := range errs {
		t.Errorf("Apply error: %v", err)
	}
	got := map[Outcome]int{}
	for oc := range outcomes {
		got[oc]++
	}
	if got[Applied] != 1 || got[Duplicate] != copies-1 {
		t.Fatalf("outcomes = %v, want 1 applied and %d duplicates", got, copies-1)
	}
	c := mustCounts(t, s)
	if c.Receipts != 1 || c.LedgerEntries != 1 || c.OutboxEvents != 1 || c.OrdersByStatus[StatusPaid] != 1 {
		t.Fatalf("counts = %+v, want 1 receipt, 1 ledger entry, 1 outbox event, 1 PAID order", c)
	}
}

// A payment and a close of the same order racing: exactly one of them takes effect, the other
// sees the result (a close of a paid order is NoChange, a payment of a closed order is an
// exception), never both.
func TestApplyPaymentAndCloseRace(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	const orders = 20
	paidFirst, closedFirst := 0, 0
	for i := range orders {
		o := testOrder(fmt.Sprintf("o-%d", i))
		mustCreate(t, s, o)
		var pay, cls Result
		var payErr, clsErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; pay, payErr = s.Apply(ctx, paymentOf(o, "txn-"+o.OrderNo)) })
		wg.Go(func() { <-start; cls, clsErr = s.Apply(ctx, closeOf(o)) })
		close(start)
		wg.Wait()
		if payErr != nil || clsErr != nil {
			t.Fatalf("%s: Apply errors: payment %v, close %v", o.OrderNo, payErr, clsErr)
		}
		status := mustOrder(t, s, o.OrderNo).Status
		switch {
		case pay.Outcome == Applied && cls.Outcome == NoChange && status == StatusPaid:
			paidFirst++
		case cls.Outcome == Applied && pay.Outcome == Exception && pay.Exception == ExceptionPaymentOnClosedOrder && status == StatusClosed:
			closedFirst++
		default:
			t.Fatalf("%s: payment %q, close %q, final status %s; want exactly one effect", o.OrderNo, pay.Outcome, cls.Outcome, status)
		}
	}
	c := mustCounts(t, s)
	if c.LedgerPayments != int64(paidFirst) || c.Exceptions != int64(closedFirst) || c.Receipts != 2*orders {
		t.Fatalf("counts = %+v; want %d payments in the ledger, %d exceptions, %d receipts", c, paidFirst, closedFirst, 2*orders)
	}
	t.Logf("payment won %d races, close won %d", paidFirst, closedFirst)
}

func TestApplyPartialRefundsUpToTheFullAmount(t *testing.T) {
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)

	steps := []struct {
		refundNo   string
		amount     int64
		want       Outcome
		wantStatus OrderStatus
		refunded   int64
	}{
		{"rf-1", 30, Applied, StatusPartiallyRefunded, 30},
		{"rf-2", 30, Applied, StatusPartiallyRefunded, 60},
		{"rf-2", 30, Duplicate, StatusPartiallyRefunded, 60},
		{"rf-3", 41, Exception, StatusPartiallyRefunded, 60},
		{"rf-4", 40, Applied, StatusRefunded, 100},
		{"rf-5", 1, Exception, StatusRefunded, 100},
		{"rf-1", 30, Duplicate, StatusRefunded, 100},
	}
	for i, st := range steps {
		res := mustApply(t, s, refundOf(o, "txn-1", st.refundNo, st.amount), st.want)
		d := mustOrder(t, s, o.OrderNo)
		if d.Status != st.wantStatus || d.RefundedAmount != st.refunded || res.OrderStatus != string(st.wantStatus) {
			t.Fatalf("step %d (%s %d): order %s refunded %d (result %s), want %s refunded %d",
				i, st.refundNo, st.amount, d.Status, d.RefundedAmount, res.OrderStatus, st.wantStatus, st.refunded)
		}
	}
	d := mustOrder(t, s, o.OrderNo)
	var refunds []string
	for _, e := range d.Ledger {
		if e.Type == "refund" {
			refunds = append(refunds, fmt.Sprintf("%s:%d", e.RefundNo, e.Amount))
		}
	}
	if fmt.Sprint(refunds) != "[rf-1:30 rf-2:30 rf-4:40]" {
		t.Errorf("refund ledger = %v, want [rf-1:30 rf-2:30 rf-4:40]", refunds)
	}
	if c := mustCounts(t, s); c.Exceptions != 2 || c.LedgerEntries != 4 {
		t.Errorf("counts = %+v, want 2 exceptions (rf-3, rf-5) and 4 ledger entries", c)
	}
}

// Concurrent refunds with distinct numbers never refund more than was paid.
func TestApplyConcurrentRefundsNeverExceedThePaidAmount(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)

	const refunds = 10 // of 30 each: only three fit into 100
	results := make([]Result, refunds)
	errs := make([]error, refunds)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range refunds {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Apply(ctx, refundOf(o, "txn-1", fmt.Sprintf("rf-%d", i), 30))
		})
	}
	close(start)
	wg.Wait()
	got := map[Outcome]int{}
	for i := range refunds {
		if errs[i] != nil {
			t.Fatalf("refund %d: %v", i, errs[i])
		}
		got[results[i].Outcome]++
	}
	if got[Applied] != 3 || got[Exception] != refunds-3 {
		t.Fatalf("outcomes = %v, want 3 applied and %d exceptions", got, refunds-3)
	}
	if d := mustOrder(t, s, o.OrderNo); d.RefundedAmount != 90 || d.Status != StatusPartiallyRefunded {
		t.Fatalf("order refunded %d (%s), want 90 (PARTIALLY_REFUNDED)", d.RefundedAmount, d.Status)
	}
}

// A second, different successful payment shares the idempotency key of the first (same order,
// same kind): it must not be taken for a duplicate, and its retries must be recorded once.
func TestApplySecondDifferentPaymentIsRecordedOnce(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	first, second := paymentOf(o, "txn-1"), paymentOf(o, "txn-2")
	mustApply(t, s, first, Applied)

	if ok, err := s.NotificationCommitted(ctx, second); err != nil || ok {
		t.Fatalf("NotificationCommitted(second payment) before it was applied = %v, %v; want false", ok, err)
	}
	res := mustApply(t, s, second, Exception)
	if res.Exception != ExceptionDuplicatePayment || res.EventID == "" || res.EventID == EventID(first.IdempotencyKey()) {
		t.Errorf("exception result = %+v; want duplicate_payment with its own event id", res)
	}
	mustApply(t, s, second, Duplicate)
	mustApply(t, s, first, Duplicate)
	if ok, err := s.NotificationCommitted(ctx, second); err != nil || !ok {
		t.Fatalf("NotificationCommitted(second payment) after it was recorded = %v, %v; want true", ok, err)
	}

	var kind, txn string
	var amount int64
	if err := s.Pool().QueryRow(ctx, `SELECT kind, provider_txn_id, amount FROM payment_exceptions WHERE order_no = $1`,
		o.OrderNo).Scan(&kind, &txn, &amount); err != nil {
		t.Fatalf("read exception: %v", err)
	}
	if kind != string(ExceptionDuplicatePayment) || txn != "txn-2" || amount != 100 {
		t.Errorf("exception row = %s %s %d, want duplicate_payment txn-2 100", kind, txn, amount)
	}
	c := mustCounts(t, s)
	if c.Exceptions != 1 || c.LedgerEntries != 1 || c.OutboxEvents != 2 || c.OrdersByStatus[StatusPaid] != 1 {
		t.Fatalf("counts = %+v, want 1 exception, 1 ledger entry, 2 outbox events (payment, exception), 1 PAID order", c)
	}
	if d := mustOrder(t, s, o.OrderNo); d.ProviderTxnID != "txn-1" {
		t.Errorf("order transaction = %q, want the first payment's txn-1", d.ProviderTxnID)
	}
}

// After the receipt retention purged the receipts, a late copy still changes nothing: the order
// state machine and the ledger recognize the effects.
func TestApplyAfterReceiptPurgeIsNoChange(t *testing.T) {
	ctx := testContext(t)
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)
	mustApply(t, s, refundOf(o, "txn-1", "rf-1", 100), Applied)
	if _, err := s.Pool().Exec(ctx, `UPDATE callback_receipts SET created_at = now() - interval '31 days'`); err != nil {
		t.Fatalf("age receipts: %v", err)
	}
	if n, err := s.PurgeReceipts(ctx, 720*time.Hour); err != nil || n != 2 {
		t.Fatalf("PurgeReceipts = %d, %v; want 2", n, err)
	}
	mustApply(t, s, paymentOf(o, "txn-1"), NoChange)
	mustApply(t, s, refundOf(o, "txn-1", "rf-1", 100), NoChange)
	if c := mustCounts(t, s); c.LedgerEntries != 2 || c.OutboxEvents != 2 || c.Exceptions != 0 {
		t.Fatalf("counts = %+v, want the 2 original ledger entries and events, no exception", c)
	}
}

func TestApplyWithCancelledContextWritesNothing(t *testing.T) {
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	before := mustCounts(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Apply(ctx, paymentOf(o, "txn-1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled context = %v, want context.Canceled", err)
	}
	if after := mustCounts(t, s); !sameCounts(before, after) {
		t.Fatalf("counts changed from %+v to %+v, want nothing written", before, after)
	}
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)
}

// A request cancelled in the middle of the transaction (after the receipt insert and the row
// lock) leaves nothing behind, and releases the lock for the provider's retry.
func TestApplyCancelledMidTransactionWritesNothing(t *testing.T) {
	s := newStore(t)
	o := testOrder("o-1")
	mustCreate(t, s, o)
	before := mustCounts(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.hooks.afterOrderRead = cancel
	_, err := s.Apply(ctx, paymentOf(o, "txn-1"))
	s.hooks.afterOrderRead = nil
	if err == nil {
		t.Fatalf("Apply cancelled mid-transaction succeeded, want an error")
	}
	if after := mustCounts(t, s); !sameCounts(before, after) {
		t.Fatalf("counts changed from %+v to %+v, want nothing written", before, after)
	}
	retryCtx, cancelRetry := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelRetry()
	res, err := s.Apply(retryCtx, paymentOf(o, "txn-1"))
	if err != nil || res.Outcome != Applied {
		t.Fatalf("retry after the cancelled attempt = %q, %v; want applied", res.Outcome, err)
	}
}

// A row lock held elsewhere (a stuck transaction, a long report) makes Apply fail after
// LockTimeout, well before the Redis claim expires, with nothing written; once the lock is
// gone the same notification applies.
func TestApplyGivesUpAfterLockTimeout(t *testing.T) {
	ctx := testContext(t)
	dsn := migratedDatabase(t)
	s, err := Open(ctx, dsn, Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	o := testOrder("o-1")
	mustCreate(t, s, o)
	before := mustCounts(t, s)

	blocker, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatalf("begin blocker: %v", err)
	}
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM payment_orders WHERE order_no = $1 FOR UPDATE`, o.OrderNo); err != nil {
		t.Fatalf("blocker lock: %v", err)
	}
	began := time.Now()
	_, err = s.Apply(ctx, paymentOf(o, "txn-1"))
	waited := time.Since(began)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Apply against a locked order = %v, want lock_not_available (55P03)", err)
	}
	if waited > 5*time.Second {
		t.Errorf("Apply waited %v for the lock, want about the 200ms lock timeout", waited)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatalf("release blocker: %v", err)
	}
	if after := mustCounts(t, s); !sameCounts(before, after) {
		t.Fatalf("counts changed from %+v to %+v, want nothing written", before, after)
	}
	mustApply(t, s, paymentOf(o, "txn-1"), Applied)
}
