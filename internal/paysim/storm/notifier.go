package storm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

// Trade is one paid order as the provider knows it: what its payment notification says.
type Trade struct {
	// OrderNo is the merchant's order number (out_trade_no).
	OrderNo string `json:"order_no"`
	// Amount is the paid amount in minor units (fen, cents).
	Amount int64 `json:"amount"`
	// Currency is the ISO 4217 code; WeChat Pay and Alipay channels pay in CNY.
	Currency string `json:"currency"`
	// TransactionID is the provider's transaction id (transaction_id, trade_no, pi_…).
	TransactionID string `json:"transaction_id"`
	// PaidAt is the payment time (success_time, gmt_payment).
	PaidAt time.Time `json:"paid_at"`
}

// NewTrades returns n trades with order numbers "<prefix>-<i>" (zero-padded), amounts of 1.00
// and up in minor units, and transaction ids derived from the order numbers.
func NewTrades(prefix string, n int, currency string, paidAt time.Time) []Trade {
	trades := make([]Trade, n)
	for i := range trades {
		no := fmt.Sprintf("%s-%06d", prefix, i)
		trades[i] = Trade{
			OrderNo:       no,
			Amount:        int64(100 + i%9900),
			Currency:      currency,
			TransactionID: "420000" + digest(no)[:22],
			PaidAt:        paidAt,
		}
	}
	return trades
}

// Notifier builds a provider's payment notifications for trades. Every call signs afresh (new
// timestamp, nonce and signature, as a provider's resend does) while the notification's own id
// stays the same for every resend of one trade, as WeChat Pay's id and Alipay's notify_id do.
type Notifier interface {
	// Provider is the provider whose wire format the notifications have.
	Provider() callbackdv1alpha1.Provider
	// Notification builds one signed delivery attempt of t's payment notification.
	Notification(t Trade) (paysim.Notification, error)
}

// NewNotifier returns the notifier of a key set's channel.
func NewNotifier(set *keyset.Set) (Notifier, error) {
	m := set.Manifest
	switch m.Provider {
	case callbackdv1alpha1.ProviderWeChatPay:
		return &wechatNotifier{set: set, signer: &paysim.WeChatPay{APIv3Key: set.APIv3Key, Serial: m.WeChatSerial, Key: set.PlatformKey}}, nil
	case callbackdv1alpha1.ProviderAlipay:
		return &alipayNotifier{set: set, signer: &paysim.Alipay{AppID: m.Merchant.MerchantID, Key: set.AlipayKey}}, nil
	case callbackdv1alpha1.ProviderStripe:
		return &stripeNotifier{set: set, signer: &paysim.Stripe{Secrets: []string{set.WebhookSecret}}}, nil
	case callbackdv1alpha1.ProviderStandardWebhooks:
		return &standardWebhooksNotifier{set: set, signer: &paysim.StandardWebhooks{Secrets: []string{set.WebhookSecret}}}, nil
	default:
		return nil, fmt.Errorf("storm: no notifier for provider %q", m.Provider)
	}
}

// digest is a stable hex digest of s, the source of ids that must not change between resends.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// stableUUID is a version-4-shaped UUID derived from s.
func stableUUID(s string) string {
	d := digest(s)
	return fmt.Sprintf("%s-%s-4%s-a%s-%s", d[0:8], d[8:12], d[13:16], d[17:20], d[20:32])
}

type wechatNotifier struct {
	set    *keyset.Set
	signer *paysim.WeChatPay
}

func (w *wechatNotifier) Provider() callbackdv1alpha1.Provider {
	return callbackdv1alpha1.ProviderWeChatPay
}

func (w *wechatNotifier) Notification(t Trade) (paysim.Notification, error) {
	m := w.set.Manifest.Merchant
	tx := paysim.WeChatTransaction{
		OutTradeNo:     t.OrderNo,
		TransactionID:  t.TransactionID,
		TradeType:      "JSAPI",
		TradeState:     "SUCCESS",
		TradeStateDesc: "支付成功",
		BankType:       "OTHERS",
		SuccessTime:    paysim.WeChatTime(t.PaidAt),
		Payer:          paysim.WeChatPayer{OpenID: "oUpF8u" + digest("openid" + t.OrderNo)[:22]},
		Amount:         paysim.WeChatAmount{Total: t.Amount, PayerTotal: t.Amount, Currency: t.Currency, PayerCurrency: t.Currency},
	}
	if m.SubMerchantID != "" {
		tx.SpMchID, tx.SubMchID, tx.SpAppID = m.MerchantID, m.SubMerchantID, m.AppID
	} else {
		tx.MchID, tx.AppID = m.MerchantID, m.AppID
	}
	n, err := w.signer.Payment(tx, paysim.WeChatOptions{ID: stableUUID("wechat" + t.TransactionID)})
	if err != nil {
		return paysim.Notification{}, fmt.Errorf("storm: wechatpay notification of %s: %w", t.OrderNo, err)
	}
	return n, nil
}

