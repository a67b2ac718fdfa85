package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingQuery selects the orders of one channel that stayed PENDING: created before
// CreatedBefore (the provider should have called back by now), or whose ExpiresAt is before
// ExpiredBefore (they should be closed). A zero time disables its condition.
type PendingQuery struct {
	Channel       string
	CreatedBefore time.Time
	ExpiredBefore time.Time
	// Limit bounds the result (required, at most 10,000).
	Limit int
}

const maxPendingLimit = 10_000

func (q PendingQuery) args() ([]any, error) {
	if q.Channel == "" {
		return nil, fmt.Errorf("%w: channel is empty", ErrInvalidInput)
	}
	if q.CreatedBefore.IsZero() && q.ExpiredBefore.IsZero() {
		return nil, fmt.Errorf("%w: neither CreatedBefore nor ExpiredBefore is set", ErrInvalidInput)
	}
	var created, expired *time.Time
	if !q.CreatedBefore.IsZero() {
		created = &q.CreatedBefore
	}
	if !q.ExpiredBefore.IsZero() {
		expired = &q.ExpiredBefore
	}
	return []any{q.Channel, created, expired}, nil
}

const pendingWhere = `
WHERE status = 'PENDING' AND channel = $1
  AND ((($2::timestamptz) IS NOT NULL AND created_at < $2) OR (($3::timestamptz) IS NOT NULL AND expires_at < $3))`

// PendingOrders returns the orders the query selects, oldest first: the reconciler's work list.
func (s *Store) PendingOrders(ctx context.Context, q PendingQuery) ([]Order, error) {
	args, err := q.args()
	if err != nil {
		return nil, fmt.Errorf("store: pending orders: %w", err)
	}
	if q.Limit <= 0 || q.Limit > maxPendingLimit {
		return nil, fmt.Errorf("store: pending orders: %w: limit must be 1 to %d", ErrInvalidInput, maxPendingLimit)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+orderColumns+` FROM payment_orders`+pendingWhere+`
ORDER BY created_at, order_no LIMIT $4`, append(args, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: pending orders: %w", err)
	}
	orders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) { return scanOrder(r, nil) })
	if err != nil {
		return nil, fmt.Errorf("store: pending orders: %w", err)
	}
	return orders, nil
}

// CountPendingOrders counts the orders the query selects (Limit is ignored): the value of a
// stuck-orders gauge.
func (s *Store) CountPendingOrders(ctx context.Context, q PendingQuery) (int64, error) {
	args, err := q.args()
	if err != nil {
		return 0, fmt.Errorf("store: count pending orders: %w", err)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM payment_orders`+pendingWhere, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count pending orders: %w", err)
	}
	return n, nil
}
