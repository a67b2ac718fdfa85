package hostile

import (
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// A notification with a valid signature (the provider's real key) but for another merchant: the
// provider signs every merchant's notifications with the same platform key, so a signature alone
// does not say the notification is ours. Each is refused, writes nothing, counts a
// merchant_mismatch anomaly; the order, registered here under the same out_trade_no, stays
// PENDING and is still paid by its genuine notification afterwards.
func TestValidSignatureForAnotherMerchant(t *testing.T) {
	e := suite
	cases := []struct {
		name    string
		channel string
		build   func(o order) paysim.Notification
	}{
		{"WeChat Pay mchid of another merchant", wxChannel, func(o order) paysim.Notification {
			tx := wxPayment(o)
			tx.MchID = "1900000999"
			return e.mustWx(t, tx, paysim.WeChatOptions{})
		}},
		{"WeChat Pay appid of another app", wxChannel, func(o order) paysim.Notification {
			tx := wxPayment(o)
			tx.AppID = "wx0000000000000000"
			return e.mustWx(t, tx, paysim.WeChatOptions{})
		}},
		{"WeChat Pay service-provider form (sp_mchid/sub_mchid) on a direct-merchant channel", wxChannel, func(o order) paysim.Notification {
			tx := wxPayment(o)
			tx.MchID, tx.AppID = "", ""
			tx.SpMchID, tx.SubMchID, tx.SpAppID = mchID, "1900000888", appID
			return e.mustWx(t, tx, paysim.WeChatOptions{})
		}},
		{"WeChat Pay refund of another merchant", wxChannel, func(o order) paysim.Notification {
			n, err := e.wx.Refund(paysim.WeChatRefund{MchID: "1900000999", OutTradeNo: o.no, TransactionID: o.txn,
				OutRefundNo: "rf-" + o.no, RefundID: "50300" + randomDigits(20), RefundStatus: "SUCCESS",
				UserReceivedAccount: "支付用户零钱",
				Amount:              paysim.WeChatRefundAmount{Total: o.amount, Refund: o.amount, PayerTotal: o.amount, PayerRefund: o.amount}},
				paysim.WeChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}},
		{"Alipay app_id of another application", aliChannel, func(o order) paysim.Notification {
			other := *e.ali
			other.AppID = "2021000000009999"
			return e.mustAli(t, &other, aliTrade(o))
		}},
		{"Alipay seller_id of another seller", aliChannel, func(o order) paysim.Notification {
			tr := aliTrade(o)
			tr.SellerID = "2088000000000999"
			return e.mustAli(t, e.ali, tr)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := e.register(t, tc.channel, "foreign", 1234)
			n := tc.build(o)
			e.expectRefused(t, refusal{channel: tc.channel, what: tc.name + " (validly signed)",
				send: func() answer { return e.send(tc.channel, n) }, reason: "merchant_mismatch"})
			if got := e.order(t, o.no); got.Status != "PENDING" || got.Receipts != 0 {
				t.Errorf("order: expected PENDING without receipt, got %+v", got)
			}
			e.pay(t, o)
			if got := e.order(t, o.no); got.Status != "PAID" || got.Ledger != 1 {
				t.Errorf("order after its genuine notification: expected PAID with 1 ledger entry, got %+v", got)
			}
		})
	}
}

// A second, different payment (another provider transaction) of an order already paid: real
// money arrived twice. It is recorded as a payment exception (a payment_exceptions row, an
// anomaly, an outbox event for the merchant) and answered as the protocol demands for a
// notification that has been handled (WeChat Pay 2xx, Alipay "success"), so the provider stops
// resending; never dropped, never a second ledger entry. Its own resends are duplicates.
func TestSecondPaymentOfPaidOrder(t *testing.T) {
	e := suite
	for _, channel := range []string{wxChannel, aliChannel} {
		t.Run(channel, func(t *testing.T) {
			o := e.register(t, channel, "second-pay", 8800)
			e.pay(t, o)
			second := o
			second.txn = "42000" + randomDigits(23)
			var n paysim.Notification
			if channel == wxChannel {
				n = e.mustWx(t, wxPayment(second), paysim.WeChatOptions{})
			} else {
				n = e.mustAli(t, e.ali, aliTrade(second))
			}
			before, mBefore := e.state(t), e.scrape(t)
			answers := make([]answer, 3)
			for i := range answers {
				answers[i] = e.send(channel, n)
				if !isSuccess(channel, answers[i]) {
					t.Errorf("delivery %d of the second payment: expected the protocol's success answer, got %s", i+1, answers[i])
				}
			}
			after := e.state(t)
			got := e.order(t, o.no)
			if got.Status != "PAID" || got.Ledger != 1 || got.Excps != 1 || got.Outbox != 2 {
				t.Errorf("order: expected PAID, 1 ledger entry, 1 exception, 2 outbox events (payment, exception), got %+v", got)
			}
			if kinds := e.exceptionKinds(t, o.no); len(kinds) != 1 || kinds[0] != "duplicate_payment" {
				t.Errorf("payment_exceptions: expected [duplicate_payment], got %v", kinds)
			}
			if after.Ledger != before.Ledger || after.Exceptions != before.Exceptions+1 {
				t.Errorf("database: expected no ledger entry and one exception more\n  before %s\n  after  %s", before, after)
			}
			an := promtext.Delta(anomalies(mBefore, channel), anomalies(e.scrape(t), channel))
			if len(an) != 1 || an["payment_exception"] != 1 {
				t.Errorf("callbackd_anomalies_total: expected payment_exception +1 and nothing else, got %s", promtext.Format(an))
			}
			t.Logf("sent a second payment (other transaction) of a paid order 3 times → %s / %s / %s; anomalies %s; database %s → %s",
				answers[0], answers[1], answers[2], promtext.Format(an), before, after)
		})
	}
}
