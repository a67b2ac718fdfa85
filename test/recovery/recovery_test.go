package recovery

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/reconciler"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
)

// TestCallbackAndActiveQueryRace is acceptance 3: the provider's callback and an active query
// (the merchant's "check payment") for the same payment, started at the same instant, 50 times
// on each provider: every order is paid once — one ledger entry, one outbox event — whichever
// wins, and the loser is acknowledged or told to retry, never applied a second time.
func TestCallbackAndActiveQueryRace(t *testing.T) {
	e := newEnv(t)
	const rounds = 50
	verdicts := map[string]int{}
	syncs := map[string]int{}
	for _, channel := range []string{wxChannel, aliChannel} {
		for i := range rounds {
			orderNo := uniq(t, fmt.Sprintf("RACE-%s-%02d", channel, i))
			txn := fmt.Sprintf("42%s%06d", channel, i)
			amount := int64(100 + i)
			e.registerOrder(t, channel, orderNo, amount, nil)
			e.pay(channel, orderNo, txn, amount)
			callback := e.paymentCallback(t, channel, orderNo, txn, amount)

			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				verdict notify.Verdict
				sendErr error
				res     query.Result
				syncErr error
			)
			// The query spends a database read and a provider round trip before it reaches the
			// gates; delaying the callback by 0 to 45 ms lets each path arrive first in some rounds.
			delay := time.Duration(i%10) * 5 * time.Millisecond
			wg.Go(func() {
				<-start
				time.Sleep(delay)
				verdict, sendErr = e.deliver(t.Context(), channel, callback)
			})
			wg.Go(func() {
				<-start
				res, syncErr = e.syncer.SyncOrder(t.Context(), orderNo)
			})
			close(start)
			wg.Wait()

			if sendErr != nil {
				t.Fatalf("%s: deliver: %v", orderNo, sendErr)
			}
			verdicts[verdict.String()]++
			switch {
			case syncErr == nil:
				syncs[string(res.Action)+"/"+res.Outcome]++
			case errors.Is(syncErr, query.ErrTransient):
				syncs["transient"]++ // the callback held the key: "sync again"
			default:
				t.Errorf("%s: sync: expected success or a transient failure, got %v", orderNo, syncErr)
			}
			if verdict == notify.Reject {
				t.Errorf("%s: callback: expected success or retry, got reject", orderNo)
			}
			// Whoever lost, the provider's next resend is acknowledged.
			if verdict == notify.Retry {
				if v, _ := e.deliver(t.Context(), channel, callback); v != notify.Success {
					t.Errorf("%s: resent callback: expected success, got %s", orderNo, v)
				}
			}
			s := e.state(t, orderNo)
			if s.status != store.StatusPaid || s.payments != 1 || s.outboxEvents != 1 || s.exceptions != 0 {
				t.Errorf("%s: expected PAID with 1 payment entry, 1 outbox event, 0 exceptions; got %s with %d, %d, %d",
					orderNo, s.status, s.payments, s.outboxEvents, s.exceptions)
			}
		}
	}
	t.Logf("callback verdicts: %v; syncs (action/outcome): %v", verdicts, syncs)
}

