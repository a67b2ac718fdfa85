// Package reconciler finds the orders whose callbacks never came and settles them with their
// provider: a periodic sweep, per channel, of the orders still PENDING PendingAfter after they
// were registered (or past their expires_at), each queried through the active query path
// (query.Syncer) at a bounded rate. A payment the provider reports is applied exactly once
// through the pipeline; an expired order the provider reports unpaid is closed through the same
// conditional update, so a payment arriving after that becomes a payment exception, never a
// silent loss.
//
// Only one replica sweeps a channel at a time: a sweep runs while holding a session-level
// PostgreSQL advisory lock of that channel (pg_try_advisory_lock on a dedicated connection); a
// replica that does not get it skips its turn, and if its connection dies PostgreSQL releases
// the lock with it. A failed query is not fatal: the order stays PENDING and is asked about again
// at the next sweep.
//
// Metrics:
//
//	callbackd_reconciler_stuck_orders{channel}          PENDING orders past their deadline after the last sweep
//	callbackd_reconciler_queries_total{channel,result}  provider queries by result (paid, closed,
//	                                                    not_paid, not_found, transient_error, permanent_error,
//	                                                    already_settled)
//	callbackd_reconciler_sweeps_total{channel,result}   sweeps by result (done, skipped, failed)
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
)

// Defaults for channel settings left zero.
const (
	DefaultPendingAfter     = 10 * time.Minute
	DefaultInterval         = time.Minute
	DefaultQueriesPerSecond = 5
	// DefaultBatchSize bounds the orders one sweep of a channel looks at; the rest wait for the
	// next sweep (oldest first, so none starves).
	DefaultBatchSize = 500
)

// Metric names.
const (
	MetricStuckOrders = "callbackd_reconciler_stuck_orders"
	MetricQueries     = "callbackd_reconciler_queries_total"
	MetricSweeps      = "callbackd_reconciler_sweeps_total"
)

// Query result labels besides the query.State values.
const (
	ResultTransientError = "transient_error"
	ResultPermanentError = "permanent_error"
	// ResultAlreadySettled: the order left PENDING between the listing and its turn (its
	// callback came); the provider was not asked.
	ResultAlreadySettled = "already_settled"
)

// Sweep result labels.
const (
	SweepDone    = "done"
	SweepSkipped = "skipped"
	SweepFailed  = "failed"
)

// Syncer is the active query path (*query.Syncer).
type Syncer interface {
	SyncOrder(ctx context.Context, orderNo string) (query.Result, error)
	Queryable(channel string) bool
}

// Options configure a Reconciler.
type Options struct {
	// Clock decides which orders are overdue; the real clock when nil.
	Clock clock.Clock
	// Logger receives a line per sweep that found something and per failed query; none when nil.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// BatchSize bounds the orders of one channel's sweep; DefaultBatchSize when zero.
	BatchSize int
}

// channel is one reconciled channel's settings and rate limiter.
type channel struct {
	name         string
	pendingAfter time.Duration
	interval     time.Duration
	limiter      *rate.Limiter
	lockID       int64
}

// Reconciler sweeps the channels' overdue orders. It is safe for concurrent use; concurrent
// sweeps of one channel (in this process or others) serialize on its advisory lock.
type Reconciler struct {
	pool     *pgxpool.Pool
	syncer   Syncer
	clock    clock.Clock
	logger   *slog.Logger
	batch    int
	channels []*channel

	stuck   *prometheus.GaugeVec
	queries *prometheus.CounterVec
	sweeps  *prometheus.CounterVec
}

