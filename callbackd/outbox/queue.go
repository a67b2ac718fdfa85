package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed-1cff2221/callback-platform/callbackd/clock"
)

// Status is a delivery's state.
type Status string

// The delivery states.
const (
	// StatusPending: waiting for its next attempt (or in flight, under a lease).
	StatusPending Status = "PENDING"
	// StatusDelivered: an endpoint answered 2xx.
	StatusDelivered Status = "DELIVERED"
	// StatusDead: every attempt of the retry schedule failed; an operator may redeliver it.
	StatusDead Status = "DEAD"
)

// Errors callers branch on, returned wrapped; test with errors.Is.
var (
	// ErrNotFound: no delivery matches the event id (and endpoint).
	ErrNotFound = errors.New("outbox: delivery not found")
	// ErrInFlight: the delivery is being attempted right now; retry the redelivery later.
	ErrInFlight = errors.New("outbox: delivery attempt in flight")
)

// WebhookID is the webhook-id of an event's delivery to an endpoint: the event id (stable across
// retries, derived from the notification's idempotency key) and the endpoint name, joined by a
// colon. Each endpoint thus sees one id per event, the same on every attempt and redelivery, and
// two endpoints of one merchant never share an id.
func WebhookID(eventID, endpoint string) string { return eventID + ":" + endpoint }

// Delivery is an event's delivery to one endpoint, as the operator sees it.
type Delivery struct {
	// ID is the row id, the cursor of List.
	ID int64
	// EventID is the outbox event's stable id; WebhookID the id sent to the endpoint.
	EventID, WebhookID string
	// Channel and Endpoint say where the event goes.
	Channel, Endpoint string
	// EventType and OrderNo describe the event.
	EventType, OrderNo string
	// Status, Attempts (in the current cycle) and Redeliveries (operator replays).
	Status       Status
	Attempts     int
	Redeliveries int
	// NextAttemptAt is when a pending delivery is due (the lease's end while in flight).
	NextAttemptAt time.Time
	// InFlight: a dispatcher holds the delivery's lease.
	InFlight bool
	// LastAttemptAt, LastHTTPStatus (0 without an answer) and LastError describe the last attempt.
	LastAttemptAt  *time.Time
	LastHTTPStatus int
	LastError      string
	// DeliveredAt is when an endpoint acknowledged it.
	DeliveredAt *time.Time
	// CreatedAt is when the event was fanned out to the endpoint.
	CreatedAt time.Time
}

// Filter selects deliveries for List. Zero fields match everything.
type Filter struct {
	Channel  string
	Endpoint string
	Status   Status
	EventID  string
	OrderNo  string
	// AfterID continues a listing after the delivery with this id (newest first: ids below it).
	AfterID int64
	// Limit bounds the result; DefaultListLimit when zero, at most MaxListLimit.
	Limit int
}

// Limits of List.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// Queue is the outbox's state in PostgreSQL: what the dispatcher claims and records, and what
// an operator lists and redelivers. It is safe for concurrent use.
type Queue struct {
	pool  *pgxpool.Pool
	clock clock.Clock
}

// NewQueue returns the queue on pool. A nil clk is the real clock.
func NewQueue(pool *pgxpool.Pool, clk clock.Clock) *Queue {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Queue{pool: pool, clock: clk}
}

const deliveryColumns = `d.id, d.event_id, d.channel, d.endpoint, e.event_type, e.order_no, d.status,
    d.attempts, d.redeliveries, d.next_attempt_at, d.lease_token IS NOT NULL, d.last_attempt_at,
    COALESCE(d.last_http_status, 0), d.last_error, d.delivered_at, d.created_at`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	var status string
	err := row.Scan(&d.ID, &d.EventID, &d.Channel, &d.Endpoint, &d.EventType, &d.OrderNo, &status,
		&d.Attempts, &d.Redeliveries, &d.NextAttemptAt, &d.InFlight, &d.LastAttemptAt,
		&d.LastHTTPStatus, &d.LastError, &d.DeliveredAt, &d.CreatedAt)
	if err != nil {
		return Delivery{}, err
	}
	d.Status = Status(status)
	d.WebhookID = WebhookID(d.EventID, d.Endpoint)
	return d, nil
}