// TestReconcilerPaysDroppedNotifications is acceptance 4: the provider never calls back (the
// notification is dropped) and its query API fails for a while; the reconciler finds the orders
// once they are overdue, retries the failed queries at the next sweep, and pays every order
// exactly once. The dropped notification arriving at last changes nothing.
func TestReconcilerPaysDroppedNotifications(t *testing.T) {
	e := newEnv(t)
	r, reg := e.newReconciler(t, 1000)

	type paid struct{ channel, orderNo, txn string }
	var orders []paid
	for _, channel := range []string{wxChannel, aliChannel} {
		for i := range 10 {
			p := paid{channel, uniq(t, fmt.Sprintf("DROP-%s-%02d", channel, i)), fmt.Sprintf("43%s%06d", channel, i)}
			e.registerOrder(t, channel, p.orderNo, 1999, nil)
			e.pay(p.channel, p.orderNo, p.txn, 1999) // paid at the provider; no callback is ever sent
			orders = append(orders, p)
		}
	}

	// Not overdue yet: nothing is queried.
	reports, err := r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("first sweep: %v", err)
	}
	for _, rep := range reports {
		if rep.Candidates != 0 {
			t.Errorf("%s: orders younger than pendingAfter: expected no candidates, got %d", rep.Channel, rep.Candidates)
		}
	}

	// Past pendingAfter, during a provider outage of 7 queries.
	e.clock.Advance(11 * time.Minute)
	e.failures.Store(7)
	reports, err = r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("sweep during the outage: expected the failed queries not to fail the sweep, got %v", err)
	}
	var transient, paidNow int
	for _, rep := range reports {
		if rep.Candidates != 10 {
			t.Errorf("%s: expected 10 overdue orders, got %d", rep.Channel, rep.Candidates)
		}
		transient += rep.Results[reconciler.ResultTransientError]
		paidNow += rep.Paid
		if rep.Stuck != int64(rep.Results[reconciler.ResultTransientError]) {
			t.Errorf("%s: stuck after the sweep: expected the %d failed ones, got %d", rep.Channel, rep.Results[reconciler.ResultTransientError], rep.Stuck)
		}
	}
	if transient != 7 || paidNow != 13 {
		t.Errorf("sweep during the outage: expected 7 transient failures and 13 paid, got %d and %d", transient, paidNow)
	}

	// The outage is over: the next sweep asks again about the ones that failed, and only them.
	reports, err = r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("sweep after the outage: %v", err)
	}
	paidNow = 0
	for _, rep := range reports {
		paidNow += rep.Paid
		if rep.Stuck != 0 {
			t.Errorf("%s: expected no stuck order after the outage, got %d", rep.Channel, rep.Stuck)
		}
	}
	if paidNow != 7 {
		t.Errorf("sweep after the outage: expected the 7 remaining orders paid, got %d", paidNow)
	}

	for _, p := range orders {
		if s := e.state(t, p.orderNo); s.status != store.StatusPaid || s.payments != 1 || s.outboxEvents != 1 {
			t.Errorf("%s: expected PAID with 1 payment entry and 1 outbox event, got %s with %d and %d",
				p.orderNo, s.status, s.payments, s.outboxEvents)
		}
		if q := e.fake.Queries(providerOf(p.channel), map[string]string{wxChannel: mchID, aliChannel: aliApp}[p.channel], p.orderNo); q != 1 {
			t.Errorf("%s: expected the provider to answer exactly one query (failed ones never reached it), got %d", p.orderNo, q)
		}
	}

	// A third sweep finds nothing; the dropped notifications arriving late change nothing.
	reports, err = r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("third sweep: %v", err)
	}
	for _, rep := range reports {
		if rep.Candidates != 0 {
			t.Errorf("%s: third sweep: expected no candidates, got %d", rep.Channel, rep.Candidates)
		}
	}
	for _, p := range orders {
		v, err := e.deliver(t.Context(), p.channel, e.paymentCallback(t, p.channel, p.orderNo, p.txn, 1999))
		if err != nil || v != notify.Success {
			t.Errorf("%s: late callback: expected success, got %s (%v)", p.orderNo, v, err)
		}
		if s := e.state(t, p.orderNo); s.payments != 1 || s.outboxEvents != 1 {
			t.Errorf("%s: after the late callback: expected still 1 payment and 1 event, got %d and %d", p.orderNo, s.payments, s.outboxEvents)
		}
	}

	for _, tc := range []struct {
		channel, result string
		want            float64
	}{
		{wxChannel, string(query.StatePaid), 10},
		{aliChannel, string(query.StatePaid), 10},
	} {
		if got := counter(t, reg, reconciler.MetricQueries, map[string]string{"channel": tc.channel, "result": tc.result}); got != tc.want {
			t.Errorf("%s{channel=%s,result=%s}: expected %v, got %v", reconciler.MetricQueries, tc.channel, tc.result, tc.want, got)
		}
	}
	failed := counter(t, reg, reconciler.MetricQueries, map[string]string{"channel": wxChannel, "result": reconciler.ResultTransientError}) +
		counter(t, reg, reconciler.MetricQueries, map[string]string{"channel": aliChannel, "result": reconciler.ResultTransientError})
	if failed != 7 {
		t.Errorf("%s{result=transient_error}: expected 7 in all, got %v", reconciler.MetricQueries, failed)
	}
	if got := counter(t, reg, reconciler.MetricSweeps, map[string]string{"channel": wxChannel, "result": reconciler.SweepDone}); got != 4 {
		t.Errorf("%s{channel=wx,result=done}: expected 4, got %v", reconciler.MetricSweeps, got)
	}
	if got := counter(t, reg, reconciler.MetricStuckOrders, map[string]string{"channel": wxChannel}); got != 0 {
		t.Errorf("%s{channel=wx}: expected 0, got %v", reconciler.MetricStuckOrders, got)
	}
}

