package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PaymentException is a real payment event that could not be applied to its order and waits
// for a person's decision (usually a refund): see ExceptionKind.
type PaymentException struct {
	ID             int64
	Kind           ExceptionKind
	OrderNo        string
	IdempotencyKey string
	ProviderTxnID  string
	Amount         int64
	Currency       string
	Detail         string
	CreatedAt      time.Time
	// ResolvedAt is when a person marked it handled; nil while open.
	ResolvedAt *time.Time
}

// Exceptions lists payment exceptions, newest first; with openOnly, only unresolved ones.
func (s *Store) Exceptions(ctx context.Context, openOnly bool, limit int) ([]PaymentException, error) {
	if limit <= 0 || limit > maxPendingLimit {
		return nil, fmt.Errorf("store: exceptions: %w: limit must be 1 to %d", ErrInvalidInput, maxPendingLimit)
	}
	rows, err := s.pool.Query(ctx, `
SELECT id, kind, order_no, idempotency_key, provider_txn_id, amount, currency, detail, created_at, resolved_at
FROM payment_exceptions
WHERE NOT $1 OR resolved_at IS NULL
ORDER BY created_at DESC, id DESC
LIMIT $2`, openOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("store: exceptions: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PaymentException, error) {
		var e PaymentException
		err := r.Scan(&e.ID, &e.Kind, &e.OrderNo, &e.IdempotencyKey, &e.ProviderTxnID, &e.Amount, &e.Currency,
			&e.Detail, &e.CreatedAt, &e.ResolvedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: exceptions: %w", err)
	}
	return list, nil
}

// ResolveException marks an exception handled. Resolving it again keeps the first resolution
// time; an unknown id is ErrNotFound.
func (s *Store) ResolveException(ctx context.Context, id int64) error {
	var resolved time.Time
	err := s.pool.QueryRow(ctx, `
UPDATE payment_exceptions SET resolved_at = COALESCE(resolved_at, now())
WHERE id = $1 RETURNING resolved_at`, id).Scan(&resolved)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("store: resolve exception %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: resolve exception %d: %w", id, err)
	}
	return nil
}
