// Package field holds minimal, honest implementations of the three callback-idempotency designs
// people use today, for the benchmark to run on exactly the same load as callbackd (issue 8):
//
//   - check-then-act: read the order's status without a lock; if PENDING, update it and write a
//     ledger entry in one transaction. No status guard on the update, no unique ledger entry.
//     Concurrent duplicates all read PENDING and all book: double effects.
//   - unique-index-only: insert a receipt keyed by the idempotency key (ON CONFLICT DO NOTHING)
//     in the same transaction as the update and the ledger entry. Correct, but every duplicate
//     reaches PostgreSQL and waits on the first attempt's row lock.
//   - redis-lock-only: the order's status is read (the "already paid?" fast path), then a Redis
//     lock is taken with SET NX EX 10 and the effect applied with no database guard, then the lock
//     is deleted. A duplicate that read PENDING before the first attempt committed and takes the
//     lock after it was released books a second time (the typical bug: the lock is treated as the
//     idempotency guarantee, so nothing is re-checked under it); one arriving while the lock is
//     held gets a 500 and is resent by the provider.
//
// Every design verifies the request with the same VerifyFunc (WeChatVerifier wraps callbackd's own
// WeChat Pay adapter), uses the provider transaction id as the idempotency key, and answers in
// WeChat Pay's dialect (204 on success; 400 or 500 with {"code":"FAIL","message":...}), so the only
// difference from callbackd is the idempotency design. They live here, in the benchmark, and never
// in the product.
//
// Each design keeps its tables in its own PostgreSQL schema (field_cta, field_unique, field_lock)
// and its Redis keys under its own prefix, so all three can share one database and one Redis.
package field

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The design names, as Design.Name reports them.
const (
	NameCheckThenAct    = "check-then-act"
	NameUniqueIndexOnly = "unique-index-only"
	NameRedisLockOnly   = "redis-lock-only"
)

// Order statuses stored by the designs.
const (
	StatusPending = "PENDING"
	StatusPaid    = "PAID"
)

// MaxBody bounds the notification body a design reads, as callbackd bounds it.
const MaxBody = 64 << 10

// VerifyFunc verifies one provider request (headers and the raw body as received) and returns the
// paid order's number, the provider transaction id (the idempotency key) and the amount in minor
// units. A request that is valid but asks for no effect returns an error wrapping ErrNoEffect.
type VerifyFunc func(r *http.Request, body []byte) (orderNo, transactionID string, amount int64, err error)

// ErrNoEffect marks a verified notification that books nothing (not a successful payment); the
// designs acknowledge it without touching the database.
var ErrNoEffect = errors.New("field: notification asks for no effect")

// Design is one idempotency design from the field, ready to run under the benchmark's load.
type Design struct {
	// Name is NameCheckThenAct, NameUniqueIndexOnly or NameRedisLockOnly.
	Name string
	// Setup creates the design's schema and tables; it is idempotent.
	Setup func(ctx context.Context) error
	// Handler receives POST requests whose body is the provider notification and answers like
	// WeChat Pay expects: 204 when booked (or already booked), 400 + FAIL JSON when the request is
	// refused, 500 + FAIL JSON when the provider should resend.
	Handler http.Handler
	// DoubleEffects returns the number of orders that received more than one ledger entry.
	DoubleEffects func(ctx context.Context) (int64, error)
	// Reset empties the design's tables (and its Redis keys) between scenarios.
	Reset func(ctx context.Context) error
	// Preload registers PENDING orders of the given amount in bulk (COPY). The orders must not
	// exist yet (Reset first).
	Preload func(ctx context.Context, orderNos []string, amount int64) error
}