// TestReconcilerClosesExpiredUnpaidOrders: an expired order the provider reports unpaid (or does
// not know) is closed; one not yet expired stays pending and counts as stuck; a payment
// notification arriving after the close is recorded as an exception, never lost and never
// applied.
func TestReconcilerClosesExpiredUnpaidOrders(t *testing.T) {
	e := newEnv(t)
	r, reg := e.newReconciler(t, 1000)
	now := e.clock.Now()
	expired := now.Add(5 * time.Minute)
	later := now.Add(2 * time.Hour)

	unpaid := uniq(t, "EXP-NOTPAY")
	unknown := uniq(t, "EXP-UNKNOWN")
	closedThere := uniq(t, "EXP-CLOSED")
	young := uniq(t, "NOT-EXPIRED")
	e.registerOrder(t, wxChannel, unpaid, 500, &expired)
	e.registerOrder(t, wxChannel, unknown, 500, &expired)
	e.registerOrder(t, aliChannel, closedThere, 500, &later)
	e.registerOrder(t, wxChannel, young, 500, &later)
	e.fake.Put(
		fakeTrade(wxChannel, unpaid, "", 500, "NOTPAY"),
		fakeTrade(aliChannel, closedThere, "2026112999001", 500, "CLOSED"),
		fakeTrade(wxChannel, young, "", 500, "NOTPAY"),
	)

	e.clock.Advance(11 * time.Minute) // past pendingAfter and past the first two expiries
	if _, err := r.Sweep(t.Context()); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, tc := range []struct {
		orderNo string
		want    store.OrderStatus
	}{
		{unpaid, store.StatusClosed},      // expired, provider says NOTPAY
		{unknown, store.StatusClosed},     // expired, provider has no such trade
		{closedThere, store.StatusClosed}, // the provider closed it
		{young, store.StatusPending},      // overdue but not expired, provider says NOTPAY
	} {
		if s := e.state(t, tc.orderNo); s.status != tc.want || s.payments != 0 {
			t.Errorf("%s: expected %s without payment, got %s with %d payments", tc.orderNo, tc.want, s.status, s.payments)
		}
	}
	if got := counter(t, reg, reconciler.MetricStuckOrders, map[string]string{"channel": wxChannel}); got != 1 {
		t.Errorf("%s{channel=wx}: expected the one unexpired unpaid order, got %v", reconciler.MetricStuckOrders, got)
	}

	// The user pays the closed order after all: the payment is an exception for a person.
	e.pay(wxChannel, unpaid, "4200999001", 500)
	v, err := e.deliver(t.Context(), wxChannel, e.paymentCallback(t, wxChannel, unpaid, "4200999001", 500))
	if err != nil || v != notify.Success {
		t.Fatalf("late payment: expected it acknowledged, got %s (%v)", v, err)
	}
	s := e.state(t, unpaid)
	if s.status != store.StatusClosed || s.payments != 0 || s.exceptions != 1 || s.exceptionKinds[0] != string(store.ExceptionPaymentOnClosedOrder) {
		t.Errorf("late payment of a closed order: expected CLOSED, no payment, one %s exception; got %s, %d payments, exceptions %v",
			store.ExceptionPaymentOnClosedOrder, s.status, s.payments, s.exceptionKinds)
	}
}

