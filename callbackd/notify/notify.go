// Package notify defines the provider-neutral contract between channel adapters (WeChat Pay,
// Alipay, Stripe-style and Standard Webhooks) and the exactly-once pipeline.
//
// An adapter turns the raw provider request into one Notification, or an error that says why the
// request must be refused; and it renders the pipeline's verdict in the provider's own dialect.
// The pipeline never looks at provider formats, and adapters never touch storage.
package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Kind discriminates the business events that one order can be notified about. It is part of the
// idempotency key, so a refund never collides with the payment of the same order.
type Kind string

// The event kinds.
const (
	// KindPayment is a payment reaching its successful end state.
	KindPayment Kind = "payment"
	// KindClose is an unpaid order closed by the provider (timeout, cancellation).
	KindClose Kind = "close"
	// KindRefund is a refund of (part of) a paid order, identified by its refund number.
	KindRefund Kind = "refund"
)

// Status is the outcome the provider reports for the event.
type Status string

// The statuses an adapter may report.
const (
	// StatusSucceeded means the payment or refund succeeded (or the order closed, for KindClose).
	StatusSucceeded Status = "SUCCEEDED"
	// StatusFailed means a refund failed for good (WeChat REFUND.ABNORMAL / REFUND.CLOSED).
	StatusFailed Status = "FAILED"
	// StatusIgnored is a valid, verified notification that asks for no effect (Alipay's
	// WAIT_BUYER_PAY, TRADE_FINISHED after TRADE_SUCCESS). It is acknowledged and nothing is
	// recorded, so it can never shadow a later notification with an effect.
	StatusIgnored Status = "IGNORED"
)

// Notification is one verified provider notification, normalized. Amounts are integers of minor
// units (fen, cents) and never floats.
type Notification struct {
	// Channel is the configured channel name the request arrived on (the {channel} path element).
	Channel string
	// Provider names the adapter that produced it (wechatpay, alipay, stripe, standardwebhooks).
	Provider string
	// MerchantID is the provider-side merchant identity: WeChat mchid, Alipay app_id, an account id.
	MerchantID string
	// SubMerchantID is the service-provider sub-merchant (WeChat sub_mchid), empty otherwise.
	SubMerchantID string
	// OutTradeNo is the merchant's order number, unique only within MerchantID (+SubMerchantID).
	OutTradeNo string
	// Kind is the event discriminator.
	Kind Kind
	// OutRefundNo is the merchant's refund number (Alipay out_biz_no); set only for KindRefund.
	OutRefundNo string
	// Status is what the provider says happened.
	Status Status
	// Amount is the amount of this event in minor units: the paid total for a payment, the
	// refunded amount for a refund, zero for a close.
	Amount int64
	// Currency is the ISO 4217 code, upper case; empty when the provider does not say (CNY then).
	Currency string
	// ProviderTxnID is the provider's transaction id (WeChat transaction_id, Alipay trade_no).
	ProviderTxnID string
	// ProviderRefundID is the provider's refund id, for refunds.
	ProviderRefundID string
	// NotifyID is the provider's id of this notification. It may change between retries, so it
	// is recorded for tracing only and never used for deduplication.
	NotifyID string
	// OccurredAt is when the provider says the event happened (success_time, gmt_payment).
	OccurredAt time.Time
	// BodyDigest is the hex SHA-256 of the raw request body, for audit.
	BodyDigest string
}

// keyEscaper escapes the key separator so that distinct tuples never produce the same key.
var keyEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`)

// IdempotencyKey is the stable deduplication key of the notification's business event:
// channel, merchant identity, order number and event kind (plus the refund number for refunds).
// It never includes the provider's notification id, which can change between retries.
func (n Notification) IdempotencyKey() string {
	var b strings.Builder
	b.Grow(len(n.Channel) + len(n.MerchantID) + len(n.SubMerchantID) + len(n.OutTradeNo) + len(n.OutRefundNo) + 16)
	for i, part := range []string{n.Channel, n.MerchantID, n.SubMerchantID, n.OutTradeNo, string(n.Kind), n.OutRefundNo} {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(keyEscaper.Replace(part))
	}
	return b.String()
}

// Digest returns the hex SHA-256 of a raw body, the form stored in Notification.BodyDigest.
func Digest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Verdict is what the pipeline decided about a request; the adapter renders it for the provider.
type Verdict int

// The verdicts.
const (
	// Success: the effect is durably committed (now or earlier). The provider must stop retrying.
	Success Verdict = iota
	// Retry: not done (yet); the provider must send the notification again.
	Retry
	// Reject: the request is invalid (forged, malformed, for an unknown order). It is answered
	// with the provider's failure form; providers resend anyway, which is harmless.
	Reject
)

// String names the verdict for logs and metric labels.
func (v Verdict) String() string {
	switch v {
	case Success:
		return "success"
	case Retry:
		return "retry"
	case Reject:
		return "reject"
	default:
		return fmt.Sprintf("verdict(%d)", int(v))
	}
}

// Adapter verifies and normalizes one provider's notifications and answers in its dialect.
// Implementations must be safe for concurrent use and must never log or return key material.
type Adapter interface {
	// Provider names the adapter (used in metrics and logs).
	Provider() string
	// Parse verifies the raw request body (exactly as received; the caller has already read it
	// under a size limit) and the request headers, and returns the normalized notification.
	// Errors are *Error values; Parse never panics on input.
	Parse(ctx context.Context, r *http.Request, body []byte) (Notification, error)
	// Respond writes the provider's answer for the verdict. message is a short, secret-free
	// reason that providers show in their consoles.
	Respond(w http.ResponseWriter, v Verdict, message string)
}

// Reason classifies why a request was refused; it is a metric label, so the set is closed.
type Reason string

// The refusal reasons.
const (
	ReasonBadSignature     Reason = "bad_signature"
	ReasonUnknownKey       Reason = "unknown_key"
	ReasonStaleTimestamp   Reason = "stale_timestamp"
	ReasonProbe            Reason = "signature_probe"
	ReasonDecrypt          Reason = "decrypt_failed"
	ReasonMalformed        Reason = "malformed"
	ReasonMerchantMismatch Reason = "merchant_mismatch"
	ReasonUnsupported      Reason = "unsupported_event"
	ReasonTooLarge         Reason = "body_too_large"
)

// Error is a refusal from an adapter: a closed Reason for metrics and a detail for logs. The
// detail must never contain key material or personal data.
type Error struct {
	Reason Reason
	Detail string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Reason, e.Detail, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Reason, e.Detail)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error.
func Errorf(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the refusal reason of err, or ReasonMalformed for an error that is not an *Error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonMalformed
}