// Designs returns the three designs on pool and rdb, each verifying requests with verify. Call
// each design's Setup before serving it. verify may be nil for designs used only to Setup, Reset,
// Preload and count; their handlers then answer every request with a 500.
func Designs(pool *pgxpool.Pool, rdb redis.UniversalClient, verify VerifyFunc) []Design {
	cta := &store{pool: pool, schema: "field_cta"}
	uniq := &store{pool: pool, schema: "field_unique", receipts: true}
	lock := &store{pool: pool, schema: "field_lock"}
	lockPrefix := "field:lock:"
	return []Design{
		cta.design(NameCheckThenAct, &handler{verify: verify, book: cta.checkThenAct}, nil),
		uniq.design(NameUniqueIndexOnly, &handler{verify: verify, book: uniq.uniqueIndexOnly}, nil),
		lock.design(NameRedisLockOnly, &handler{verify: verify, book: func(ctx context.Context, p payment) (int, string, error) {
			return lock.redisLockOnly(ctx, rdb, lockPrefix, p)
		}}, func(ctx context.Context) error { return deletePrefix(ctx, rdb, lockPrefix) }),
	}
}

// payment is what a verified notification asks for.
type payment struct {
	orderNo, txnID string
	amount         int64
}

// handler is the HTTP part shared by the designs: read, verify, book, answer in WeChat Pay's
// dialect.
type handler struct {
	verify VerifyFunc
	// book applies the payment and returns the HTTP status and, for a failure, a short message.
	book func(ctx context.Context, p payment) (int, string, error)
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		fail(w, http.StatusBadRequest, "unreadable body")
		return
	}
	if len(body) > MaxBody {
		fail(w, http.StatusRequestEntityTooLarge, "body too large")
		return
	}
	if h.verify == nil {
		// Designs built only to Setup, Reset or count (the benchmark runner does) serve nothing.
		fail(w, http.StatusInternalServerError, "no verifier configured")
		return
	}
	orderNo, txnID, amount, err := h.verify(r, body)
	switch {
	case errors.Is(err, ErrNoEffect):
		w.WriteHeader(http.StatusNoContent)
		return
	case err != nil:
		fail(w, http.StatusBadRequest, "verification failed")
		return
	case orderNo == "" || txnID == "":
		fail(w, http.StatusBadRequest, "notification without order number or transaction id")
		return
	}
	status, msg, err := h.book(r.Context(), payment{orderNo: orderNo, txnID: txnID, amount: amount})
	if err != nil {
		// The provider resends; the error itself (SQL, addresses) is not shown to it.
		fail(w, http.StatusInternalServerError, "temporarily unavailable")
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	fail(w, status, msg)
}

// fail writes WeChat Pay's failure form.
func fail(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{"FAIL", message})
}

// store is one design's tables in its own schema.
type store struct {
	pool     *pgxpool.Pool
	schema   string
	receipts bool // the unique-index-only design's receipts table
}

// table is the schema-qualified, quoted name of one of the design's tables.
func (s *store) table(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }

func (s *store) design(name string, h http.Handler, resetExtra func(context.Context) error) Design {
	return Design{
		Name:          name,
		Setup:         s.setup,
		Handler:       h,
		DoubleEffects: s.doubleEffects,
		Reset: func(ctx context.Context) error {
			if err := s.reset(ctx); err != nil {
				return err
			}
			if resetExtra != nil {
				if err := resetExtra(ctx); err != nil {
					return fmt.Errorf("field: reset %s: %w", s.schema, err)
				}
			}
			return nil
		},
		Preload: s.preload,
	}
}

