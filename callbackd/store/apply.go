package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
)

// Outcome is what Apply did with a notification. It is a closed set, usable as a metric label.
type Outcome string

// The outcomes of Apply.
const (
	// Applied: this call committed the effect (order transition, ledger entry, outbox event).
	Applied Outcome = "applied"
	// Duplicate: a receipt for the idempotency key already existed, so the effect was committed
	// earlier. Nothing was written; answer success.
	Duplicate Outcome = "duplicate"
	// UnknownOrder: no order with this number. Nothing was written, not even a receipt.
	UnknownOrder Outcome = "unknown_order"
	// AmountMismatch: the notified amount is not the order's. Nothing was written.
	AmountMismatch Outcome = "amount_mismatch"
	// MerchantMismatch: channel, merchant or sub-merchant differ from the order's. Nothing was
	// written.
	MerchantMismatch Outcome = "merchant_mismatch"
	// CurrencyMismatch: the notified currency is not the order's. Nothing was written.
	CurrencyMismatch Outcome = "currency_mismatch"
	// Exception: a real payment event that cannot be applied to the order (a second, different
	// payment; a payment of a closed order; a refund beyond the paid amount). It is recorded in
	// payment_exceptions with an outbox event and a receipt; answer success so the provider
	// stops, a person decides.
	Exception Outcome = "exception"
	// Ignored: a StatusIgnored notification. Nothing was written.
	Ignored Outcome = "ignored"
	// NoChange: the notification is valid but asks for nothing more (the close of a paid order,
	// a failed refund, a payment already applied under an expired receipt). Its receipt is
	// written; answer success.
	NoChange Outcome = "no_change"
)

// Acknowledge reports whether the provider must be told success: the notification is durably
// handled (now or before). The other outcomes are permanent failures.
func (o Outcome) Acknowledge() bool {
	switch o {
	case Applied, Duplicate, Exception, Ignored, NoChange:
		return true
	default:
		return false
	}
}

// ExceptionKind classifies a payment exception.
type ExceptionKind string

// The exception kinds.
const (
	// ExceptionDuplicatePayment: a second successful payment, with a different provider
	// transaction id, of an order that is already paid. The customer paid twice.
	ExceptionDuplicatePayment ExceptionKind = "duplicate_payment"
	// ExceptionPaymentOnClosedOrder: a successful payment of an order that was closed.
	ExceptionPaymentOnClosedOrder ExceptionKind = "payment_on_closed_order"
	// ExceptionRefundExceedsPaid: a refund that would take the refunded total over the paid amount.
	ExceptionRefundExceedsPaid ExceptionKind = "refund_exceeds_paid"
	// ExceptionRefundOnClosedOrder: a refund of an order that was closed unpaid (usually the
	// remedy of an earlier payment_on_closed_order).
	ExceptionRefundOnClosedOrder ExceptionKind = "refund_on_closed_order"
)

// Outbox event types written by Apply.
const (
	EventPaymentSucceeded = "payment.succeeded"
	EventRefundSucceeded  = "refund.succeeded"
	EventOrderClosed      = "order.closed"
	EventPaymentException = "payment.exception"
)

// Result describes what Apply did.
type Result struct {
	// Outcome is what happened.
	Outcome Outcome
	// OrderStatus is the order's status after the call ("" when the order is unknown).
	OrderStatus string
	// EventID is the stable id of the outbox event this notification produced (Applied,
	// Exception, and a Duplicate of an applied notification), "" otherwise.
	EventID string
	// Detail is a short, secret-free explanation for logs (mismatches, exceptions, no change).
	Detail string
	// Exception is the exception kind for Outcome Exception.
	Exception ExceptionKind
}

// maxApplyAttempts bounds the retries of a transaction that lost a serialization race.
const maxApplyAttempts = 5

// errLostRace: the guarded update found the order in another state than the locked read did.
// It cannot happen while the row lock is held; it is retried like a serialization failure.
var errLostRace = errors.New("order changed concurrently")