// List returns the deliveries matching f, newest first.
func (q *Queue) List(ctx context.Context, f Filter) ([]Delivery, error) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = DefaultListLimit
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
	if f.Status != "" && !slices.Contains([]Status{StatusPending, StatusDelivered, StatusDead}, f.Status) {
		return nil, fmt.Errorf("outbox: list: unknown status %q", f.Status)
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Channel != "" {
		add("d.channel = $%d", f.Channel)
	}
	if f.Endpoint != "" {
		add("d.endpoint = $%d", f.Endpoint)
	}
	if f.Status != "" {
		add("d.status = $%d", string(f.Status))
	}
	if f.EventID != "" {
		add("d.event_id = $%d", f.EventID)
	}
	if f.OrderNo != "" {
		add("e.order_no = $%d", f.OrderNo)
	}
	if f.AfterID > 0 {
		add("d.id < $%d", f.AfterID)
	}
	sql := `SELECT ` + deliveryColumns + ` FROM outbox_deliveries d JOIN outbox_events e ON e.id = d.event_row_id`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, limit)
	sql += fmt.Sprintf(` ORDER BY d.id DESC LIMIT $%d`, len(args))

	rows, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("outbox: list: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	return out, nil
}

// DeadLetters returns the dead deliveries of a channel ("" for all), newest first.
func (q *Queue) DeadLetters(ctx context.Context, channel string, limit int) ([]Delivery, error) {
	return q.List(ctx, Filter{Channel: channel, Status: StatusDead, Limit: limit})
}