// setup creates the schema: orders (no guard column), ledger (deliberately without a unique
// constraint, so a double effect is visible instead of refused) and, for unique-index-only,
// receipts keyed by the idempotency key.
func (s *store) setup(ctx context.Context) error {
	stmts := []string{
		"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{s.schema}.Sanitize(),
		"CREATE TABLE IF NOT EXISTS " + s.table("orders") + ` (
			order_no text PRIMARY KEY,
			amount bigint NOT NULL,
			status text NOT NULL,
			transaction_id text,
			updated_at timestamptz NOT NULL DEFAULT now())`,
		"CREATE TABLE IF NOT EXISTS " + s.table("ledger") + ` (
			id bigserial PRIMARY KEY,
			order_no text NOT NULL,
			transaction_id text NOT NULL,
			amount bigint NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now())`,
		"CREATE INDEX IF NOT EXISTS ledger_order_no ON " + s.table("ledger") + " (order_no)",
	}
	if s.receipts {
		stmts = append(stmts, "CREATE TABLE IF NOT EXISTS "+s.table("receipts")+` (
			key text PRIMARY KEY,
			created_at timestamptz NOT NULL DEFAULT now())`)
	}
	for _, q := range stmts {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("field: setup %s: %w", s.schema, err)
		}
	}
	return nil
}

func (s *store) reset(ctx context.Context) error {
	q := "TRUNCATE " + s.table("orders") + ", " + s.table("ledger")
	if s.receipts {
		q += ", " + s.table("receipts")
	}
	if _, err := s.pool.Exec(ctx, q+" RESTART IDENTITY"); err != nil {
		return fmt.Errorf("field: reset %s: %w", s.schema, err)
	}
	return nil
}

func (s *store) preload(ctx context.Context, orderNos []string, amount int64) error {
	n, err := s.pool.CopyFrom(ctx, pgx.Identifier{s.schema, "orders"}, []string{"order_no", "amount", "status"},
		pgx.CopyFromSlice(len(orderNos), func(i int) ([]any, error) {
			return []any{orderNos[i], amount, StatusPending}, nil
		}))
	if err != nil {
		return fmt.Errorf("field: preload %d orders into %s: %w", len(orderNos), s.schema, err)
	}
	if n != int64(len(orderNos)) {
		return fmt.Errorf("field: preload into %s: expected %d rows copied, got %d", s.schema, len(orderNos), n)
	}
	return nil
}

func (s *store) doubleEffects(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT order_no FROM "+s.table("ledger")+
		" GROUP BY order_no HAVING count(*) > 1) AS twice").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("field: count double effects in %s: %w", s.schema, err)
	}
	return n, nil
}

// readOrder is the unlocked status read of check-then-act and redis-lock-only. found is false for
// an unknown order.
func readOrder(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table, orderNo string) (status string, amount int64, found bool, err error) {
	err = q.QueryRow(ctx, "SELECT status, amount FROM "+table+" WHERE order_no = $1", orderNo).Scan(&status, &amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("read order: %w", err)
	}
	return status, amount, true, nil
}

// refusal checks an order read against the notification: the HTTP status and message of a refusal,
// or 0 when the payment may be applied.
func refusal(found bool, orderAmount int64, p payment) (int, string) {
	switch {
	case !found:
		return http.StatusBadRequest, "unknown order"
	case orderAmount != p.amount:
		return http.StatusBadRequest, "amount does not match the order"
	}
	return 0, ""
}

// apply is the effect: mark the order paid (no status guard) and write a ledger entry (no unique
// constraint), in tx.
func (s *store) apply(ctx context.Context, tx pgx.Tx, p payment) error {
	if _, err := tx.Exec(ctx, "UPDATE "+s.table("orders")+
		" SET status = $2, transaction_id = $3, updated_at = now() WHERE order_no = $1", p.orderNo, StatusPaid, p.txnID); err != nil {
		return fmt.Errorf("update order: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.table("ledger")+
		" (order_no, transaction_id, amount) VALUES ($1, $2, $3)", p.orderNo, p.txnID, p.amount); err != nil {
		return fmt.Errorf("insert ledger entry: %w", err)
	}
	return nil
}

// applyTx runs apply in its own transaction.
func (s *store) applyTx(ctx context.Context, p payment) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.apply(ctx, tx, p) })
}