// New returns a reconciler of the channels whose reconciliation is enabled and whose provider
// the syncer can query; the others are left out (see Channels).
func New(pool *pgxpool.Pool, syncer Syncer, channels []config.Channel, opts Options) (*Reconciler, error) {
	if pool == nil || syncer == nil {
		return nil, errors.New("reconciler: new: a pool and a syncer are required")
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
	r := &Reconciler{
		pool:   pool,
		syncer: syncer,
		clock:  opts.Clock,
		logger: opts.Logger.With("component", "reconciler"),
		batch:  opts.BatchSize,
		stuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricStuckOrders,
			Help: "PENDING orders past their reconciliation deadline or expiry, counted after the last sweep of the channel."},
			[]string{"channel"}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricQueries,
			Help: "Provider queries of the reconciler by result (paid, closed, not_paid, not_found, transient_error, permanent_error)."},
			[]string{"channel", "result"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSweeps,
			Help: "Reconciler sweeps by result (done, skipped: another replica held the lock, failed)."},
			[]string{"channel", "result"}),
	}
	for _, ch := range channels {
		rc := ch.Reconciliation
		if rc.Enabled != nil && !*rc.Enabled {
			continue
		}
		if !syncer.Queryable(ch.Name) {
			r.logger.Warn("orders of the channel are not reconciled: its provider cannot be queried", "channel", ch.Name)
			continue
		}
		c := &channel{
			name:         ch.Name,
			pendingAfter: rc.PendingAfter.Duration,
			interval:     rc.Interval.Duration,
			lockID:       LockID(ch.Name),
		}
		if c.pendingAfter <= 0 {
			c.pendingAfter = DefaultPendingAfter
		}
		if c.interval <= 0 {
			c.interval = DefaultInterval
		}
		qps := int(rc.QueriesPerSecond)
		if qps <= 0 {
			qps = DefaultQueriesPerSecond
		}
		c.limiter = rate.NewLimiter(rate.Limit(qps), 1)
		r.channels = append(r.channels, c)
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{r.stuck, r.queries, r.sweeps} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("reconciler: new: register metrics: %w", err)
			}
		}
	}
	for _, c := range r.channels {
		r.stuck.WithLabelValues(c.name)
		for _, res := range []string{string(query.StatePaid), string(query.StateClosed), string(query.StateNotPaid),
			string(query.StateNotFound), ResultTransientError, ResultPermanentError, ResultAlreadySettled} {
			r.queries.WithLabelValues(c.name, res)
		}
		for _, res := range []string{SweepDone, SweepSkipped, SweepFailed} {
			r.sweeps.WithLabelValues(c.name, res)
		}
	}
	return r, nil
}

// LockID is the advisory lock key of a channel's sweep, derived from a name of ours so that other
// users of the database do not collide with it.
func LockID(channel string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("callbackd/reconciler/"))
	_, _ = h.Write([]byte(channel))
	return int64(h.Sum64() >> 1)
}

// Channels lists the reconciled channels.
func (r *Reconciler) Channels() []string {
	names := make([]string, 0, len(r.channels))
	for _, c := range r.channels {
		names = append(names, c.name)
	}
	return names
}

