package hostile

import (
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// A valid notification captured and replayed 25 hours later.
//
// WeChat Pay signs Wechatpay-Timestamp into the signature and callbackd refuses a timestamp 300 s
// or more from now, so a replay 25 h later is refused whatever the order's state, and writes
// nothing. (callbackd's serve has no clock to move; a notification signed with a timestamp 25 h
// in the past is, byte for byte, what a replay 25 h later looks like.)
//
// Alipay signs no timestamp or nonce: protocols.md says replay protection comes from
// deduplication and the state machine. So:
//   - the replay of an applied notification is a duplicate: answered "success" (or Alipay
//     resends for ~25 h), no second effect;
//   - a notification first seen 25 h after the payment, for an order still PENDING here, is
//     Alipay's own signed statement that the buyer paid (its resends last ~25 h; a lost one
//     arrives late). Refusing it would lose a real payment, so it is applied, exactly once;
//   - if the order was closed meanwhile, the late payment is real money on a closed order: it
//     is recorded as a payment exception for a person to refund, answered "success", and the
//     order stays CLOSED.
func TestReplay25HoursLater(t *testing.T) {
	e := suite
	past := time.Now().Add(-25 * time.Hour)

	t.Run("WeChat Pay payment replayed 25h later for a pending order is refused", func(t *testing.T) {
		o := e.register(t, wxChannel, "replay-wx-pending", 1999)
		tx := wxPayment(o)
		tx.SuccessTime = paysim.WeChatTime(past)
		n := e.mustWx(t, tx, paysim.WeChatOptions{Timestamp: past})
		e.expectRefused(t, refusal{channel: wxChannel, what: "WeChat Pay TRANSACTION.SUCCESS signed 25h ago (Wechatpay-Timestamp now-25h)",
			send: func() answer { return e.send(wxChannel, n) }, reason: "stale_timestamp"})
		if got := e.order(t, o.no); got.Status != "PENDING" || got.Receipts != 0 {
			t.Errorf("order after the replay: expected PENDING without receipt, got %+v", got)
		}
		// Not even a receipt was written: the genuine, fresh notification still takes effect.
		e.pay(t, o)
		if got := e.order(t, o.no); got.Status != "PAID" || got.Ledger != 1 {
			t.Errorf("order after the genuine notification: expected PAID with 1 ledger entry, got %+v", got)
		}
	})

	t.Run("WeChat Pay payment replayed 25h later for a paid order is refused", func(t *testing.T) {
		o := e.register(t, wxChannel, "replay-wx-paid", 2999)
		e.pay(t, o)
		tx := wxPayment(o)
		n := e.mustWx(t, tx, paysim.WeChatOptions{Timestamp: past})
		e.expectRefused(t, refusal{channel: wxChannel, what: "WeChat Pay replay (timestamp now-25h) of an applied payment",
			send: func() answer { return e.send(wxChannel, n) }, reason: "stale_timestamp"})
	})

	t.Run("Alipay replay of an applied notification 25h later is a duplicate answered success", func(t *testing.T) {
		o := e.register(t, aliChannel, "replay-ali-paid", 4999)
		tr := aliTrade(o)
		tr.GmtPayment = past
		signer := *e.ali
		signer.Now = func() time.Time { return past } // notify_time 25h ago
		n := e.mustAli(t, &signer, tr)
		if a := e.send(aliChannel, n); !isSuccess(aliChannel, a) {
			t.Fatalf("original delivery: expected success, got %s", a)
		}
		before, mBefore := e.state(t), e.scrape(t)
		a := e.send(aliChannel, n) // the identical bytes again
		if !isSuccess(aliChannel, a) {
			t.Errorf("replay of the applied notification: expected exactly \"success\" (Alipay resends otherwise), got %s", a)
		}
		e.unchanged(t, before, "Alipay replay of an applied notification")
		dups := promtext.Delta(mBefore.ByLabel("callbackd_duplicates_stopped_total", "gate", map[string]string{"channel": aliChannel}),
			e.scrape(t).ByLabel("callbackd_duplicates_stopped_total", "gate", map[string]string{"channel": aliChannel}))
		if total(dups) != 1 {
			t.Errorf("callbackd_duplicates_stopped_total: expected +1, got %s", promtext.Format(dups))
		}
		if got := e.order(t, o.no); got.Status != "PAID" || got.Ledger != 1 || got.Receipts != 1 || got.Outbox != 1 {
			t.Errorf("order: expected PAID with 1 receipt, 1 ledger entry, 1 outbox event, got %+v", got)
		}
		t.Logf("sent the applied Alipay notification (notify_time 25h ago) again → %s; duplicates stopped %s; database unchanged: %s", a, promtext.Format(dups), before)
	})

	t.Run("Alipay notification first seen 25h after the payment of a pending order is applied once", func(t *testing.T) {
		o := e.register(t, aliChannel, "replay-ali-late", 5999)
		tr := aliTrade(o)
		tr.GmtPayment = past
		signer := *e.ali
		signer.Now = func() time.Time { return past }
		n := e.mustAli(t, &signer, tr)
		before := e.state(t)
		for i := 0; i < 3; i++ {
			if a := e.send(aliChannel, n); !isSuccess(aliChannel, a) {
				t.Errorf("delivery %d of the late notification: expected \"success\", got %s", i+1, a)
			}
		}
		after := e.state(t)
		if got := e.order(t, o.no); got.Status != "PAID" || got.Ledger != 1 || got.Receipts != 1 || got.Outbox != 1 || got.Excps != 0 {
			t.Errorf("order: expected PAID once (1 receipt, 1 ledger entry, 1 outbox event, no exception), got %+v", got)
		}
		if after.Ledger-before.Ledger != 1 || after.Paid-before.Paid != 1 {
			t.Errorf("database: expected exactly one more ledger entry and paid order, got\n  before %s\n  after  %s", before, after)
		}
		t.Logf("sent one Alipay TRADE_SUCCESS with notify_time and gmt_payment 25h ago, 3 times → applied once; database %s → %s", before, after)
	})

	t.Run("Alipay payment first seen 25h later for an order closed meanwhile is an exception", func(t *testing.T) {
		o := e.register(t, aliChannel, "replay-ali-closed", 6999)
		closing := aliTrade(o)
		closing.TradeStatus, closing.GmtPayment = paysim.AlipayTradeClosed, time.Time{}
		if a := e.send(aliChannel, e.mustAli(t, e.ali, closing)); !isSuccess(aliChannel, a) {
			t.Fatalf("TRADE_CLOSED: expected success, got %s", a)
		}
		if got := e.order(t, o.no); got.Status != "CLOSED" {
			t.Fatalf("order after TRADE_CLOSED: expected CLOSED, got %+v", got)
		}
		tr := aliTrade(o)
		tr.GmtPayment = past
		signer := *e.ali
		signer.Now = func() time.Time { return past }
		n := e.mustAli(t, &signer, tr)
		mBefore := e.scrape(t)
		for i := 0; i < 2; i++ {
			if a := e.send(aliChannel, n); !isSuccess(aliChannel, a) {
				t.Errorf("delivery %d of the late payment: expected \"success\" (recorded, Alipay must stop), got %s", i+1, a)
			}
		}
		got := e.order(t, o.no)
		if got.Status != "CLOSED" || got.Ledger != 0 || got.Excps != 1 {
			t.Errorf("order: expected CLOSED, no ledger entry, 1 payment exception, got %+v", got)
		}
		kinds := e.exceptionKinds(t, o.no)
		if len(kinds) != 1 || kinds[0] != "payment_on_closed_order" {
			t.Errorf("payment_exceptions: expected [payment_on_closed_order], got %v", kinds)
		}
		an := promtext.Delta(anomalies(mBefore, aliChannel), anomalies(e.scrape(t), aliChannel))
		if an["payment_exception"] != 1 {
			t.Errorf("callbackd_anomalies_total{reason=payment_exception}: expected +1, got %s", promtext.Format(an))
		}
		t.Logf("sent a 25h-old TRADE_SUCCESS twice for a CLOSED order → exceptions %v, anomalies %s, order %+v", kinds, promtext.Format(an), got)
	})
}

func total(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}