// TestReconcilerLockAndRate: a replica that finds the channel's sweep lock held skips its turn
// without asking the provider anything, and the queries of a sweep respect queriesPerSecond.
func TestReconcilerLockAndRate(t *testing.T) {
	e := newEnv(t)
	var orders []string
	for i := range 6 {
		no := uniq(t, fmt.Sprintf("LOCK-%d", i))
		e.registerOrder(t, wxChannel, no, 100, nil)
		e.fake.Put(fakeTrade(wxChannel, no, "", 100, "NOTPAY"))
		orders = append(orders, no)
	}
	e.clock.Advance(11 * time.Minute)
	r, _ := e.newReconciler(t, 10)

	// Another replica holds the wx channel's lock.
	conn, err := e.st.Pool().Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, reconciler.LockID(wxChannel)); err != nil {
		t.Fatal(err)
	}
	reports, err := r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("sweep while another replica holds the lock: %v", err)
	}
	if !reports[0].Skipped || reports[0].Channel != wxChannel {
		t.Errorf("expected the wx sweep skipped, got %+v", reports[0])
	}
	for _, no := range orders {
		if q := e.fake.Queries(providerOf(wxChannel), mchID, no); q != 0 {
			t.Errorf("%s: a skipped sweep must not query; got %d queries", no, q)
		}
	}
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, reconciler.LockID(wxChannel)); err != nil {
		t.Fatal(err)
	}
	conn.Release()

	// 6 queries at 10 per second with a burst of 1 take at least 5 intervals of 100 ms.
	start := time.Now()
	reports, err = r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	elapsed := time.Since(start)
	if reports[0].Skipped || reports[0].Results[string(query.StateNotPaid)] != 6 {
		t.Errorf("expected 6 not_paid answers, got %+v", reports[0])
	}
	if elapsed < 500*time.Millisecond {
		t.Errorf("6 queries at 10 per second: expected at least 500ms, took %s", elapsed)
	}
}

