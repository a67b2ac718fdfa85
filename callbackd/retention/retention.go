// Package retention purges the pipeline's short-lived records from PostgreSQL: callback receipts
// older than their channel's receiptRetention, merchant API idempotency keys older than 48 hours,
// and submit tokens (used or not) older than 48 hours. Orders, ledger entries, outbox events and
// payment exceptions are kept for good.
//
// A sweep deletes in small batches, each its own short transaction that locks only the rows it
// deletes (FOR UPDATE SKIP LOCKED: rows a callback is working on are left for the next sweep),
// with a pause between batches, so that a sweep never holds long locks nor starves the callback
// path of I/O. Only one replica sweeps at a time: a sweep runs on one dedicated connection that
// holds a session-level PostgreSQL advisory lock (pg_try_advisory_lock); a replica that does not
// get it skips its turn. If that connection dies, PostgreSQL releases the lock with it.
//
// Purging a receipt is safe for exactly-once: a provider retry arriving after the purge finds the
// order already in its final state (or the refund already in the ledger) and changes nothing.
// That is why receiptRetention must outlive the providers' retry spans (config validates it
// against the success mark).
package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// Defaults of Options.
const (
	DefaultBatchSize               = 1000
	DefaultPause                   = 100 * time.Millisecond
	DefaultInterval                = 10 * time.Minute
	DefaultIdempotencyKeyRetention = 48 * time.Hour
	DefaultSubmitTokenRetention    = 48 * time.Hour
)

// LockID is the key of the advisory lock that keeps sweeps to one replica at a time. It is
// derived from a name of ours so that other users of the database do not collide with it.
var LockID = func() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("callbackd/retention"))
	return int64(h.Sum64() >> 1)
}()

// Metric names.
const (
	// MetricDeletedTotal counts purged rows per table.
	MetricDeletedTotal = "callbackd_retention_deleted_total"
	// MetricSweepsTotal counts sweeps per result (done, skipped: another replica held the lock,
	// failed).
	MetricSweepsTotal = "callbackd_retention_sweeps_total"
	// MetricLastSuccess is the Unix time of the last completed sweep on this replica.
	MetricLastSuccess = "callbackd_retention_last_success_timestamp_seconds"
)

// Options configure a Sweeper. Zero fields take the defaults.
type Options struct {
	// Clock decides the cut-offs; the real clock when nil.
	Clock clock.Clock
	// Logger receives a line per sweep that deleted something; none when nil.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// BatchSize bounds the rows deleted per transaction.
	BatchSize int
	// Pause between two batches.
	Pause time.Duration
	// Interval between two sweeps of Run.
	Interval time.Duration
	// IdempotencyKeyRetention is the age after which merchant API idempotency keys are purged;
	// at least store.MinIdempotencyKeyRetention.
	IdempotencyKeyRetention time.Duration
	// SubmitTokenRetention is the age after which submit tokens are purged, consumed or not
	// (after it, a replayed token is "unknown" rather than "already submitted").
	SubmitTokenRetention time.Duration
}

// Report is what one sweep did.
type Report struct {
	// Skipped: another replica held the lock; nothing was done.
	Skipped bool
	// Rows deleted per table.
	Receipts, IdempotencyKeys, SubmitTokens int64
	// Batches is the number of delete transactions.
	Batches int
}

// Sweeper purges expired records. It is safe for concurrent use; concurrent sweeps (in this
// process or others) serialize on the advisory lock.
type Sweeper struct {
	pool      *pgxpool.Pool
	opts      Options
	logger    *slog.Logger
	receipts  []channelRetention
	deleted   *prometheus.CounterVec
	sweeps    *prometheus.CounterVec
	lastSweep prometheus.Gauge
}

type channelRetention struct {
	channel string
	age     time.Duration
}

