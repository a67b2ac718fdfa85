package faults

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Snapshot reads the database straight from PostgreSQL (not through callbackd or a proxy).
func (e *Env) Snapshot() Snapshot {
	t := e.T
	t.Helper()
	s, err := e.trySnapshot()
	if err != nil {
		t.Fatalf("snapshot the database: %v", err)
	}
	return s
}

func (e *Env) trySnapshot() (Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := Snapshot{Taken: time.Now(), Orders: map[string]string{}}
	// One repeatable-read transaction: every table at the same instant.
	tx, err := e.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return s, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	queries := []struct {
		sql  string
		scan func(pgx.Rows) error
	}{
		{`SELECT order_no, status FROM payment_orders`, func(r pgx.Rows) error {
			var o, st string
			if err := r.Scan(&o, &st); err != nil {
				return err
			}
			s.Orders[o] = st
			return nil
		}},
		{`SELECT channel, order_no, kind, outcome, provider_txn_id FROM callback_receipts`, func(r pgx.Rows) error {
			var rc ReceiptRow
			var kind string
			if err := r.Scan(&rc.Channel, &rc.OrderNo, &kind, &rc.Outcome, &rc.TxnID); err != nil {
				return err
			}
			rc.Kind = Kind(kind)
			s.Receipts = append(s.Receipts, rc)
			return nil
		}},
		{`SELECT order_no, entry_type, refund_no, provider_txn_id, amount FROM ledger_entries`, func(r pgx.Rows) error {
			var l LedgerRow
			if err := r.Scan(&l.OrderNo, &l.EntryType, &l.RefundNo, &l.TxnID, &l.Amount); err != nil {
				return err
			}
			s.Ledger = append(s.Ledger, l)
			return nil
		}},
		{`SELECT event_id, channel, order_no, event_type FROM outbox_events`, func(r pgx.Rows) error {
			var ev EventRow
			if err := r.Scan(&ev.EventID, &ev.Channel, &ev.OrderNo, &ev.EventType); err != nil {
				return err
			}
			s.Events = append(s.Events, ev)
			return nil
		}},
		{`SELECT order_no, kind, provider_txn_id FROM payment_exceptions`, func(r pgx.Rows) error {
			var ex ExceptionRow
			if err := r.Scan(&ex.OrderNo, &ex.Kind, &ex.TxnID); err != nil {
				return err
			}
			s.Exceptions = append(s.Exceptions, ex)
			return nil
		}},
	}
	for _, q := range queries {
		rows, err := tx.Query(ctx, q.sql)
		if err != nil {
			return s, fmt.Errorf("%s: %w", q.sql, err)
		}
		for rows.Next() {
			if err := q.scan(rows); err != nil {
				rows.Close()
				return s, fmt.Errorf("%s: scan: %w", q.sql, err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return s, fmt.Errorf("%s: %w", q.sql, err)
		}
	}
	return s, nil
}

// WaitSnapshot waits until the database answers (e.g. after a restart), then snapshots it.
func (e *Env) WaitSnapshot(timeout time.Duration) Snapshot {
	t := e.T
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := e.trySnapshot()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot the database: not within %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitDelivered waits until every committed outbox event reached the merchant's sink.
func (e *Env) WaitDelivered(timeout time.Duration) {
	t := e.T
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := e.Snapshot()
		got := map[string]bool{}
		for _, ev := range e.Sink.Events() {
			got[ev.EventID] = true
		}
		missing := 0
		for _, ev := range s.Events {
			if !got[ev.EventID] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("after %s, %d of %d committed events have not reached the sink (the checker will say which)", timeout, missing, len(s.Events))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CheckOptions add to the checker's input what the history and the final snapshot cannot say.
type CheckOptions struct {
	Early           []Snapshot
	Faults          []Fault
	AllowUnfinished bool
	// NoSink skips the sink checks (and waiting for deliveries).
	NoSink bool
}

// Check waits for the outbox deliveries, snapshots the database and runs the checker over the
// history, the snapshot and the sink. It logs the counts, the faults with their evidence and
// the checker's verdict, and returns the report; it does not fail the test (use RequireOK).
func (e *Env) Check(name string, expected []Notification, o CheckOptions) Report {
	t := e.T
	t.Helper()
	var sink []SinkEvent
	if !o.NoSink {
		e.WaitDelivered(60 * time.Second)
		sink = e.Sink.Events()
		if sink == nil {
			sink = []SinkEvent{}
		}
	}
	in := CheckInput{Ops: e.History.Ops(), Expected: expected, Final: e.Snapshot(), Early: o.Early,
		Sink: sink, Faults: o.Faults, AllowUnfinished: o.AllowUnfinished}
	r := Check(in)
	t.Logf("%s: %s", name, r.Counts)
	t.Logf("%s: requests by phase: %s", name, PhaseTally(in.Ops))
	for _, f := range o.Faults {
		t.Logf("%s: fault %q happened=%v: %s", name, f.Name, f.Happened, f.Evidence)
	}
	t.Logf("%s: checker: %s", name, r.Summary(10))
	return r
}

// RequireOK fails the test unless every invariant held.
func RequireOK(t testing.TB, r Report) {
	t.Helper()
	if !r.OK() {
		t.Errorf("checker: expected every invariant to hold, got %d violations: %s", len(r.Violations), r.Summary(20))
	}
}

// --- evidence -------------------------------------------------------------------------------

// SentinelWatch records the +switch-master events one Sentinel publishes (connected directly,
// not through any proxy).
type SentinelWatch struct {
	sub    *redis.PubSub
	client *redis.SentinelClient
	done   chan struct{}
	events chan string
}

// WatchSentinel subscribes to +switch-master on the first Sentinel of the Env.
func (e *Env) WatchSentinel() *SentinelWatch {
	t := e.T
	t.Helper()
	if e.Redis == nil || len(e.Redis.Sentinels()) == 0 {
		t.Fatal("WatchSentinel: the Env has no Sentinels")
	}
	c := redis.NewSentinelClient(&redis.Options{Addr: e.Redis.Sentinels()[0].Addr, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := c.Subscribe(ctx, "+switch-master")
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("subscribe to +switch-master: %v", err)
	}
	w := &SentinelWatch{sub: sub, client: c, done: make(chan struct{}), events: make(chan string, 64)}
	go func() {
		defer close(w.done)
		for m := range sub.Channel() {
			select {
			case w.events <- m.Payload:
			default:
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

// Switches returns the +switch-master payloads seen so far ("name old-ip old-port new-ip new-port").
func (w *SentinelWatch) Switches() []string {
	var out []string
	for {
		select {
		case s := <-w.events:
			out = append(out, s)
		default:
			return out
		}
	}
}

// WaitSwitch waits up to timeout for a +switch-master and returns its payload ("" if none).
func (w *SentinelWatch) WaitSwitch(timeout time.Duration) string {
	select {
	case s := <-w.events:
		return s
	case <-time.After(timeout):
		return ""
	}
}

func (w *SentinelWatch) close() {
	_ = w.sub.Close()
	_ = w.client.Close()
	<-w.done
}

// PGStartTime is pg_postmaster_start_time() of the Env's server (direct connection).
func (e *Env) PGStartTime() (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var at time.Time
	if err := e.DB.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&at); err != nil {
		return at, fmt.Errorf("pg_postmaster_start_time: %w", err)
	}
	return at, nil
}

// RedisKeys returns callbackd's keys (cb:*) and their values on the Redis node at addr (direct).
func RedisKeys(addr string) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, "cb:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		v, err := c.Get(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return out, fmt.Errorf("get %s: %w", k, err)
		}
		out[k] = v
	}
	if err := iter.Err(); err != nil {
		return out, fmt.Errorf("scan %s: %w", addr, err)
	}
	return out, nil
}

// MetricsTotal sums a metric over every running callbackd of the Env (unreachable ones count 0).
func (e *Env) MetricsTotal(name string, match map[string]string) float64 {
	var sum float64
	for _, c := range e.Instances() {
		if m, err := c.Metrics(); err == nil {
			sum += m.Sum(name, match)
		}
	}
	return sum
}

// MetricsByLabel sums a metric per label value over every running callbackd of the Env.
func (e *Env) MetricsByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, c := range e.Instances() {
		if m, err := c.Metrics(); err == nil {
			for k, v := range m.ByLabel(name, label, nil) {
				out[k] += v
			}
		}
	}
	return out
}

// FormatCounts formats a label→value map in a stable order, values as whole numbers (%.0f, never
// an exponent), unlike promtext.Format's %g, so that scenario logs keep printing large counts in full.
func FormatCounts(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
