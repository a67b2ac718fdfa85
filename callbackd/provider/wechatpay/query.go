package wechatpay

import (
	"net/http"
	"strings"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// Trade states of the APIv3 order query's trade_state.
const (
	TradeStateSuccess    = "SUCCESS"    // paid
	TradeStateRefund     = "REFUND"     // paid, then (part of it) refunded
	TradeStateNotPay     = "NOTPAY"     // not paid yet
	TradeStateClosed     = "CLOSED"     // closed unpaid
	TradeStateRevoked    = "REVOKED"    // cancelled (payment-code trades)
	TradeStateUserPaying = "USERPAYING" // the user is entering a password
	TradeStatePayError   = "PAYERROR"   // this payment attempt failed; the order may still be paid
	TradeStateAccept     = "ACCEPT"     // accepted, not yet charged
)

// VerifyResponse verifies the signature of an APIv3 response with the channel's WeChat Pay keys.
// Responses are signed exactly as notifications are (Wechatpay-Serial, -Signature, -Timestamp,
// -Nonce over "timestamp\nnonce\nbody\n", the same timestamp window), so the same check applies.
// Errors are *notify.Error values.
func (a *Adapter) VerifyResponse(h http.Header, body []byte) error {
	return a.verify(h, body)
}

// QueriedTransaction normalizes a verified answer of the order query
// (GET /v3/pay/transactions/out-trade-no/{out_trade_no}) into the notification a callback of
// the same state would have produced, so that both paths share one idempotency key:
//
//	SUCCESS, REFUND                        payment, StatusSucceeded (REFUND means it was paid)
//	CLOSED, REVOKED                        close, StatusSucceeded
//	NOTPAY, USERPAYING, ACCEPT, PAYERROR   payment, StatusIgnored (nothing to apply yet)
//
// Any other state is refused as unsupported; a transaction of another merchant as a mismatch.
// Errors are *notify.Error values.
func (a *Adapter) QueriedTransaction(body []byte) (notify.Notification, error) {
	var tx transaction
	if err := decodeStrict(body, &tx); err != nil {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "query answer is not a transaction")
	}
	if err := a.checkIdentity(tx.identity, true); err != nil {
		return notify.Notification{}, err
	}
	if tx.OutTradeNo == "" {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "query answer without out_trade_no")
	}
	n := notify.Notification{
		Channel:       a.cfg.Channel,
		Provider:      ProviderName,
		MerchantID:    a.cfg.MchID,
		SubMerchantID: tx.SubMchID,
		OutTradeNo:    tx.OutTradeNo,
		Kind:          notify.KindPayment,
		Status:        notify.StatusIgnored,
		ProviderTxnID: tx.TransactionID,
		BodyDigest:    notify.Digest(body),
	}
	switch tx.TradeState {
	case TradeStateSuccess, TradeStateRefund:
		if tx.TransactionID == "" {
			return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "paid transaction without transaction_id")
		}
		if tx.Amount == nil || tx.Amount.Total == nil || *tx.Amount.Total < 0 {
			return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "paid transaction without a non-negative amount.total")
		}
		// The same fields, read the same way, as a TRANSACTION.SUCCESS notification.
		n.Status = notify.StatusSucceeded
		n.Amount = *tx.Amount.Total
		n.Currency = strings.ToUpper(tx.Amount.Currency)
		if n.Currency == "" {
			n.Currency = "CNY"
		}
		n.OccurredAt = parseTime(tx.SuccessTime)
	case TradeStateClosed, TradeStateRevoked:
		n.Kind, n.Status = notify.KindClose, notify.StatusSucceeded
	case TradeStateNotPay, TradeStateUserPaying, TradeStateAccept, TradeStatePayError:
		// Nothing happened yet that the order could record.
	default:
		return notify.Notification{}, notify.Errorf(notify.ReasonUnsupported, "trade_state %q", truncate(tx.TradeState))
	}
	return n, nil
}
