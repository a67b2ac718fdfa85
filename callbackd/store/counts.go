package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Counts is a snapshot of the table sizes, for tests, reports and the acceptance suite.
type Counts struct {
	// OrdersByStatus holds every status, zero included.
	OrdersByStatus map[OrderStatus]int64
	Orders         int64
	Receipts       int64
	LedgerEntries  int64
	// LedgerPayments and LedgerRefunds split LedgerEntries by entry type.
	LedgerPayments int64
	LedgerRefunds  int64
	OutboxEvents   int64
	Exceptions     int64
}

// Counts counts the rows of the payment tables in one consistent snapshot.
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	c := Counts{OrdersByStatus: make(map[OrderStatus]int64, len(OrderStatuses))}
	for _, st := range OrderStatuses {
		c.OrdersByStatus[st] = 0
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Counts{}, fmt.Errorf("store: counts: begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	rows, err := tx.Query(ctx, `SELECT status, count(*) FROM payment_orders GROUP BY status`)
	if err != nil {
		return Counts{}, fmt.Errorf("store: counts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			st OrderStatus
			n  int64
		)
		if err := rows.Scan(&st, &n); err != nil {
			return Counts{}, fmt.Errorf("store: counts: %w", err)
		}
		c.OrdersByStatus[st] = n
		c.Orders += n
	}
	if err := rows.Err(); err != nil {
		return Counts{}, fmt.Errorf("store: counts: %w", err)
	}
	err = tx.QueryRow(ctx, `
SELECT (SELECT count(*) FROM callback_receipts),
       (SELECT count(*) FROM ledger_entries WHERE entry_type = 'payment'),
       (SELECT count(*) FROM ledger_entries WHERE entry_type = 'refund'),
       (SELECT count(*) FROM outbox_events),
       (SELECT count(*) FROM payment_exceptions)`).Scan(
		&c.Receipts, &c.LedgerPayments, &c.LedgerRefunds, &c.OutboxEvents, &c.Exceptions)
	if err != nil {
		return Counts{}, fmt.Errorf("store: counts: %w", err)
	}
	c.LedgerEntries = c.LedgerPayments + c.LedgerRefunds
	return c, nil
}

// PurgeReceipts deletes callback receipts older than the channel's receipt retention and
// returns how many. The order state machine keeps a late duplicate harmless after that (a
// payment of a paid order with the same transaction is NoChange, a recorded refund number too).
func (s *Store) PurgeReceipts(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("store: purge receipts: %w: age must be positive", ErrInvalidInput)
	}
	tag, err := s.pool.Exec(ctx,
		`DELETE FROM callback_receipts WHERE created_at < now() - make_interval(secs => $1)`,
		olderThan.Seconds())
	if err != nil {
		return 0, fmt.Errorf("store: purge receipts: %w", err)
	}
	return tag.RowsAffected(), nil
}