// Apply applies the effect of one verified notification exactly once, in one transaction:
// receipt insert (a conflict means Duplicate), order row lock, identity, currency and amount
// checks (a mismatch rolls everything back, receipt included, so a later correct notification
// still works), the status-guarded state transition, the ledger entry and the outbox event.
//
// Serialization failures and deadlocks are retried a bounded number of times. Any other error
// (cancelled context, lost connection, timeout, ErrRefundBeforePayment) is returned after the
// transaction was rolled back: nothing is half-written, and the caller answers the provider's
// retryable failure.
func (s *Store) Apply(ctx context.Context, n notify.Notification) (Result, error) {
	if n.Status == notify.StatusIgnored {
		return Result{Outcome: Ignored, Detail: "notification asks for no effect"}, nil
	}
	if res, err := precheck(n); err != nil || res.Outcome != "" {
		return res, err
	}
	for attempt := 1; ; attempt++ {
		res, err := s.applyOnce(ctx, n)
		if err == nil {
			return res, nil
		}
		if !retryable(err) || attempt == maxApplyAttempts || ctx.Err() != nil {
			return Result{}, fmt.Errorf("store: apply: %w", err)
		}
		s.logger.WarnContext(ctx, "retrying apply transaction",
			slog.String("channel", n.Channel), slog.String("kind", string(n.Kind)),
			slog.Int("attempt", attempt), slog.String("error", err.Error()))
		backoff := time.Duration(attempt)*5*time.Millisecond + rand.N(10*time.Millisecond)
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("store: apply: %w", ctx.Err())
		case <-time.After(backoff):
		}
	}
}

// precheck refuses notifications that no order can match, before touching the database.
func precheck(n notify.Notification) (Result, error) {
	switch n.Kind {
	case notify.KindPayment, notify.KindClose:
	case notify.KindRefund:
		if n.OutRefundNo == "" {
			return Result{}, fmt.Errorf("store: apply: %w: refund without out_refund_no", ErrInvalidInput)
		}
	default:
		return Result{}, fmt.Errorf("store: apply: %w: unknown kind %q", ErrInvalidInput, n.Kind)
	}
	switch n.Status {
	case notify.StatusSucceeded, notify.StatusFailed:
	default:
		return Result{}, fmt.Errorf("store: apply: %w: unknown status %q", ErrInvalidInput, n.Status)
	}
	// PostgreSQL text holds neither NUL bytes nor invalid UTF-8: such input would fail on every
	// retry, so it is refused as invalid instead.
	for name, v := range map[string]string{"channel": n.Channel, "provider": n.Provider, "merchant_id": n.MerchantID,
		"sub_merchant_id": n.SubMerchantID, "out_trade_no": n.OutTradeNo, "out_refund_no": n.OutRefundNo,
		"currency": n.Currency, "provider_txn_id": n.ProviderTxnID, "provider_refund_id": n.ProviderRefundID,
		"notify_id": n.NotifyID, "body_digest": n.BodyDigest} {
		if !storableText(v) {
			return Result{}, fmt.Errorf("store: apply: %w: %s is not valid UTF-8 text", ErrInvalidInput, name)
		}
	}
	if n.OutTradeNo == "" {
		return Result{Outcome: UnknownOrder, Detail: "notification has no order number"}, nil
	}
	if n.Amount < 0 {
		return Result{Outcome: AmountMismatch, Detail: "notified amount is negative"}, nil
	}
	return Result{}, nil
}

// storableText reports whether PostgreSQL can store s in a text column.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func retryable(err error) bool {
	if errors.Is(err, errLostRace) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return true
		}
	}
	return false
}

// receiptKey is the key the notification's receipt is stored under. A notification that reports
// a failure (a refund that did not go through) is recorded under its own key, so that it never
// shadows a later success of the same event.
func receiptKey(n notify.Notification) string {
	key := n.IdempotencyKey()
	if n.Status != notify.StatusSucceeded {
		key += "|" + strings.ToLower(string(n.Status))
	}
	return key
}