// Run sweeps every reconciled channel at once and then every channel's interval until ctx is
// done, and returns nil. A failed sweep is logged and counted; the next one tries again.
func (r *Reconciler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, c := range r.channels {
		wg.Go(func() {
			t := time.NewTicker(c.interval)
			defer t.Stop()
			for {
				if _, err := r.sweepChannel(ctx, c); err != nil && ctx.Err() == nil {
					r.logger.WarnContext(ctx, "reconciler sweep failed; retrying at the next interval",
						"channel", c.name, "error", err.Error())
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// Report is what one sweep of one channel did.
type Report struct {
	Channel string
	// Skipped: another replica held the channel's lock; nothing was done.
	Skipped bool
	// Candidates is the number of overdue orders the sweep looked at.
	Candidates int
	// Results counts the queries by result label.
	Results map[string]int
	// Paid and Closed count the orders whose payment or close this sweep applied itself.
	Paid, Closed int
	// Stuck is the number of overdue orders still PENDING after the sweep.
	Stuck int64
}

// Sweep sweeps every reconciled channel once, in order, and returns their reports. It stops at
// the first failed sweep (a database failure: individual query failures do not fail a sweep).
func (r *Reconciler) Sweep(ctx context.Context) ([]Report, error) {
	reports := make([]Report, 0, len(r.channels))
	for _, c := range r.channels {
		rep, err := r.sweepChannel(ctx, c)
		reports = append(reports, rep)
		if err != nil {
			return reports, err
		}
	}
	return reports, nil
}

// sweepChannel runs one sweep of a channel if no other replica is sweeping it.
func (r *Reconciler) sweepChannel(ctx context.Context, c *channel) (rep Report, err error) {
	rep = Report{Channel: c.name, Results: map[string]int{}}
	defer func() {
		switch {
		case err != nil:
			r.sweeps.WithLabelValues(c.name, SweepFailed).Inc()
		case rep.Skipped:
			r.sweeps.WithLabelValues(c.name, SweepSkipped).Inc()
		default:
			r.sweeps.WithLabelValues(c.name, SweepDone).Inc()
		}
	}()
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return rep, fmt.Errorf("reconciler: sweep %s: acquire connection: %w", c.name, err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, c.lockID).Scan(&locked); err != nil {
		conn.Release()
		return rep, fmt.Errorf("reconciler: sweep %s: try lock: %w", c.name, err)
	}
	if !locked {
		conn.Release()
		rep.Skipped = true
		return rep, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, c.lockID); uerr != nil {
			// Never hand back a connection that may still hold the lock: closing it ends the
			// session and its locks.
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()

	now := r.clock.Now()
	deadline := now.Add(-c.pendingAfter)
	orders, err := overdue(ctx, conn.Conn(), c.name, deadline, now, r.batch)
	if err != nil {
		return rep, fmt.Errorf("reconciler: sweep %s: %w", c.name, err)
	}
	rep.Candidates = len(orders)
	for _, orderNo := range orders {
		if err := c.limiter.Wait(ctx); err != nil {
			return rep, fmt.Errorf("reconciler: sweep %s: %w", c.name, err)
		}
		res, err := r.syncer.SyncOrder(ctx, orderNo)
		label := resultLabel(res, err)
		rep.Results[label]++
		r.queries.WithLabelValues(c.name, label).Inc()
		switch {
		case err != nil && ctx.Err() != nil:
			return rep, fmt.Errorf("reconciler: sweep %s: %w", c.name, ctx.Err())
		case errors.Is(err, query.ErrPermanent):
			r.logger.ErrorContext(ctx, "reconciler query refused; the order stays pending",
				"channel", c.name, "order_no", orderNo, "error", err.Error())
		case err != nil:
			r.logger.WarnContext(ctx, "reconciler query failed; asking again at the next sweep",
				"channel", c.name, "order_no", orderNo, "error", err.Error())
		case res.Outcome != metrics.OutcomeApplied:
			// Nothing to apply, or applied by someone else first (a callback, another sync).
		case res.Action == query.ActionPaid:
			rep.Paid++
		case res.Action == query.ActionClosed:
			rep.Closed++
		}
	}
	if rep.Stuck, err = countOverdue(ctx, conn.Conn(), c.name, deadline, now); err != nil {
		return rep, fmt.Errorf("reconciler: sweep %s: %w", c.name, err)
	}
	r.stuck.WithLabelValues(c.name).Set(float64(rep.Stuck))
	if rep.Candidates > 0 {
		r.logger.InfoContext(ctx, "reconciler sweep", "channel", c.name, "overdue", rep.Candidates,
			"paid", rep.Paid, "closed", rep.Closed, "still_pending", rep.Stuck)
	}
	return rep, nil
}

// resultLabel is the queries_total result of one sync.
func resultLabel(res query.Result, err error) string {
	switch {
	case errors.Is(err, query.ErrPermanent):
		return ResultPermanentError
	case err != nil:
		return ResultTransientError
	case !res.Queried:
		// Settled between the listing and the query (a callback won): nothing was asked.
		return ResultAlreadySettled
	default:
		return string(res.Answer.State)
	}
}

// overdueWhere selects a channel's PENDING orders registered before the deadline or expired.
const overdueWhere = `status = 'PENDING' AND channel = $1 AND (created_at <= $2 OR expires_at <= $3)`

// overdue lists a channel's overdue orders, oldest first.
func overdue(ctx context.Context, conn *pgx.Conn, channel string, deadline, now time.Time, limit int) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT order_no FROM payment_orders WHERE `+overdueWhere+`
ORDER BY created_at, order_no LIMIT $4`, channel, deadline, now, limit)
	if err != nil {
		return nil, fmt.Errorf("list overdue orders: %w", err)
	}
	orders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list overdue orders: %w", err)
	}
	return orders, nil
}

func countOverdue(ctx context.Context, conn *pgx.Conn, channel string, deadline, now time.Time) (int64, error) {
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM payment_orders WHERE `+overdueWhere, channel, deadline, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("count overdue orders: %w", err)
	}
	return n, nil
}
