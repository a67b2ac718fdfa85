package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// OrderStatus is the state of a payment order.
type OrderStatus string

// The order states. Transitions only go forward: PENDING → PAID → PARTIALLY_REFUNDED →
// REFUNDED, and PENDING → CLOSED.
const (
	StatusPending           OrderStatus = "PENDING"
	StatusPaid              OrderStatus = "PAID"
	StatusPartiallyRefunded OrderStatus = "PARTIALLY_REFUNDED"
	StatusRefunded          OrderStatus = "REFUNDED"
	StatusClosed            OrderStatus = "CLOSED"
)

// OrderStatuses lists every state, in lifecycle order.
var OrderStatuses = []OrderStatus{StatusPending, StatusPaid, StatusPartiallyRefunded, StatusRefunded, StatusClosed}

// NewOrder is a merchant's registration of a payment order, made before the user pays.
type NewOrder struct {
	// OrderNo is the merchant's order number (the providers' out_trade_no).
	OrderNo string
	// Channel is the configured channel the order will be paid through.
	Channel string
	// MerchantID and SubMerchantID are the provider-side merchant identity notifications must carry.
	MerchantID    string
	SubMerchantID string
	// Amount is the total in minor units; it must be positive.
	Amount int64
	// Currency is the ISO 4217 code, upper case.
	Currency string
	// ExpiresAt is when the order stops accepting payment; nil for no deadline. It is stored
	// with microsecond precision.
	ExpiresAt *time.Time
	// SubmitToken, when set, is consumed in the same transaction that registers the order: the
	// order exists if and only if the token was consumed by it. It is not part of the request
	// digest.
	SubmitToken string
}

// Order is a payment order with its current state.
type Order struct {
	OrderNo        string
	Channel        string
	MerchantID     string
	SubMerchantID  string
	Amount         int64
	Currency       string
	Status         OrderStatus
	RefundedAmount int64
	// ProviderTxnID is the provider's transaction id of the payment, "" until paid.
	ProviderTxnID string
	PaidAt        *time.Time
	ClosedAt      *time.Time
	ExpiresAt     *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// LedgerEntry is one money movement of an order.
type LedgerEntry struct {
	ID int64
	// Type is "payment" or "refund".
	Type string
	// RefundNo is the merchant's refund number, "" for the payment.
	RefundNo         string
	Amount           int64
	Currency         string
	ProviderTxnID    string
	ProviderRefundID string
	CreatedAt        time.Time
}

// OrderDetails is an order with its ledger, oldest entry first.
type OrderDetails struct {
	Order
	Ledger []LedgerEntry
}

var currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)

func (o NewOrder) validate() error {
	switch {
	case o.OrderNo == "":
		return fmt.Errorf("%w: order_no is empty", ErrInvalidInput)
	case o.Channel == "":
		return fmt.Errorf("%w: channel is empty", ErrInvalidInput)
	case o.MerchantID == "":
		return fmt.Errorf("%w: merchant_id is empty", ErrInvalidInput)
	case o.Amount <= 0:
		return fmt.Errorf("%w: amount must be a positive number of minor units", ErrInvalidInput)
	case !currencyPattern.MatchString(o.Currency):
		return fmt.Errorf("%w: currency must be an upper-case ISO 4217 code", ErrInvalidInput)
	}
	for name, v := range map[string]string{"order_no": o.OrderNo, "channel": o.Channel,
		"merchant_id": o.MerchantID, "sub_merchant_id": o.SubMerchantID, "submit_token": o.SubmitToken} {
		if !storableText(v) {
			return fmt.Errorf("%w: %s is not valid UTF-8 text", ErrInvalidInput, name)
		}
	}
	return nil
}

// normalized rounds ExpiresAt to what PostgreSQL stores, so that the digest of a request equals
// the digest of the same request sent again.
func (o NewOrder) normalized() NewOrder {
	if o.ExpiresAt != nil {
		t := o.ExpiresAt.UTC().Truncate(time.Microsecond)
		o.ExpiresAt = &t
	}
	return o
}