// EventID derives the stable outbox event id of an effect from its idempotency key (and, for
// exceptions, the provider transaction): the same notification always yields the same id, which
// merchants use to deduplicate deliveries.
func EventID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "evt_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// orderRow is the part of payment_orders that Apply decides on.
type orderRow struct {
	channel, merchantID, subMerchantID string
	amount, refunded                   int64
	currency, providerTxnID            string
	status                             OrderStatus
	// refundRecorded: for a refund, the ledger already holds this refund number.
	refundRecorded bool
}

const (
	insertReceiptSQL = `
INSERT INTO callback_receipts (idempotency_key, channel, provider, merchant_id, sub_merchant_id,
    order_no, kind, out_refund_no, status, amount, currency, provider_txn_id, notify_id,
    body_digest, outcome, occurred_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'applied', $15)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id`
	selectOrderForUpdateSQL = `
SELECT channel, merchant_id, sub_merchant_id, amount, refunded_amount, currency, status, provider_txn_id
FROM payment_orders WHERE order_no = $1 FOR UPDATE`
	selectOrderNoLockSQL = `
SELECT channel, merchant_id, sub_merchant_id, amount, refunded_amount, currency, status, provider_txn_id
FROM payment_orders WHERE order_no = $1`
)

// applyOnce runs the transaction once. The deferred rollback uses a context of its own, so a
// cancelled request still ends its transaction on the server at once.
func (s *Store) applyOnce(ctx context.Context, n notify.Notification) (res Result, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // a no-op after Commit
	}()

	key := n.IdempotencyKey()
	var occurred *time.Time
	if !n.OccurredAt.IsZero() {
		t := n.OccurredAt.UTC()
		occurred = &t
	}

	// 1. The receipt. A conflict means the effect was committed by someone else, except for a
	// second payment with a different provider transaction id under the same key: that one
	// continues to the exception path and is never swallowed.
	var receiptID int64
	receiptWritten := true
	err = tx.QueryRow(ctx, insertReceiptSQL, receiptKey(n), n.Channel, n.Provider, n.MerchantID,
		n.SubMerchantID, n.OutTradeNo, string(n.Kind), n.OutRefundNo, string(n.Status), n.Amount,
		n.Currency, n.ProviderTxnID, n.NotifyID, n.BodyDigest, occurred).Scan(&receiptID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		receiptWritten = false
		var prevTxn, prevOutcome, status string
		if err := tx.QueryRow(ctx, `
SELECT r.provider_txn_id, r.outcome, COALESCE(o.status, '')
FROM callback_receipts r LEFT JOIN payment_orders o ON o.order_no = $2
WHERE r.idempotency_key = $1`, receiptKey(n), n.OutTradeNo).Scan(&prevTxn, &prevOutcome, &status); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				// The conflicting receipt was purged by retention between the insert and this
				// read: run the transaction again, which then inserts a fresh receipt.
				return Result{}, errLostRace
			}
			return Result{}, fmt.Errorf("read existing receipt: %w", err)
		}
		differentPayment := n.Kind == notify.KindPayment && n.Status == notify.StatusSucceeded &&
			n.ProviderTxnID != "" && prevTxn != "" && n.ProviderTxnID != prevTxn
		if !differentPayment {
			res := Result{Outcome: Duplicate, OrderStatus: status, Detail: "receipt already committed"}
			if prevOutcome == string(Applied) {
				res.EventID = EventID(key)
			}
			return res, nil // rolled back: nothing was written
		}
	case err != nil:
		return Result{}, fmt.Errorf("insert receipt: %w", err)
	}

	// 2. The order, locked until commit.
	lockSQL := selectOrderForUpdateSQL
	if s.hooks.skipRowLock {
		lockSQL = selectOrderNoLockSQL
	}
	var o orderRow
	err = tx.QueryRow(ctx, lockSQL, n.OutTradeNo).Scan(&o.channel, &o.merchantID, &o.subMerchantID,
		&o.amount, &o.refunded, &o.currency, &o.status, &o.providerTxnID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{Outcome: UnknownOrder, Detail: "no order with this number"}, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("lock order: %w", err)
	}
	if s.hooks.afterOrderRead != nil {
		s.hooks.afterOrderRead()
	}

	// 3. Identity, currency, amount. A mismatch returns before Commit: nothing is written.
	if res, mismatch := checkIdentity(n, o); mismatch {
		return res, nil
	}

	if n.Kind == notify.KindRefund && n.Status == notify.StatusSucceeded {
		// Under the row lock, so no concurrent refund can slip in between.
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ledger_entries
WHERE order_no = $1 AND entry_type = 'refund' AND refund_no = $2)`, n.OutTradeNo, n.OutRefundNo).Scan(&o.refundRecorded)
		if err != nil {
			return Result{}, fmt.Errorf("read refund ledger: %w", err)
		}
	}

	// 4. The decision.
	d := decide(n, o)
	if d.err != nil {
		return Result{OrderStatus: string(o.status)}, d.err
	}
	// 5. The writes, sent in one round trip (a pgx pipeline inside the transaction): the row
	// lock is held for as short a time as possible. The first statement's result decides; the
	// rest run (or fail) inside the transaction, which is rolled back unless every one succeeded.
	var writes []statement
	switch d.outcome {
	case Applied:
		res = Result{Outcome: Applied, OrderStatus: string(d.newStatus), EventID: EventID(key), Detail: d.detail}
		writes = append(writes, s.transitionStatement(n))
		if n.Kind != notify.KindClose { // a close moves no money: no ledger entry
			writes = append(writes, ledgerStatement(n, o))
		}
	case Exception:
		res = Result{Outcome: Exception, OrderStatus: string(o.status), Detail: d.detail, Exception: d.exception,
			EventID: EventID(key, "exception", n.ProviderTxnID)}
		writes = append(writes, statement{what: "insert exception", sql: `