// TestPartialRefunds is acceptance 5, on each provider: refunds of 30 + 30 + 40 of a payment of
// 100, notified by the provider (WeChat Pay REFUND.SUCCESS, Alipay refund notifications), take the
// order to REFUNDED with three refund ledger entries; a fourth notification for the same refund
// number changes nothing; on another order a refund beyond what is left is not applied, is
// acknowledged (so the provider stops resending) and is recorded as an exception and counted as
// an anomaly.
func TestPartialRefunds(t *testing.T) {
	e := newEnv(t)
	for _, channel := range []string{wxChannel, aliChannel} {
		t.Run(channel, func(t *testing.T) {
			ctx := t.Context()
			orderNo := uniq(t, "REFUND")
			txn := "45" + channel + "0100"
			e.registerOrder(t, channel, orderNo, 100, nil)
			if v, err := e.deliver(ctx, channel, e.paymentCallback(t, channel, orderNo, txn, 100)); err != nil || v != notify.Success {
				t.Fatalf("payment: expected success, got %s (%v)", v, err)
			}

			steps := []struct {
				refundNo string
				amount   int64
				status   store.OrderStatus
				refunded int64
				refunds  int
				events   int64
			}{
				{"RF-1", 30, store.StatusPartiallyRefunded, 30, 1, 2},
				{"RF-2", 30, store.StatusPartiallyRefunded, 60, 2, 3},
				{"RF-3", 40, store.StatusRefunded, 100, 3, 4},
				{"RF-3", 40, store.StatusRefunded, 100, 3, 4}, // the fourth notification, for the same refund number
			}
			for i, st := range steps {
				full := st.status == store.StatusRefunded
				v, err := e.deliver(ctx, channel, e.refundCallback(t, channel, orderNo, txn, st.refundNo, 100, st.amount, full))
				if err != nil || v != notify.Success {
					t.Fatalf("refund %d (%s): expected success, got %s (%v)", i+1, st.refundNo, v, err)
				}
				s := e.state(t, orderNo)
				if s.status != st.status || s.refunded != st.refunded || s.refunds != st.refunds || s.payments != 1 || s.outboxEvents != st.events || s.exceptions != 0 {
					t.Errorf("after refund %d (%s %d): expected %s refunded %d with %d refund entries, 1 payment, %d events, no exception; "+
						"got %s refunded %d with %d refund entries, %d payments, %d events, %d exceptions",
						i+1, st.refundNo, st.amount, st.status, st.refunded, st.refunds, st.events,
						s.status, s.refunded, s.refunds, s.payments, s.outboxEvents, s.exceptions)
				}
			}

			// A refund that would exceed the paid amount.
			over := uniq(t, "REFUND-OVER")
			overTxn := "45" + channel + "0101"
			e.registerOrder(t, channel, over, 100, nil)
			if v, err := e.deliver(ctx, channel, e.paymentCallback(t, channel, over, overTxn, 100)); err != nil || v != notify.Success {
				t.Fatalf("payment: expected success, got %s (%v)", v, err)
			}
			if v, err := e.deliver(ctx, channel, e.refundCallback(t, channel, over, overTxn, "RF-A", 100, 60, false)); err != nil || v != notify.Success {
				t.Fatalf("refund of 60: expected success, got %s (%v)", v, err)
			}
			labels := map[string]string{"channel": channel, "reason": "payment_exception"}
			anomaliesBefore := counter(t, e.metrics.Registry, "callbackd_anomalies_total", labels)
			for attempt := range 2 { // the provider resends: still one exception
				v, err := e.deliver(ctx, channel, e.refundCallback(t, channel, over, overTxn, "RF-B", 100, 50, false))
				if err != nil || v != notify.Success {
					t.Fatalf("refund of 50 (attempt %d): expected it acknowledged so the provider stops, got %s (%v)", attempt+1, v, err)
				}
			}
			s := e.state(t, over)
			if s.status != store.StatusPartiallyRefunded || s.refunded != 60 || s.refunds != 1 || s.exceptions != 1 ||
				s.exceptionKinds[0] != string(store.ExceptionRefundExceedsPaid) {
				t.Errorf("refund beyond the paid amount: expected PARTIALLY_REFUNDED, refunded 60, 1 refund entry, one %s exception; "+
					"got %s, refunded %d, %d refund entries, exceptions %v", store.ExceptionRefundExceedsPaid, s.status, s.refunded, s.refunds, s.exceptionKinds)
			}
			if got := counter(t, e.metrics.Registry, "callbackd_anomalies_total", labels); got != anomaliesBefore+1 {
				t.Errorf("callbackd_anomalies_total{channel=%s,reason=payment_exception}: expected %v, got %v", channel, anomaliesBefore+1, got)
			}
		})
	}
}

// fakeTrade is a trade at the fake provider in a provider state word (NOTPAY, CLOSED).
func fakeTrade(channel, orderNo, txn string, amount int64, state string) fakeprovider.Trade {
	merchant := map[string]string{wxChannel: mchID, aliChannel: aliApp}[channel]
	t := fakeprovider.Trade{Provider: providerOf(channel), MerchantID: merchant, OutTradeNo: orderNo, TransactionID: txn,
		Amount: amount, Currency: "CNY"}
	switch state {
	case "NOTPAY":
		t.State = fakeprovider.StateNotPaid
	case "CLOSED":
		t.State = fakeprovider.StateClosed
	}
	return t
}

