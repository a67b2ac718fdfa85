package alipay

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// VerifyResponse verifies the sign of an OpenAPI answer ({"<method>_response": {...},
// "sign": "..."}): RSA2 (SHA256withRSA) with the channel's Alipay public key over the exact
// bytes of the response object, as they appear in the answer. Errors are *notify.Error values.
func (a *Adapter) VerifyResponse(content []byte, sign string) error {
	sig, err := base64.StdEncoding.DecodeString(sign)
	if err != nil || len(sig) == 0 {
		return notify.Errorf(notify.ReasonMalformed, "answer sign missing or not base64")
	}
	sum := sha256.Sum256(content)
	if err := rsa.VerifyPKCS1v15(a.cfg.Keys.Current().PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		a.cfg.Metrics.Verified(a.cfg.Channel, KeyID, false)
		return notify.Errorf(notify.ReasonBadSignature, "answer sign does not verify with the Alipay public key")
	}
	a.cfg.Metrics.Verified(a.cfg.Channel, KeyID, true)
	return nil
}

// QueriedTrade is the trade part of a successful alipay.trade.query answer (code 10000).
type QueriedTrade struct {
	OutTradeNo  string `json:"out_trade_no"`
	TradeNo     string `json:"trade_no"`
	TradeStatus string `json:"trade_status"`
	TotalAmount string `json:"total_amount"`
	SendPayDate string `json:"send_pay_date"`
}

// TradeNotification normalizes a verified alipay.trade.query answer into the notification an
// asynchronous notification of the same trade status would have produced (same fields, same
// exact yuan-to-fen conversion, so both paths share one idempotency key):
//
//	TRADE_SUCCESS, TRADE_FINISHED   payment, StatusSucceeded
//	TRADE_CLOSED                    close, StatusSucceeded — unless send_pay_date shows it was
//	                                paid first (closed by a full refund): then the payment
//	WAIT_BUYER_PAY                  payment, StatusIgnored (nothing to apply yet)
//
// body is the answer's response object, digested for audit. Errors are *notify.Error values.
func (a *Adapter) TradeNotification(t QueriedTrade, body []byte) (notify.Notification, error) {
	if t.OutTradeNo == "" {
		return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "query answer without out_trade_no")
	}
	n := notify.Notification{
		Channel:       a.cfg.Channel,
		Provider:      ProviderName,
		MerchantID:    a.cfg.AppID,
		OutTradeNo:    t.OutTradeNo,
		ProviderTxnID: t.TradeNo,
		Currency:      "CNY",
		BodyDigest:    notify.Digest(body),
	}
	status := t.TradeStatus
	if status == TradeClosed && t.SendPayDate != "" {
		status = TradeSuccess
	}
	switch status {
	case TradeSuccess, TradeFinished:
		if t.TradeNo == "" {
			return notify.Notification{}, notify.Errorf(notify.ReasonMalformed, "paid trade without trade_no")
		}
		amount, err := yuan(map[string]string{"total_amount": t.TotalAmount}, "total_amount")
		if err != nil {
			return notify.Notification{}, err
		}
		n.Kind, n.Status, n.Amount = notify.KindPayment, notify.StatusSucceeded, amount
		n.OccurredAt = parseTime(t.SendPayDate)
	case TradeClosed:
		n.Kind, n.Status = notify.KindClose, notify.StatusSucceeded
	case TradeWaitBuyerPay:
		n.Kind, n.Status = notify.KindPayment, notify.StatusIgnored
	default:
		return notify.Notification{}, notify.Errorf(notify.ReasonUnsupported, "trade_status %q", truncate(status))
	}
	return n, nil
}