// Redeliver puts an event's delivery to endpoint ("" for each of the event's endpoints) back to
// PENDING, due now, with a fresh retry cycle: the next dispatcher pass sends the same payload with
// the same webhook-id. It re-delivers the event; it never re-applies the notification's effect.
// A delivery that is pending already is made due now. A delivery in flight is refused with
// ErrInFlight (its outcome is about to be recorded), an unknown one with ErrNotFound. It returns
// the deliveries as they are after the change.
func (q *Queue) Redeliver(ctx context.Context, eventID, endpoint string) ([]Delivery, error) {
	if eventID == "" {
		return nil, fmt.Errorf("outbox: redeliver: event id is empty")
	}
	now := q.clock.Now()
	var out []Delivery
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
SELECT id, event_row_id, lease_token IS NOT NULL FROM outbox_deliveries
WHERE event_id = $1 AND ($2 = '' OR endpoint = $2)
ORDER BY id FOR UPDATE`, eventID, endpoint)
		if err != nil {
			return fmt.Errorf("lock deliveries: %w", err)
		}
		var ids []int64
		var eventRow int64
		inFlight := false
		for rows.Next() {
			var id int64
			var leased bool
			if err := rows.Scan(&id, &eventRow, &leased); err != nil {
				rows.Close()
				return fmt.Errorf("lock deliveries: %w", err)
			}
			ids = append(ids, id)
			inFlight = inFlight || leased
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock deliveries: %w", err)
		}
		if len(ids) == 0 {
			return ErrNotFound
		}
		if inFlight {
			return ErrInFlight
		}
		if _, err := tx.Exec(ctx, `
UPDATE outbox_deliveries
SET redeliveries = redeliveries + CASE WHEN status = 'PENDING' THEN 0 ELSE 1 END,
    attempts = CASE WHEN status = 'PENDING' THEN attempts ELSE 0 END,
    status = 'PENDING', next_attempt_at = $2, delivered_at = NULL
WHERE id = ANY($1)`, ids, now); err != nil {
			return fmt.Errorf("reset deliveries: %w", err)
		}
		if err := rollUp(ctx, tx, eventRow, now); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+deliveryColumns+`
FROM outbox_deliveries d JOIN outbox_events e ON e.id = d.event_row_id
WHERE d.id = ANY($1) ORDER BY d.id`, ids)
		if err != nil {
			return fmt.Errorf("read deliveries: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			d, err := scanDelivery(rows)
			if err != nil {
				return fmt.Errorf("read deliveries: %w", err)
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: redeliver %s: %w", eventID, err)
	}
	return out, nil
}

// rollUp recomputes an event's status from its deliveries. The caller holds the event's row lock
// (or the lock of all its deliveries), so concurrent recordings of one event's endpoints
// serialize and the last one sees every delivery's final state.
func rollUp(ctx context.Context, tx pgx.Tx, eventRow int64, now time.Time) error {
	_, err := tx.Exec(ctx, `
UPDATE outbox_events e
SET status = r.status,
    delivered_at = CASE WHEN r.status = 'DELIVERED' THEN COALESCE(e.delivered_at, $2::timestamptz) END,
    last_error = r.last_error,
    attempts = r.attempts
FROM (
    SELECT CASE WHEN bool_or(status = 'DEAD') THEN 'DEAD'
                WHEN bool_and(status = 'DELIVERED') THEN 'DELIVERED'
                ELSE 'PENDING' END AS status,
           COALESCE(string_agg(NULLIF(last_error, ''), '; ' ORDER BY endpoint), '') AS last_error,
           COALESCE(max(attempts), 0) AS attempts
    FROM outbox_deliveries WHERE event_row_id = $1
) r
WHERE e.id = $1`, eventRow, now)
	if err != nil {
		return fmt.Errorf("roll up event status: %w", err)
	}
	return nil
}

// newLeaseToken returns a random claim identifier.
func newLeaseToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// expandable is an event that has not been fanned out yet.
type expandable struct {
	rowID     int64
	eventID   string
	channel   string
	eventType string
}

// expand fans out up to limit events of the given channels to their matching endpoints, in one
// short transaction. Events locked by another dispatcher are skipped. It returns how many events
// it expanded.
func (q *Queue) expand(ctx context.Context, channels map[string]*channelPlan, limit int) (int, error) {
	names := make([]string, 0, len(channels))
	for name := range channels {
		names = append(names, name)
	}
	now := q.clock.Now()
	n := 0
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
SELECT id, event_id, channel, event_type FROM outbox_events
WHERE expanded_at IS NULL AND channel = ANY($1)
ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, names, limit)
		if err != nil {
			return fmt.Errorf("select events: %w", err)
		}
		events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (expandable, error) {
			var e expandable
			err := r.Scan(&e.rowID, &e.eventID, &e.channel, &e.eventType)
			return e, err
		})
		if err != nil {
			return fmt.Errorf("select events: %w", err)
		}
		if len(events) == 0 {
			return nil
		}
		var (
			dRow      []int64
			dEvent    []string
			dChannel  []string
			dEndpoint []string
			eRows     []int64
			eNone     []bool
		)
		for _, e := range events {
			matched := 0
			for _, ep := range channels[e.channel].endpoints {
				if ep.accepts(e.eventType) {
					dRow = append(dRow, e.rowID)
					dEvent = append(dEvent, e.eventID)
					dChannel = append(dChannel, e.channel)
					dEndpoint = append(dEndpoint, ep.name)
					matched++
				}
			}
			eRows = append(eRows, e.rowID)
			eNone = append(eNone, matched == 0)
		}
		if len(dRow) > 0 {
			if _, err := tx.Exec(ctx, `
INSERT INTO outbox_deliveries (event_row_id, event_id, channel, endpoint, next_attempt_at)
SELECT r, ev, ch, ep, $5 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS t(r, ev, ch, ep)
ON CONFLICT (event_id, endpoint) DO NOTHING`, dRow, dEvent, dChannel, dEndpoint, now); err != nil {
				return fmt.Errorf("insert deliveries: %w", err)
			}
		}
		// An event no endpoint wants has nothing left to deliver: it is DELIVERED at once.
		if _, err := tx.Exec(ctx, `
UPDATE outbox_events e
SET expanded_at = $3::timestamptz,
    status = CASE WHEN t.none THEN 'DELIVERED' ELSE e.status END,
    delivered_at = CASE WHEN t.none THEN $3::timestamptz ELSE e.delivered_at END
FROM unnest($1::bigint[], $2::bool[]) AS t(id, none)
WHERE e.id = t.id`, eRows, eNone, now); err != nil {
			return fmt.Errorf("mark events expanded: %w", err)
		}
		n = len(events)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: expand: %w", err)
	}
	return n, nil
}

// claimed is one delivery attempt handed to a dispatcher.
type claimed struct {
	id        int64
	eventRow  int64
	eventID   string
	channel   string
	endpoint  string
	attempt   int // 1-based, within the current cycle
	token     string
	payload   []byte
	claimedAt time.Time
}

// claim takes up to limit due deliveries of one endpoint: in one statement (its own short
// transaction) it locks them with SKIP LOCKED, so concurrent dispatchers never take the same
// row, counts the attempt and moves next_attempt_at to the lease's end, so that the claim comes
// back by itself if this dispatcher dies.
func (q *Queue) claim(ctx context.Context, channel, endpoint string, limit int, lease time.Duration) ([]claimed, error) {
	if limit <= 0 {
		return nil, nil
	}
	now := q.clock.Now()
	token := newLeaseToken()
	rows, err := q.pool.Query(ctx, `
WITH due AS (
    SELECT id FROM outbox_deliveries
    WHERE channel = $1 AND endpoint = $2 AND status = 'PENDING' AND next_attempt_at <= $3
    ORDER BY next_attempt_at, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_deliveries d
SET attempts = d.attempts + 1, next_attempt_at = $5, lease_token = $6, last_attempt_at = $3
FROM due, outbox_events e
WHERE d.id = due.id AND e.id = d.event_row_id
RETURNING d.id, d.event_row_id, d.event_id, d.attempts, e.payload::text`,
		channel, endpoint, now, limit, now.Add(lease), token)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim %s/%s: %w", channel, endpoint, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
		c := claimed{channel: channel, endpoint: endpoint, token: token, claimedAt: now}
		var payload string
		err := r.Scan(&c.id, &c.eventRow, &c.eventID, &c.attempt, &payload)
		c.payload = []byte(payload)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: claim %s/%s: %w", channel, endpoint, err)
	}
	return out, nil
}

// result is the outcome of one attempt, to be recorded.
type result struct {
	delivered  bool
	dead       bool
	nextAt     time.Time // when !delivered && !dead
	httpStatus int       // 0 without an answer
	errText    string    // "" when delivered
}

// record stores an attempt's result, if this claim still holds the lease (a claim taken over
// after its lease expired records nothing: the newer claimant owns the delivery), and rolls the
// event's status up. It reports whether the result was recorded.
func (q *Queue) record(ctx context.Context, c claimed, r result) (bool, error) {
	now := q.clock.Now()
	status := StatusPending
	switch {
	case r.delivered:
		status = StatusDelivered
	case r.dead:
		status = StatusDead
	}
	var httpStatus *int
	if r.httpStatus != 0 {
		httpStatus = &r.httpStatus
	}
	recorded := false
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		// The event's row lock serializes the recordings of its endpoints (see rollUp).
		if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox_events WHERE id = $1 FOR UPDATE`, c.eventRow); err != nil {
			return fmt.Errorf("lock event: %w", err)
		}
		tag, err := tx.Exec(ctx, `
UPDATE outbox_deliveries
SET status = $3::text, lease_token = NULL, last_http_status = $4, last_error = $5,
    next_attempt_at = CASE WHEN $3::text = 'PENDING' THEN $6::timestamptz ELSE next_attempt_at END,
    delivered_at = CASE WHEN $3::text = 'DELIVERED' THEN $7::timestamptz END
WHERE id = $1 AND lease_token = $2`,
			c.id, c.token, string(status), httpStatus, r.errText, r.nextAt, now)
		if err != nil {
			return fmt.Errorf("update delivery: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // the lease was lost; rolled back
		}
		recorded = true
		return rollUp(ctx, tx, c.eventRow, now)
	})
	if err != nil {
		return false, fmt.Errorf("outbox: record %s: %w", WebhookID(c.eventID, c.endpoint), err)
	}
	return recorded, nil
}