INSERT INTO payment_exceptions (kind, order_no, idempotency_key, provider_txn_id, amount, currency, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (order_no, idempotency_key, provider_txn_id) DO NOTHING`,
			args: []any{string(d.exception), n.OutTradeNo, key, n.ProviderTxnID, n.Amount, effectiveCurrency(n, o), d.detail}})
	case NoChange:
		res = Result{Outcome: NoChange, OrderStatus: string(o.status), Detail: d.detail}
	default:
		return Result{}, fmt.Errorf("internal: undecided outcome %q", d.outcome)
	}
	if res.EventID != "" {
		eventType, status := d.eventType, d.newStatus
		if res.Outcome == Exception {
			eventType, status = EventPaymentException, o.status
		}
		w, err := outboxStatement(res.EventID, eventType, n, o, status, d.exception)
		if err != nil {
			return Result{}, err
		}
		writes = append(writes, w)
	}
	if receiptWritten && res.Outcome != Applied {
		writes = append(writes, statement{what: "record receipt outcome",
			sql: `UPDATE callback_receipts SET outcome = $2 WHERE id = $1`, args: []any{receiptID, string(res.Outcome)}})
	}
	first, err := execPipeline(ctx, tx, writes)
	if err != nil {
		return Result{}, err
	}
	switch {
	case res.Outcome == Applied && first.RowsAffected() != 1:
		// The guard matched nothing: the order changed since it was read.
		return Result{}, errLostRace
	case res.Outcome == Exception && first.RowsAffected() == 0:
		// Only reachable without a fresh receipt: this exception was recorded before.
		return Result{Outcome: Duplicate, OrderStatus: string(o.status), Detail: "exception already recorded",
			EventID: res.EventID}, nil
	}

	// 6. Commit. Only now may the provider be told success.
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("commit: %w", err)
	}
	return res, nil
}

// checkIdentity compares the notification with the order it names.
func checkIdentity(n notify.Notification, o orderRow) (Result, bool) {
	switch {
	case n.Channel != o.channel:
		return Result{Outcome: MerchantMismatch, OrderStatus: string(o.status),
			Detail: "order belongs to another channel"}, true
	case n.MerchantID != o.merchantID || n.SubMerchantID != o.subMerchantID:
		return Result{Outcome: MerchantMismatch, OrderStatus: string(o.status),
			Detail: "merchant identity differs from the order's"}, true
	}
	if n.Status != notify.StatusSucceeded || n.Kind == notify.KindClose {
		return Result{}, false
	}
	// An empty currency is the provider's implicit one (WeChat Pay, Alipay) and is not compared.
	if n.Currency != "" && !strings.EqualFold(n.Currency, o.currency) {
		return Result{Outcome: CurrencyMismatch, OrderStatus: string(o.status),
			Detail: fmt.Sprintf("notified currency %q, order currency %q", strings.ToUpper(n.Currency), o.currency)}, true
	}
	switch n.Kind {
	case notify.KindPayment:
		if n.Amount != o.amount {
			return Result{Outcome: AmountMismatch, OrderStatus: string(o.status),
				Detail: fmt.Sprintf("notified amount %d, order amount %d", n.Amount, o.amount)}, true
		}
	case notify.KindRefund:
		if n.Amount <= 0 {
			return Result{Outcome: AmountMismatch, OrderStatus: string(o.status),
				Detail: fmt.Sprintf("notified refund amount %d is not positive", n.Amount)}, true
		}
	}
	return Result{}, false
}

func effectiveCurrency(n notify.Notification, o orderRow) string {
	if n.Currency != "" {
		return strings.ToUpper(n.Currency)
	}
	return o.currency
}

// decision is what the state machine says about a notification for an order in a given state.
type decision struct {
	outcome   Outcome
	newStatus OrderStatus
	eventType string
	exception ExceptionKind
	detail    string
	// err ends the transaction without writing (e.g. refund before payment).
	err error
}

// decide is the order state machine: PENDING → PAID → PARTIALLY_REFUNDED → REFUNDED, and
// PENDING → CLOSED; only forward.
func decide(n notify.Notification, o orderRow) decision {
	if n.Status == notify.StatusFailed {
		return decision{outcome: NoChange, detail: fmt.Sprintf("provider reports the %s failed", n.Kind)}
	}
	switch n.Kind {
	case notify.KindPayment:
		switch o.status {
		case StatusPending:
			return decision{outcome: Applied, newStatus: StatusPaid, eventType: EventPaymentSucceeded}
		case StatusClosed:
			return decision{outcome: Exception, exception: ExceptionPaymentOnClosedOrder,
				detail: "successful payment of a closed order"}
		default: // PAID, PARTIALLY_REFUNDED, REFUNDED
			if n.ProviderTxnID == "" || n.ProviderTxnID == o.providerTxnID {
				return decision{outcome: NoChange, detail: "payment already applied"}
			}
			return decision{outcome: Exception, exception: ExceptionDuplicatePayment,
				detail: "second successful payment with a different provider transaction"}
		}
	case notify.KindClose:
		if o.status == StatusPending {
			return decision{outcome: Applied, newStatus: StatusClosed, eventType: EventOrderClosed}
		}
		return decision{outcome: NoChange, detail: fmt.Sprintf("close ignored: order is %s", o.status)}
	default: // refund
		switch o.status {
		case StatusPending:
			return decision{err: ErrRefundBeforePayment}
		case StatusClosed:
			return decision{outcome: Exception, exception: ExceptionRefundOnClosedOrder,
				detail: "refund of a closed order"}
		}
		if o.refundRecorded {
			return decision{outcome: NoChange, detail: "refund already applied"}
		}
		remaining := o.amount - o.refunded
		if n.Amount > remaining {
			return decision{outcome: Exception, exception: ExceptionRefundExceedsPaid,
				detail: fmt.Sprintf("refund %d exceeds the remaining refundable amount %d", n.Amount, remaining)}
		}
		newStatus := StatusPartiallyRefunded
		if n.Amount == remaining {
			newStatus = StatusRefunded
		}
		return decision{outcome: Applied, newStatus: newStatus, eventType: EventRefundSucceeded}
	}
}

// statement is one SQL statement of the write pipeline.
type statement struct {
	what string // the operation's name, for errors
	sql  string
	args []any
}

// execPipeline sends the statements in one batch and returns the first one's command tag. An
// error names the statement that failed; the caller's transaction is then rolled back.
func execPipeline(ctx context.Context, tx pgx.Tx, stmts []statement) (pgconn.CommandTag, error) {
	if len(stmts) == 0 {
		return pgconn.CommandTag{}, nil
	}
	batch := &pgx.Batch{}
	for _, st := range stmts {
		batch.Queue(st.sql, st.args...)
	}
	br := tx.SendBatch(ctx, batch)
	var first pgconn.CommandTag
	for i, st := range stmts {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return pgconn.CommandTag{}, fmt.Errorf("%s: %w", st.what, err)
		}
		if i == 0 {
			first = tag
		}
	}
	if err := br.Close(); err != nil {
		return pgconn.CommandTag{}, fmt.Errorf("write pipeline: %w", err)
	}
	return first, nil
}

// transitionStatement is the status-guarded update of an Applied decision. The caller checks
// that it affected exactly one row: a guard that matches nothing means the order changed under
// us, and the whole transaction is retried and decided again.
func (s *Store) transitionStatement(n notify.Notification) statement {
	var occurred *time.Time
	if !n.OccurredAt.IsZero() {
		t := n.OccurredAt.UTC()
		occurred = &t
	}
	guard := ` AND status = 'PENDING'`
	if s.hooks.unguardedUpdate {
		guard = ``
	}
	switch n.Kind {
	case notify.KindPayment:
		return statement{what: "mark order paid", sql: `UPDATE payment_orders
SET status = 'PAID', provider_txn_id = $2, paid_at = COALESCE($3, now()), updated_at = now()
WHERE order_no = $1` + guard, args: []any{n.OutTradeNo, n.ProviderTxnID, occurred}}
	case notify.KindClose:
		return statement{what: "mark order closed", sql: `UPDATE payment_orders
SET status = 'CLOSED', closed_at = COALESCE($2, now()), updated_at = now()
WHERE order_no = $1` + guard, args: []any{n.OutTradeNo, occurred}}
	default: // refund
		return statement{what: "record refund on order", sql: `UPDATE payment_orders
SET refunded_amount = refunded_amount + $2,
    status = CASE WHEN refunded_amount + $2 = amount THEN 'REFUNDED' ELSE 'PARTIALLY_REFUNDED' END,
    updated_at = now()
WHERE order_no = $1 AND status IN ('PAID', 'PARTIALLY_REFUNDED') AND refunded_amount + $2 <= amount`,
			args: []any{n.OutTradeNo, n.Amount}}
	}
}

// ledgerStatement records the money movement; the table's unique key (order, entry type,
// refund number) makes a second recording of one effect fail the transaction.
func ledgerStatement(n notify.Notification, o orderRow) statement {
	entryType, refundNo := "payment", ""
	if n.Kind == notify.KindRefund {
		entryType, refundNo = "refund", n.OutRefundNo
	}
	return statement{what: "insert ledger entry", sql: `
INSERT INTO ledger_entries (order_no, entry_type, refund_no, amount, currency, provider_txn_id,
    provider_refund_id, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		args: []any{n.OutTradeNo, entryType, refundNo, n.Amount, o.currency, n.ProviderTxnID,
			n.ProviderRefundID, n.IdempotencyKey()}}
}