type alipayNotifier struct {
	set    *keyset.Set
	signer *paysim.Alipay
}

func (a *alipayNotifier) Provider() callbackdv1alpha1.Provider {
	return callbackdv1alpha1.ProviderAlipay
}

func (a *alipayNotifier) Notification(t Trade) (paysim.Notification, error) {
	yuan, err := Yuan(t.Amount)
	if err != nil {
		return paysim.Notification{}, fmt.Errorf("storm: alipay notification of %s: %w", t.OrderNo, err)
	}
	n, err := a.signer.Trade(paysim.AlipayTrade{
		OutTradeNo:    t.OrderNo,
		TradeNo:       t.TransactionID,
		TradeStatus:   paysim.AlipayTradeSuccess,
		TotalAmount:   yuan,
		ReceiptAmount: yuan,
		SellerID:      a.set.Manifest.Merchant.SellerID,
		BuyerID:       "2088" + digest("buyer" + t.OrderNo)[:12],
		Subject:       "paysim " + t.OrderNo,
		GmtPayment:    t.PaidAt,
		NotifyID:      digest("alipay" + t.TransactionID)[:34],
	}, paysim.AlipayOptions{})
	if err != nil {
		return paysim.Notification{}, fmt.Errorf("storm: alipay notification of %s: %w", t.OrderNo, err)
	}
	return n, nil
}

// Yuan renders minor units as Alipay's decimal yuan string ("0.01", "99.00"), exactly.
func Yuan(fen int64) (string, error) {
	if fen < 0 {
		return "", fmt.Errorf("negative amount %d", fen)
	}
	return fmt.Sprintf("%d.%02d", fen/100, fen%100), nil
}

type stripeNotifier struct {
	set    *keyset.Set
	signer *paysim.Stripe
}

func (s *stripeNotifier) Provider() callbackdv1alpha1.Provider {
	return callbackdv1alpha1.ProviderStripe
}

func (s *stripeNotifier) Notification(t Trade) (paysim.Notification, error) {
	body, err := json.Marshal(map[string]any{
		"id":      "evt_" + digest("stripe" + t.TransactionID)[:24],
		"object":  "event",
		"type":    "payment_intent.succeeded",
		"created": t.PaidAt.Unix(),
		"account": s.set.Manifest.Merchant.MerchantID,
		"data": map[string]any{"object": map[string]any{
			"id":       t.TransactionID,
			"object":   "payment_intent",
			"amount":   t.Amount,
			"currency": strings.ToLower(t.Currency),
			"status":   "succeeded",
			"metadata": map[string]string{"order_no": t.OrderNo},
		}},
	})
	if err != nil {
		return paysim.Notification{}, fmt.Errorf("storm: stripe event of %s: %w", t.OrderNo, err)
	}
	return s.signer.Event(body), nil
}

type standardWebhooksNotifier struct {
	set    *keyset.Set
	signer *paysim.StandardWebhooks
}

func (s *standardWebhooksNotifier) Provider() callbackdv1alpha1.Provider {
	return callbackdv1alpha1.ProviderStandardWebhooks
}

func (s *standardWebhooksNotifier) Notification(t Trade) (paysim.Notification, error) {
	id := "msg_" + digest("sw" + t.TransactionID)[:24]
	body, err := json.Marshal(map[string]any{
		"type":      "payment.succeeded",
		"timestamp": t.PaidAt.UTC().Format(time.RFC3339),
		"account":   s.set.Manifest.Merchant.MerchantID,
		"data": map[string]any{
			"id":       t.TransactionID,
			"order_no": t.OrderNo,
			"amount":   t.Amount,
			"currency": t.Currency,
		},
	})
	if err != nil {
		return paysim.Notification{}, fmt.Errorf("storm: standard webhooks event of %s: %w", t.OrderNo, err)
	}
	n, err := s.signer.Event(id, body)
	if err != nil {
		return paysim.Notification{}, fmt.Errorf("storm: standard webhooks event of %s: %w", t.OrderNo, err)
	}
	return n, nil
}