// backlogRow is one channel's queue figures, for the gauges.
type backlogRow struct {
	pending    int64
	oldestDue  *time.Time
	dead       int64
	unexpanded int64
	oldestNew  *time.Time
}

// stats reads the gauges' figures per channel. Each query reads a partial index only.
func (q *Queue) stats(ctx context.Context, channels []string) (map[string]*backlogRow, error) {
	out := make(map[string]*backlogRow, len(channels))
	for _, ch := range channels {
		out[ch] = &backlogRow{}
	}
	batch := &pgx.Batch{}
	batch.Queue(`SELECT channel, count(*), min(next_attempt_at) FROM outbox_deliveries
WHERE status = 'PENDING' AND channel = ANY($1) GROUP BY channel`, channels).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ch string
			var n int64
			var oldest *time.Time
			if err := rows.Scan(&ch, &n, &oldest); err != nil {
				return err
			}
			if r := out[ch]; r != nil {
				r.pending, r.oldestDue = n, oldest
			}
		}
		return rows.Err()
	})
	batch.Queue(`SELECT channel, count(*) FROM outbox_deliveries
WHERE status = 'DEAD' AND channel = ANY($1) GROUP BY channel`, channels).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ch string
			var n int64
			if err := rows.Scan(&ch, &n); err != nil {
				return err
			}
			if r := out[ch]; r != nil {
				r.dead = n
			}
		}
		return rows.Err()
	})
	batch.Queue(`SELECT channel, count(*), min(created_at) FROM outbox_events
WHERE expanded_at IS NULL AND channel = ANY($1) GROUP BY channel`, channels).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var ch string
			var n int64
			var oldest *time.Time
			if err := rows.Scan(&ch, &n, &oldest); err != nil {
				return err
			}
			if r := out[ch]; r != nil {
				r.unexpanded, r.oldestNew = n, oldest
			}
		}
		return rows.Err()
	})
	if err := q.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	return out, nil
}