// digest identifies the registration request: every field that defines the order.
func (o NewOrder) digest() string {
	h := sha256.New()
	expires := ""
	if o.ExpiresAt != nil {
		expires = o.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	for _, p := range []string{"order/v1", o.OrderNo, o.Channel, o.MerchantID, o.SubMerchantID,
		strconv.FormatInt(o.Amount, 10), o.Currency, expires} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

const orderColumns = `order_no, channel, merchant_id, sub_merchant_id, amount, currency, status,
    refunded_amount, provider_txn_id, paid_at, closed_at, expires_at, created_at, updated_at`

func scanOrder(row pgx.Row, digest *string) (Order, error) {
	var o Order
	dest := []any{&o.OrderNo, &o.Channel, &o.MerchantID, &o.SubMerchantID, &o.Amount, &o.Currency,
		&o.Status, &o.RefundedAmount, &o.ProviderTxnID, &o.PaidAt, &o.ClosedAt, &o.ExpiresAt,
		&o.CreatedAt, &o.UpdatedAt}
	if digest != nil {
		dest = append(dest, digest)
	}
	err := row.Scan(dest...)
	return o, err
}

// CreateOrder registers an order. The same request again returns the existing order with
// created=false; a different request for an existing order number returns ErrOrderConflict.
// With a SubmitToken, the token is consumed atomically with the registration (ErrNotFound for
// an unknown token, ErrAlreadySubmitted for a used one; nothing is registered then).
func (s *Store) CreateOrder(ctx context.Context, in NewOrder) (order Order, created bool, err error) {
	if err := in.validate(); err != nil {
		return Order{}, false, fmt.Errorf("store: create order: %w", err)
	}
	in = in.normalized()
	digest := in.digest()

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Order{}, false, fmt.Errorf("store: create order: begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	if in.SubmitToken != "" {
		if err := consumeSubmitToken(ctx, tx, in.SubmitToken, in.OrderNo); err != nil {
			return Order{}, false, fmt.Errorf("store: create order: %w", err)
		}
	}
	order, err = scanOrder(tx.QueryRow(ctx, `
INSERT INTO payment_orders (order_no, channel, merchant_id, sub_merchant_id, amount, currency,
    expires_at, request_digest)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (order_no) DO NOTHING
RETURNING `+orderColumns,
		in.OrderNo, in.Channel, in.MerchantID, in.SubMerchantID, in.Amount, in.Currency, in.ExpiresAt, digest), nil)
	switch {
	case err == nil:
		created = true
	case errors.Is(err, pgx.ErrNoRows):
		var existing string
		order, err = scanOrder(tx.QueryRow(ctx,
			`SELECT `+orderColumns+`, request_digest FROM payment_orders WHERE order_no = $1`, in.OrderNo), &existing)
		if err != nil {
			return Order{}, false, fmt.Errorf("store: create order: read existing: %w", err)
		}
		if existing != digest {
			return Order{}, false, fmt.Errorf("store: create order %q: %w", in.OrderNo, ErrOrderConflict)
		}
	default:
		return Order{}, false, fmt.Errorf("store: create order: insert: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Order{}, false, fmt.Errorf("store: create order: commit: %w", err)
	}
	return order, created, nil
}

// GetOrder returns the order and its ledger entries, or ErrNotFound.
func (s *Store) GetOrder(ctx context.Context, orderNo string) (OrderDetails, error) {
	// One snapshot for the order and its ledger, so they never disagree.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return OrderDetails{}, fmt.Errorf("store: get order: begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	order, err := scanOrder(tx.QueryRow(ctx,
		`SELECT `+orderColumns+` FROM payment_orders WHERE order_no = $1`, orderNo), nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return OrderDetails{}, fmt.Errorf("store: get order: %w", ErrNotFound)
	}
	if err != nil {
		return OrderDetails{}, fmt.Errorf("store: get order: %w", err)
	}
	rows, err := tx.Query(ctx, `
SELECT id, entry_type, refund_no, amount, currency, provider_txn_id, provider_refund_id, created_at
FROM ledger_entries WHERE order_no = $1 ORDER BY id`, orderNo)
	if err != nil {
		return OrderDetails{}, fmt.Errorf("store: get order: ledger: %w", err)
	}
	ledger, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerEntry, error) {
		var e LedgerEntry
		err := r.Scan(&e.ID, &e.Type, &e.RefundNo, &e.Amount, &e.Currency, &e.ProviderTxnID,
			&e.ProviderRefundID, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return OrderDetails{}, fmt.Errorf("store: get order: ledger: %w", err)
	}
	return OrderDetails{Order: order, Ledger: ledger}, nil
}