// EventPayload is the JSON body of an outbox event, delivered to the merchant's systems.
type EventPayload struct {
	EventID          string        `json:"event_id"`
	Type             string        `json:"type"`
	Channel          string        `json:"channel"`
	MerchantID       string        `json:"merchant_id"`
	SubMerchantID    string        `json:"sub_merchant_id,omitempty"`
	OrderNo          string        `json:"order_no"`
	RefundNo         string        `json:"refund_no,omitempty"`
	Amount           int64         `json:"amount"`
	Currency         string        `json:"currency"`
	ProviderTxnID    string        `json:"provider_txn_id,omitempty"`
	ProviderRefundID string        `json:"provider_refund_id,omitempty"`
	OrderStatus      string        `json:"order_status"`
	Exception        ExceptionKind `json:"exception,omitempty"`
	OccurredAt       *time.Time    `json:"occurred_at,omitempty"`
}

// outboxStatement is the insert of the effect's outbox event. A conflict on the stable event id
// writes nothing (the event exists); it can only happen on a path that is rolled back anyway.
func outboxStatement(eventID, eventType string, n notify.Notification, o orderRow, status OrderStatus,
	exception ExceptionKind) (statement, error) {
	p := EventPayload{
		EventID:          eventID,
		Type:             eventType,
		Channel:          n.Channel,
		MerchantID:       n.MerchantID,
		SubMerchantID:    n.SubMerchantID,
		OrderNo:          n.OutTradeNo,
		RefundNo:         n.OutRefundNo,
		Amount:           n.Amount,
		Currency:         effectiveCurrency(n, o),
		ProviderTxnID:    n.ProviderTxnID,
		ProviderRefundID: n.ProviderRefundID,
		OrderStatus:      string(status),
		Exception:        exception,
	}
	if !n.OccurredAt.IsZero() {
		t := n.OccurredAt.UTC()
		p.OccurredAt = &t
	}
	body, err := json.Marshal(p)
	if err != nil {
		return statement{}, fmt.Errorf("encode outbox payload: %w", err)
	}
	return statement{what: "insert outbox event", sql: `
INSERT INTO outbox_events (event_id, channel, order_no, event_type, payload)
VALUES ($1, $2, $3, $4, $5::jsonb)
ON CONFLICT (event_id) DO NOTHING`, args: []any{eventID, n.Channel, n.OutTradeNo, eventType, string(body)}}, nil
}