// DeliveryView is a delivery as the operator tools print it and the merchant API answers it:
// stable snake_case JSON names, UTC RFC 3339 times, next_attempt_at only while pending.
type DeliveryView struct {
	ID             int64      `json:"id"`
	EventID        string     `json:"event_id"`
	WebhookID      string     `json:"webhook_id"`
	Channel        string     `json:"channel"`
	Endpoint       string     `json:"endpoint"`
	EventType      string     `json:"event_type"`
	OrderNo        string     `json:"order_no"`
	Status         string     `json:"status"`
	InFlight       bool       `json:"in_flight"`
	Attempts       int        `json:"attempts"`
	Redeliveries   int        `json:"redeliveries"`
	NextAttemptAt  *time.Time `json:"next_attempt_at,omitempty"`
	LastAttemptAt  *time.Time `json:"last_attempt_at,omitempty"`
	LastHTTPStatus int        `json:"last_http_status,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// View returns the delivery's DeliveryView.
func (d Delivery) View() DeliveryView {
	v := DeliveryView{ID: d.ID, EventID: d.EventID, WebhookID: d.WebhookID, Channel: d.Channel,
		Endpoint: d.Endpoint, EventType: d.EventType, OrderNo: d.OrderNo, Status: string(d.Status),
		InFlight: d.InFlight, Attempts: d.Attempts, Redeliveries: d.Redeliveries,
		LastAttemptAt: utcPtr(d.LastAttemptAt), LastHTTPStatus: d.LastHTTPStatus, LastError: d.LastError,
		DeliveredAt: utcPtr(d.DeliveredAt), CreatedAt: d.CreatedAt.UTC()}
	if d.Status == StatusPending {
		next := d.NextAttemptAt.UTC()
		v.NextAttemptAt = &next
	}
	return v
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