// checkThenAct: SELECT status (no lock); if PENDING, UPDATE + INSERT ledger in a transaction.
func (s *store) checkThenAct(ctx context.Context, p payment) (int, string, error) {
	status, amount, found, err := readOrder(ctx, s.pool, s.table("orders"), p.orderNo)
	if err != nil {
		return 0, "", fmt.Errorf("field: %s: %w", NameCheckThenAct, err)
	}
	if code, msg := refusal(found, amount, p); code != 0 {
		return code, msg, nil
	}
	if status != StatusPending {
		return http.StatusNoContent, "", nil
	}
	if err := s.applyTx(ctx, p); err != nil {
		return 0, "", fmt.Errorf("field: %s: %w", NameCheckThenAct, err)
	}
	return http.StatusNoContent, "", nil
}

// uniqueIndexOnly: in one transaction, INSERT the receipt ON CONFLICT DO NOTHING; a conflict is a
// duplicate (acknowledged, rolled back); otherwise check the order and apply. A concurrent
// duplicate's insert waits on the first attempt's uncommitted receipt row, then conflicts.
func (s *store) uniqueIndexOnly(ctx context.Context, p payment) (code int, msg string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO "+s.table("receipts")+" (key) VALUES ($1) ON CONFLICT DO NOTHING", p.txnID)
		if err != nil {
			return fmt.Errorf("insert receipt: %w", err)
		}
		if tag.RowsAffected() == 0 {
			code = http.StatusNoContent
			return errDuplicate
		}
		_, amount, found, err := readOrder(ctx, tx, s.table("orders"), p.orderNo)
		if err != nil {
			return err
		}
		if code, msg = refusal(found, amount, p); code != 0 {
			// Roll the receipt back too: a refused notification must not shadow a valid one.
			return errRefused
		}
		code = http.StatusNoContent
		return s.apply(ctx, tx, p)
	})
	if errors.Is(err, errDuplicate) || errors.Is(err, errRefused) {
		return code, msg, nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("field: %s: %w", NameUniqueIndexOnly, err)
	}
	return code, msg, nil
}

// errDuplicate and errRefused roll a transaction back without it being a failure.
var (
	errDuplicate = errors.New("duplicate")
	errRefused   = errors.New("refused")
)

// LockTTL is the redis-lock-only design's lock expiry (SET NX EX 10).
const LockTTL = 10 * time.Second

// redisLockOnly: read the status (the "already paid?" fast path), SET lock NX EX 10, apply with no
// database guard and without re-reading the status, DEL lock. Redis down answers 500: this design
// has no other gate.
func (s *store) redisLockOnly(ctx context.Context, rdb redis.UniversalClient, prefix string, p payment) (int, string, error) {
	status, amount, found, err := readOrder(ctx, s.pool, s.table("orders"), p.orderNo)
	if err != nil {
		return 0, "", fmt.Errorf("field: %s: %w", NameRedisLockOnly, err)
	}
	if code, msg := refusal(found, amount, p); code != 0 {
		return code, msg, nil
	}
	if status != StatusPending {
		return http.StatusNoContent, "", nil
	}
	key := prefix + p.txnID
	ok, err := rdb.SetNX(ctx, key, "1", LockTTL).Result()
	if err != nil {
		return 0, "", fmt.Errorf("field: %s: take lock: %w", NameRedisLockOnly, err)
	}
	if !ok {
		return http.StatusInternalServerError, "processing, retry later", nil
	}
	// Plain DEL, as most code does (not a compare-and-delete).
	defer rdb.Del(context.WithoutCancel(ctx), key)
	if err := s.applyTx(ctx, p); err != nil {
		return 0, "", fmt.Errorf("field: %s: %w", NameRedisLockOnly, err)
	}
	return http.StatusNoContent, "", nil
}

// deletePrefix deletes the keys under prefix (SCAN + DEL, bounded batches).
func deletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return fmt.Errorf("scan %s*: %w", prefix, err)
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				return fmt.Errorf("delete %d keys under %s: %w", len(keys), prefix, err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