// NewSweeper returns a sweeper for the channels' receipts (by their ttls.receiptRetention,
// config.DefaultReceiptRetention when zero) and for the merchant API's records. Receipts of
// channels this process is not configured for are left alone.
func NewSweeper(pool *pgxpool.Pool, channels []config.Channel, opts Options) (*Sweeper, error) {
	if pool == nil {
		return nil, errors.New("retention: new sweeper: nil pool")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Pause <= 0 {
		opts.Pause = DefaultPause
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.IdempotencyKeyRetention == 0 {
		opts.IdempotencyKeyRetention = DefaultIdempotencyKeyRetention
	}
	if opts.IdempotencyKeyRetention < store.MinIdempotencyKeyRetention {
		return nil, fmt.Errorf("retention: new sweeper: idempotency key retention %s is below the minimum %s",
			opts.IdempotencyKeyRetention, store.MinIdempotencyKeyRetention)
	}
	if opts.SubmitTokenRetention == 0 {
		opts.SubmitTokenRetention = DefaultSubmitTokenRetention
	}
	if opts.SubmitTokenRetention < 0 {
		return nil, fmt.Errorf("retention: new sweeper: submit token retention must be positive, got %s", opts.SubmitTokenRetention)
	}
	s := &Sweeper{
		pool:   pool,
		opts:   opts,
		logger: opts.Logger.With(slog.String("component", "retention")),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricDeletedTotal,
			Help: "Rows purged by the retention sweep, per table."}, []string{"table"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSweepsTotal,
			Help: "Retention sweeps per result (done, skipped, failed)."}, []string{"result"}),
		lastSweep: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricLastSuccess,
			Help: "Unix time of the last completed retention sweep on this replica."}),
	}
	for i, ch := range channels {
		age := ch.TTLs.ReceiptRetention.Duration
		if age == 0 {
			age = config.DefaultReceiptRetention
		}
		if ch.Name == "" || age < 0 {
			return nil, fmt.Errorf("retention: new sweeper: channels[%d]: need a name and a positive ttls.receiptRetention", i)
		}
		s.receipts = append(s.receipts, channelRetention{channel: ch.Name, age: age})
	}
	slices.SortFunc(s.receipts, func(a, b channelRetention) int { return cmp.Compare(a.channel, b.channel) })
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.deleted, s.sweeps, s.lastSweep} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("retention: new sweeper: register metrics: %w", err)
			}
		}
	}
	for _, table := range []string{"callback_receipts", "api_idempotency_keys", "submit_tokens"} {
		s.deleted.WithLabelValues(table)
	}
	return s, nil
}

// Run sweeps at once and then every Interval until ctx is done, and returns nil. A failed sweep
// is logged and counted; the next one tries again.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "retention sweep failed; retrying at the next interval", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep runs one sweep if no other replica is sweeping, and reports what it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (rep Report, err error) {
	defer func() {
		switch {
		case err != nil:
			s.sweeps.WithLabelValues("failed").Inc()
		case rep.Skipped:
			s.sweeps.WithLabelValues("skipped").Inc()
		default:
			s.sweeps.WithLabelValues("done").Inc()
			s.lastSweep.Set(float64(s.opts.Clock.Now().Unix()))
		}
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("retention: sweep: acquire connection: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, LockID).Scan(&locked); err != nil {
		conn.Release()
		return Report{}, fmt.Errorf("retention: sweep: try lock: %w", err)
	}
	if !locked {
		conn.Release()
		return Report{Skipped: true}, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, LockID); uerr != nil {
			// Never hand a connection that may still hold the lock back to the pool: closing it
			// ends the session, and the session's locks with it.
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()

	now := s.opts.Clock.Now()
	for _, r := range s.receipts {
		n, err := s.purge(ctx, conn, &rep, "callback_receipts", `
DELETE FROM callback_receipts WHERE id IN (
    SELECT id FROM callback_receipts WHERE channel = $1 AND created_at < $2
    LIMIT $3 FOR UPDATE SKIP LOCKED)`, r.channel, now.Add(-r.age))
		rep.Receipts += n
		if err != nil {
			return rep, fmt.Errorf("retention: sweep: receipts of channel %s: %w", r.channel, err)
		}
	}
	n, err := s.purge(ctx, conn, &rep, "api_idempotency_keys", `
DELETE FROM api_idempotency_keys WHERE idempotency_key IN (
    SELECT idempotency_key FROM api_idempotency_keys WHERE created_at < $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)`, now.Add(-s.opts.IdempotencyKeyRetention))
	rep.IdempotencyKeys = n
	if err != nil {
		return rep, fmt.Errorf("retention: sweep: idempotency keys: %w", err)
	}
	n, err = s.purge(ctx, conn, &rep, "submit_tokens", `
DELETE FROM submit_tokens WHERE token_hash IN (
    SELECT token_hash FROM submit_tokens WHERE created_at < $1
    LIMIT $2 FOR UPDATE SKIP LOCKED)`, now.Add(-s.opts.SubmitTokenRetention))
	rep.SubmitTokens = n
	if err != nil {
		return rep, fmt.Errorf("retention: sweep: submit tokens: %w", err)
	}
	if rep.Receipts+rep.IdempotencyKeys+rep.SubmitTokens > 0 {
		s.logger.InfoContext(ctx, "retention sweep done",
			slog.Int64("receipts", rep.Receipts), slog.Int64("idempotency_keys", rep.IdempotencyKeys),
			slog.Int64("submit_tokens", rep.SubmitTokens), slog.Int("batches", rep.Batches))
	}
	return rep, nil
}

// purge runs the batch delete (whose last parameter is the batch size) until a batch deletes
// fewer rows than the batch size, pausing between batches.
func (s *Sweeper) purge(ctx context.Context, conn *pgxpool.Conn, rep *Report, table, sql string, args ...any) (int64, error) {
	args = append(args, s.opts.BatchSize)
	var total int64
	for {
		tag, err := conn.Exec(ctx, sql, args...)
		if err != nil {
			return total, err
		}
		rep.Batches++
		n := tag.RowsAffected()
		total += n
		s.deleted.WithLabelValues(table).Add(float64(n))
		if n < int64(s.opts.BatchSize) {
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(s.opts.Pause):
		}
	}
}