// TestSyncRefusesAnAnswerTheOrderCannotTake: the provider reports a payment of another amount
// than the order's. The pipeline refuses it like such a callback (an anomaly, nothing written),
// the sync fails permanently, and the reconciler counts it as a permanent error and leaves the
// order pending for a person to look at.
func TestSyncRefusesAnAnswerTheOrderCannotTake(t *testing.T) {
	e := newEnv(t)
	orderNo := uniq(t, "MISMATCH")
	e.registerOrder(t, wxChannel, orderNo, 1000, nil)
	e.pay(wxChannel, orderNo, "4200000999", 999)

	_, err := e.syncer.SyncOrder(t.Context(), orderNo)
	if !errors.Is(err, query.ErrPermanent) {
		t.Fatalf("sync of a mismatched payment: expected a permanent failure, got %v", err)
	}
	if s := e.state(t, orderNo); s.status != store.StatusPending || s.payments != 0 || s.outboxEvents != 0 {
		t.Errorf("expected the order untouched (PENDING, no payment, no event), got %s, %d, %d", s.status, s.payments, s.outboxEvents)
	}
	if got := counter(t, e.metrics.Registry, "callbackd_anomalies_total", map[string]string{"channel": wxChannel, "reason": string(store.AmountMismatch)}); got != 1 {
		t.Errorf("callbackd_anomalies_total{reason=amount_mismatch}: expected 1, got %v", got)
	}

	r, reg := e.newReconciler(t, 1000)
	e.clock.Advance(11 * time.Minute)
	reports, err := r.Sweep(t.Context())
	if err != nil {
		t.Fatalf("sweep: a refused answer must not fail the sweep, got %v", err)
	}
	if reports[0].Results[reconciler.ResultPermanentError] != 1 || reports[0].Stuck != 1 {
		t.Errorf("wx sweep: expected 1 permanent error and 1 stuck order, got %+v", reports[0])
	}
	if got := counter(t, reg, reconciler.MetricQueries, map[string]string{"channel": wxChannel, "result": reconciler.ResultPermanentError}); got != 1 {
		t.Errorf("%s{result=permanent_error}: expected 1, got %v", reconciler.MetricQueries, got)
	}
}

// TestConcurrentReplicasDoNotDuplicateASweep: two replicas' reconcilers sweep the same overdue
// orders at the same moment; the channel's advisory lock lets one sweep at a time, so the
// provider is asked about each order exactly once and each is paid once.
func TestConcurrentReplicasDoNotDuplicateASweep(t *testing.T) {
	e := newEnv(t)
	var orders []string
	for i := range 12 {
		no := uniq(t, fmt.Sprintf("REPLICA-%02d", i))
		e.registerOrder(t, wxChannel, no, 300, nil)
		e.pay(wxChannel, no, fmt.Sprintf("46wx%06d", i), 300)
		orders = append(orders, no)
	}
	e.clock.Advance(11 * time.Minute)
	// Slow enough (20 queries per second) that the two sweeps overlap.
	first, _ := e.newReconciler(t, 20)
	second, _ := e.newReconciler(t, 20)

	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		reps  [2][]reconciler.Report
		errs  [2]error
	)
	for i, r := range []*reconciler.Reconciler{first, second} {
		wg.Go(func() {
			<-start
			reps[i], errs[i] = r.Sweep(t.Context())
		})
	}
	close(start)
	wg.Wait()
	paid, swept := 0, 0
	for i := range reps {
		if errs[i] != nil {
			t.Fatalf("replica %d: sweep: %v", i+1, errs[i])
		}
		for _, rep := range reps[i] {
			if rep.Channel == wxChannel {
				paid += rep.Paid
				if !rep.Skipped && rep.Candidates > 0 {
					swept++
				}
			}
		}
	}
	// One replica swept the orders; the other found the lock held (skipped) or, had it come
	// after the first was done, nothing left to do.
	if swept != 1 {
		t.Errorf("expected exactly one replica to sweep the overdue orders, got %d (reports %+v / %+v)", swept, reps[0], reps[1])
	}
	if paid != len(orders) {
		t.Errorf("expected the replicas to pay %d orders between them, got %d (reports %+v / %+v)", len(orders), paid, reps[0], reps[1])
	}
	for _, no := range orders {
		if q := e.fake.Queries(providerOf(wxChannel), mchID, no); q != 1 {
			t.Errorf("%s: expected exactly one provider query, got %d", no, q)
		}
		if s := e.state(t, no); s.status != store.StatusPaid || s.payments != 1 || s.outboxEvents != 1 {
			t.Errorf("%s: expected PAID with 1 payment and 1 event, got %s, %d, %d", no, s.status, s.payments, s.outboxEvents)
		}
	}
}