// ReceiptCommitted reports whether a receipt for the idempotency key is committed, i.e. whether
// the notification's effect is durably handled. The pipeline asks when Redis says another
// request holds the key.
//
// For payments prefer NotificationCommitted: a second, different payment shares the key of the
// first one, and only NotificationCommitted tells them apart.
func (s *Store) ReceiptCommitted(ctx context.Context, key string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM callback_receipts WHERE idempotency_key = $1)`, key).Scan(&ok); err != nil {
		return false, fmt.Errorf("store: receipt committed: %w", err)
	}
	return ok, nil
}

// NotificationCommitted reports whether this very notification is durably handled: a receipt for
// its key with the same provider transaction, or the exception recorded for it.
func (s *Store) NotificationCommitted(ctx context.Context, n notify.Notification) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM callback_receipts
               WHERE idempotency_key = $1
                 AND ($5 <> 'payment' OR $2 = '' OR provider_txn_id = '' OR provider_txn_id = $2))
    OR EXISTS (SELECT 1 FROM payment_exceptions
               WHERE order_no = $3 AND idempotency_key = $4 AND provider_txn_id = $2)`,
		receiptKey(n), n.ProviderTxnID, n.OutTradeNo, n.IdempotencyKey(), string(n.Kind)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("store: notification committed: %w", err)
	}
	return ok, nil
}
