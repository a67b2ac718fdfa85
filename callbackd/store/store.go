// Package store is callbackd's PostgreSQL storage: the source of truth of the exactly-once
// pipeline. It owns the schema (embedded, versioned, forward-only migrations), the connection
// pool with its per-session timeouts, the one transaction that applies a notification's effect
// (Apply), and the merchant API's orders, idempotency keys and submit tokens.
//
// Correctness never depends on anything outside PostgreSQL: a unique receipt per idempotency key,
// a row lock and a status-guarded update on the order, a unique ledger entry per effect and the
// outbox event are written in one transaction, so a notification's effect is committed exactly
// once whatever Redis or the in-process window say.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors callers branch on. They are returned wrapped; test with errors.Is.
var (
	// ErrNotFound: the order, token or key does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrOrderConflict: an order with this number exists with a different registration request.
	ErrOrderConflict = errors.New("store: order number already registered with a different request")
	// ErrIdempotencyKeyReused: the API idempotency key was first used with a different request.
	ErrIdempotencyKeyReused = errors.New("store: idempotency key already used with a different request")
	// ErrIdempotencyKeyInProgress: the first request with this key has not finished yet.
	ErrIdempotencyKeyInProgress = errors.New("store: a request with this idempotency key is still in progress")
	// ErrAlreadySubmitted: the submit token was already consumed.
	ErrAlreadySubmitted = errors.New("store: already submitted")
	// ErrInvalidInput: an argument violates the data model (empty order number, non-positive
	// amount, malformed currency); the wrapping error names the field.
	ErrInvalidInput = errors.New("store: invalid input")
	// ErrRefundBeforePayment: a refund notification arrived for an order whose payment has not
	// been applied yet (notifications arrive out of order). Nothing was written; the caller
	// answers the provider's retryable failure so that the refund is applied after the payment.
	ErrRefundBeforePayment = errors.New("store: refund notified before the payment was applied")
)

// Default session timeouts, used when Options leaves a field zero. The caller normally derives
// them from the Redis lock TTL: every database wait must end before the claim expires, or a
// second replica could start on the same key while the first is still blocked.
const (
	DefaultMaxConns         = 16
	DefaultLockTimeout      = 2 * time.Second
	DefaultStatementTimeout = 4 * time.Second
	DefaultIdleInTxTimeout  = 4 * time.Second
)

// Options tunes the connection pool. Zero fields take the defaults above.
type Options struct {
	// MaxConns bounds the pool. Keep it at or above the pipeline's in-flight limit so that a
	// storm queues in the limiter, not on the pool.
	MaxConns int32
	// LockTimeout is PostgreSQL's lock_timeout: the longest wait for a row or table lock.
	LockTimeout time.Duration
	// StatementTimeout is PostgreSQL's statement_timeout.
	StatementTimeout time.Duration
	// IdleInTxTimeout is PostgreSQL's idle_in_transaction_session_timeout: a client that stalls
	// inside a transaction loses it (and its row locks) instead of blocking everybody.
	IdleInTxTimeout time.Duration
	// Logger receives the store's rare operational messages (retried transactions). Nil
	// discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	if o.IdleInTxTimeout <= 0 {
		o.IdleInTxTimeout = DefaultIdleInTxTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Store is callbackd's PostgreSQL storage. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// hooks lets this package's tests weaken Apply (negative controls); always zero otherwise.
	hooks testHooks
}

// testHooks are test-only switches. Production code never sets them.
type testHooks struct {
	// skipRowLock reads the order without FOR UPDATE.
	skipRowLock bool
	// unguardedUpdate drops the status condition from the state transitions.
	unguardedUpdate bool
	// afterOrderRead runs between reading the order and updating it.
	afterOrderRead func()
}

// Open creates the connection pool. It does not wait for the database: connections are made on
// demand, so a daemon can start (and report not ready) while PostgreSQL is still unreachable;
// use Ping to check. The DSN is never included in errors.
//
// Every session runs with synchronous_commit=on (whatever the server default): an effect is
// acknowledged to the provider only after it is durable.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	o = o.withDefaults()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", dsnError(err))
	}
	cfg.MaxConns = o.MaxConns
	params := cfg.ConnConfig.RuntimeParams
	params["lock_timeout"] = millis(o.LockTimeout)
	params["statement_timeout"] = millis(o.StatementTimeout)
	params["idle_in_transaction_session_timeout"] = millis(o.IdleInTxTimeout)
	params["synchronous_commit"] = "on"
	if faultInjectAsyncCommit {
		params["synchronous_commit"] = "off" // faultinject builds only: a negative control
	}
	if params["application_name"] == "" {
		params["application_name"] = "callbackd"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	return &Store{pool: pool, logger: o.Logger, hooks: faultInjectHooks}, nil
}

// dsnError strips the connection string from a parse error (pgx redacts passwords only on a best
// effort basis) and keeps the reason.
func dsnError(err error) error {
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		if inner := pce.Unwrap(); inner != nil {
			return fmt.Errorf("invalid DSN: %w", inner)
		}
		return errors.New("invalid DSN")
	}
	return fmt.Errorf("invalid DSN: %w", err)
}

func millis(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10)
}

// Close closes every connection of the pool, waiting for acquired ones to be released.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that a connection can be acquired and used.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Pool exposes the pool for components that share it (the outbox dispatcher, reports).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
